"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer checks it."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from pathlib import Path

from plugins.auth_sasl.exchange import AuthenticationFailed

__all__ = ["PlainServer", "parse_users", "read_users_file"]


def parse_users(lines: Iterable[str], source: str) -> dict[str, str]:
    """``user:password`` lines -> users; a line without a user or a colon is refused with
    its place (never its content: it holds a password)."""
    users: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user:
            raise ValueError(f"{source}: line {number}: expected user:password")
        users[user] = password
    return users


def read_users_file(path: str) -> dict[str, str]:
    return parse_users(Path(path).read_text(encoding="utf-8").splitlines(), path)


class PlainServer:
    """One connection's PLAIN exchange: a single message, authzid NUL authcid NUL passwd."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        tokens = response.split(b"\0")
        if len(tokens) != 3:
            raise AuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        try:
            authzid, username, password = (t.decode("utf-8") for t in tokens)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Compared in constant time; an unknown user costs the same comparison.
        known = expected is not None
        if not (hmac.compare_digest((expected or "").encode(), password.encode()) and known):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        self.username = username
        self.complete = True
        return b""
