"""The client's side of SASL, for a broker connecting to another broker's SASL_PLAINTEXT
or SASL_SSL inter-broker listener (Kafka's ``sasl.mechanism.inter.broker.protocol``).

PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), as Kafka's SaslClient
sends them after SaslHandshake v1, each token in a SaslAuthenticate. A mechanism is a
small state machine: :meth:`first` is the first token, :meth:`next` answers each
challenge and returns None when the exchange is complete; a server answer that does not
verify raises :class:`SaslClientError`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

__all__ = ["CLIENT_MECHANISMS", "SaslClientError", "SaslCredentials", "client_for"]

# Kafka's client mechanisms a broker can log in to another broker with.
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslClientError(Exception):
    """The server's SCRAM answer did not verify, or was malformed."""


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)


class PlainClient:
    def __init__(self, credentials: SaslCredentials) -> None:
        self._credentials = credentials

    def first(self) -> bytes:
        c = self._credentials
        return f"\0{c.username}\0{c.password}".encode()

    def next(self, challenge: bytes) -> bytes | None:
        return None


def _saslname(username: str) -> str:
    """RFC 5802 5.1: "=" and "," are escaped in the user name."""
    return username.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """client-first -> server-first -> client-final -> server-final (verified)."""

    def __init__(self, credentials: SaslCredentials, nonce: str | None = None) -> None:
        self._credentials = credentials
        self._hash = _SCRAM_HASHES[credentials.mechanism]
        self._nonce = nonce or base64.b64encode(secrets.token_bytes(24)).decode()
        self._client_first_bare = f"n={_saslname(credentials.username)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self._hash).digest()

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def next(self, challenge: bytes) -> bytes | None:
        if self._server_signature is None:
            return self._client_final(challenge)
        self._verify_server_final(challenge)
        return None

    def _client_final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode()
            attributes = dict(part.split("=", 1) for part in text.split(","))
            nonce, iterations = attributes["r"], int(attributes["i"])
            salt = base64.b64decode(attributes["s"], validate=True)
        except (UnicodeDecodeError, ValueError, KeyError) as e:
            raise SaslClientError(f"malformed SCRAM server-first message: {e}") from None
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise SaslClientError("the SCRAM server's nonce does not extend the client's")
        salted = hashlib.pbkdf2_hmac(self._hash, self._credentials.password.encode(), salt,
                                     iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"  # biws: base64 of the gs2 header "n,,"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: bytes) -> None:
        text = server_final.decode(errors="replace")
        if text.startswith("e="):
            raise SaslClientError(f"the SCRAM server refused: {text[2:]}")
        if not text.startswith("v="):
            raise SaslClientError("malformed SCRAM server-final message")
        try:
            signature = base64.b64decode(text[2:].split(",", 1)[0], validate=True)
        except ValueError:
            raise SaslClientError("malformed SCRAM server signature") from None
        assert self._server_signature is not None
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslClientError("the SCRAM server's signature does not verify: it does "
                                  "not know this user's credentials")


def client_for(credentials: SaslCredentials) -> PlainClient | ScramClient:
    if credentials.mechanism == "PLAIN":
        return PlainClient(credentials)
    if credentials.mechanism in _SCRAM_HASHES:
        return ScramClient(credentials)
    raise ValueError(f"{credentials.mechanism} is not a client mechanism; one of "
                     + ", ".join(CLIENT_MECHANISMS))
