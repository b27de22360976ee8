"""The ``[plugins.auth_sasl]`` table: Kafka's names where Kafka has one."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.config import int_at_least, setting

__all__ = ["SUPPORTED_MECHANISMS", "AuthSaslSettings"]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _supported(names: list[str]) -> str | None:
    if names and all(n in SUPPORTED_MECHANISMS for n in names):
        return None
    return "one or more of " + ", ".join(SUPPORTED_MECHANISMS)


@dataclass(frozen=True, slots=True)
class AuthSaslSettings:
    sasl_enabled_mechanisms: list[str] = setting(
        "sasl.enabled.mechanisms", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
        "The mechanisms SaslHandshake offers on every SASL listener, of PLAIN, "
        "SCRAM-SHA-256 and SCRAM-SHA-512.", check=_supported,
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
