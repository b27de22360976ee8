"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer runs
them: the credentials kept are (salt, StoredKey, ServerKey, iterations), never the
password, and the ``tokenauth`` extension (delegation tokens) is refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from plugins.auth_sasl.exchange import AuthenticationFailed, InvalidCredentials

__all__ = ["MECHANISMS", "ScramCredential", "ScramMechanism", "ScramServer"]


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    hash_name: str
    kafka_type: int  # AlterUserScramCredentials' mechanism byte
    min_iterations: int = 4096
    max_iterations: int = 16384

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)

    def keys(self, salted_password: bytes) -> tuple[bytes, bytes]:
        """StoredKey and ServerKey: all the broker keeps of a salted password."""
        client_key = self.hmac(salted_password, b"Client Key")
        return self.hash(client_key), self.hmac(salted_password, b"Server Key")


MECHANISMS = {m.name: m for m in (
    ScramMechanism("SCRAM-SHA-256", "sha256", 1),
    ScramMechanism("SCRAM-SHA-512", "sha512", 2),
)}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


# RFC 5802 7: gs2-header, then n=saslname,r=nonce and optional extensions.
_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>[^,]*))?,(?P<bare>n=(?P<saslname>[^,]*),r=(?P<nonce>[^,]+)"
    r"(?P<extensions>(?:,[^,=]+=[^,]*)*))")
_CLIENT_FINAL = re.compile(
    r"(?P<without_proof>c=(?P<binding>[^,]*),r=(?P<nonce>[^,]*)(?:,[^,=]+=[^,]*)*?),"
    r"p=(?P<proof>[^,]+)")


def _username(saslname: str) -> str:
    """RFC 5802 5.1: "=2C" is ",", "=3D" is "="; any other "=" is malformed."""
    if re.search(r"=(?!2C|3D)", saslname):
        raise InvalidCredentials("Invalid username: " + saslname)
    return saslname.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One connection's SCRAM exchange: client-first -> server-first, client-final ->
    server-final."""

    def __init__(self, mechanism: ScramMechanism,
                 credentials: Callable[[str, str], ScramCredential | None]) -> None:
        self._mechanism = mechanism
        self._credentials = credentials
        self._first: re.Match[str] | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.complete = False
        self.username: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidCredentials("SCRAM message is not UTF-8") from None
        if self._first is None:
            return self._client_first(text)
        if not self.complete and self._credential is not None:
            return self._client_final(text)
        raise InvalidCredentials("Unexpected SCRAM message after the exchange")

    def _client_first(self, text: str) -> bytes:
        first = _CLIENT_FIRST.fullmatch(text)
        if first is None:
            raise InvalidCredentials("Invalid SCRAM client first message format")
        extensions = dict(e.split("=", 1) for e in first["extensions"].split(",") if e)
        if extensions.get("tokenauth", "false").lower() == "true":
            raise InvalidCredentials("Token authentication is not supported")
        username = _username(first["saslname"])
        credential = self._credentials(username, self._mechanism.name)
        if credential is None:
            raise InvalidCredentials("Authentication failed: Invalid user credentials")
        authzid = first["authzid"]
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        if credential.iterations < self._mechanism.min_iterations:
            raise InvalidCredentials(f"Iterations {credential.iterations} is less than the "
                                     f"minimum {self._mechanism.min_iterations}")
        self._first, self._credential, self.username = first, credential, username
        self._nonce = first["nonce"] + secrets.token_hex(16)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        assert self._first is not None and self._credential is not None
        final = _CLIENT_FINAL.fullmatch(text)
        if final is None:
            raise InvalidCredentials("Invalid SCRAM client final message format")
        # Kafka checks endsWith, not equality: librdkafka 2.0 repeats the client nonce.
        if not final["nonce"].endswith(self._nonce):
            raise InvalidCredentials("Invalid client nonce in the final client message.")
        gs2_header = self._first.string[: self._first.start("bare")]
        try:
            binding = base64.b64decode(final["binding"], validate=True)
            proof = base64.b64decode(final["proof"], validate=True)
        except ValueError:
            raise InvalidCredentials("Invalid SCRAM client final message encoding") from None
        if binding != gs2_header.encode():
            raise InvalidCredentials("Invalid channel binding")
        auth_message = ",".join(
            (self._first["bare"], self._server_first, final["without_proof"])).encode()
        m, credential = self._mechanism, self._credential
        signature = m.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise InvalidCredentials("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(m.hash(client_key), credential.stored_key):
            raise InvalidCredentials("Invalid client credentials")
        self.complete = True
        server_signature = m.hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)
