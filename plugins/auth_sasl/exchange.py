"""How a mechanism's exchange fails, as Kafka's SaslServerAuthenticator tells the client."""

from __future__ import annotations

__all__ = ["AuthenticationFailed", "InvalidCredentials"]


class AuthenticationFailed(Exception):
    """Kafka's SaslAuthenticationException: its message is sent to the client; the
    reason, when given, is what the broker logs (OAUTHBEARER's message is a bare status)."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class InvalidCredentials(Exception):
    """Kafka's SaslException: the client is told only that its credentials were invalid
    (the reason may reveal whether the user exists); the reason is logged."""
