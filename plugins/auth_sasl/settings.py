"""The ``[plugins.auth_sasl]`` table: Kafka's names where Kafka has one."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.api.config import int_at_least, setting

__all__ = ["SUPPORTED_MECHANISMS", "AuthSaslSettings"]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def _supported(names: list[str]) -> str | None:
    if names and all(n in SUPPORTED_MECHANISMS for n in names):
        return None
    return "one or more of " + ", ".join(SUPPORTED_MECHANISMS)


@dataclass(frozen=True, slots=True)
class AuthSaslSettings:
    sasl_enabled_mechanisms: list[str] = setting(
        "sasl.enabled.mechanisms", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
        "The mechanisms SaslHandshake offers on every SASL listener, of PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (which needs "
        "sasl.oauthbearer.jwks.endpoint.url).", check=_supported,
    )
    plain_users_file: str | None = setting(
        "plain.users.file", None,
        "A file of PLAIN users, one `user:password` line each (blank lines and lines "
        "starting with # are skipped), read at startup.",
    )
    plain_users: list[str] = setting(
        "plain.users", [],
        "PLAIN users inline, as `user:password` strings; prefer plain.users.file.",
        sensitive=True,
    )
    connection_failed_authentication_delay_ms: int = setting(
        "connection.failed.authentication.delay.ms", 100,
        "How long the answer to a failed authentication, and the close of its "
        "connection, are delayed.", check=int_at_least(0),
    )
    # OAUTHBEARER (KIP-768): Kafka's names for its JWT validation.
    sasl_oauthbearer_jwks_endpoint_url: str | None = setting(
        "sasl.oauthbearer.jwks.endpoint.url", None,
        "The JWKS (file://, http:// or https://) whose keys verify OAUTHBEARER tokens.",
    )
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = setting(
        "sasl.oauthbearer.jwks.endpoint.refresh.ms", 3600000,
        "How often the JWKS is fetched again (a token naming an unknown key id fetches "
        "it sooner, at most every 10 s).", check=int_at_least(1),
    )
    sasl_oauthbearer_expected_audience: list[str] = setting(
        "sasl.oauthbearer.expected.audience", [],
        "Audiences a token's aud claim must name one of; empty: aud is not checked.",
    )
    sasl_oauthbearer_expected_issuer: str | None = setting(
        "sasl.oauthbearer.expected.issuer", None,
        "The iss claim a token must carry; unset: iss is not checked.",
    )
    sasl_oauthbearer_sub_claim_name: str = setting(
        "sasl.oauthbearer.sub.claim.name", "sub",
        "The claim that names the principal (User:<claim>).",
    )
    sasl_oauthbearer_scope_claim_name: str = setting(
        "sasl.oauthbearer.scope.claim.name", "scope",
        "The claim holding the token's scopes (accepted for Kafka compatibility; ACLs "
        "decide what a principal may do).",
    )
    sasl_oauthbearer_clock_skew_seconds: int = setting(
        "sasl.oauthbearer.clock.skew.seconds", 30,
        "Leeway allowed between the broker's clock and the token's exp, nbf and iat.",
        check=int_at_least(0),
    )
