"""SASL/OAUTHBEARER (RFC 7628, KIP-255) with JWTs checked against a JWKS, as Kafka's
OAuthBearerValidatorCallbackHandler does (KIP-768).

The client's first message carries ``auth=Bearer <JWT>``. The JWT's signature must
verify with a key of the JWKS at ``sasl.oauthbearer.jwks.endpoint.url`` (the key its
``kid`` names, with an asymmetric algorithm: never ``none`` nor a shared secret), it
must carry ``exp`` (not past, with ``sasl.oauthbearer.clock.skew.seconds``) and the
principal claim (``sasl.oauthbearer.sub.claim.name``), and the configured audience and
issuer. The principal is ``User:<that claim>``.

A token that fails is answered as RFC 7628 says: an error challenge
``{"status":"invalid_token"}``, which the client acknowledges with %x01, then the
failure. The JWKS is fetched off the event loop, at start and every
``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and sooner (at most every 10 s) when a
token names a key id the JWKS lacks, so a rotated key is picked up.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from plugins.auth_sasl.exchange import AuthenticationFailed, InvalidCredentials

__all__ = ["Jwks", "JwtValidator", "OAuthBearerServer", "parse_client_first"]

SEPARATOR = b"\x01"
# RFC 7628's client initial response, as Kafka's OAuthBearerClientInitialResponse reads it.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KVPAIRS = r"(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>{_KVPAIRS})\x01", re.DOTALL)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
INVALID_TOKEN = '{"status":"invalid_token"}'
# Kafka's RefreshingHttpsJwks: a missing key id expedites a refresh at most this often.
MISSING_KID_REFRESH_MS = 10_000
# Algorithms a JWKS key may verify with: public-key ones only (a JWKS publishes no
# secrets, and "none" verifies nothing).
ASYMMETRIC_ALGORITHMS = frozenset({
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
    "EdDSA"})


def parse_client_first(message: bytes) -> tuple[str, str]:
    """(authorization id, token) of a client's first message; raises InvalidCredentials
    (Kafka's SaslException) for one that is not RFC 7628's."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidCredentials("Invalid OAUTHBEARER client first message: not UTF-8") from None
    match = _CLIENT_FIRST.fullmatch(text)
    if match is None:
        raise InvalidCredentials("Invalid OAUTHBEARER client first message")
    pairs = dict(p.split("=", 1) for p in match["kvpairs"].split("\x01") if p)
    auth = pairs.get("auth")
    if auth is None:
        raise InvalidCredentials(
            "Invalid OAUTHBEARER client first message: 'auth' not specified")
    bearer = _AUTH.fullmatch(auth)
    if bearer is None:
        raise InvalidCredentials("Invalid OAUTHBEARER client first message: invalid 'auth'")
    if bearer["scheme"].lower() != "bearer":
        raise InvalidCredentials(
            f"Invalid scheme in OAUTHBEARER client first message: {bearer['scheme']}")
    authzid = (match["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
    return authzid, bearer["token"]


class InvalidToken(Exception):
    """Why a token was refused: logged, never sent to the client."""


class Jwks:
    """The verification keys of one JWKS URL (file://, http://, https://). Fetched in a
    worker thread; the event loop only swaps the parsed key set in."""

    def __init__(self, url: str, refresh_ms: int, log: Any,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._url = url
        self._refresh_ms = refresh_ms
        self._log = log
        self._clock = clock
        self._keys: dict[str | None, Any] = {}
        self._last_expedited = -float("inf")
        self._task: asyncio.Task[None] | None = None
        self._expedited: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._every())

    async def stop(self) -> None:
        for task in (self._task, self._expedited):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _every(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_ms / 1000)
            await self.refresh()

    async def refresh(self) -> None:
        try:
            document = await asyncio.to_thread(_fetch, self._url)
            self._keys = _parse_jwks(document)
        except Exception as e:  # an unreachable IdP: keep the keys we have
            self._log.warning("cannot fetch the OAUTHBEARER JWKS", url=self._url,
                              reason=str(e) or type(e).__name__)

    def key(self, kid: str | None) -> Any | None:
        key = self._keys.get(kid)
        if key is None and kid is None and len(self._keys) == 1:
            key = next(iter(self._keys.values()))  # a JWKS of one key, a token without kid
        if key is None:
            self._expedite()
        return key

    def _expedite(self) -> None:
        now = self._clock()
        if (now - self._last_expedited) * 1000 < MISSING_KID_REFRESH_MS:
            return
        self._last_expedited = now
        self._expedited = asyncio.get_running_loop().create_task(self.refresh())


def _fetch(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _parse_jwks(document: Any) -> dict[str | None, Any]:
    import jwt
    keys: dict[str | None, Any] = {}
    for jwk in jwt.PyJWKSet.from_dict(document).keys:
        keys[jwk.key_id] = jwk
    return keys


@dataclass(frozen=True, slots=True)
class JwtSettings:
    expected_audience: tuple[str, ...]
    expected_issuer: str | None
    sub_claim_name: str
    clock_skew_seconds: int


class JwtValidator:
    def __init__(self, jwks: Jwks, settings: JwtSettings) -> None:
        self._jwks = jwks
        self._settings = settings

    def validate(self, token: str) -> tuple[str, int]:
        """(principal name, expiry in ms) of a valid token; raises InvalidToken."""
        import jwt
        s = self._settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise InvalidToken(f"malformed JWT: {e}") from None
        algorithm = header.get("alg")
        if algorithm not in ASYMMETRIC_ALGORITHMS:
            raise InvalidToken(f"JWT algorithm {algorithm!r} is not allowed")
        key = self._jwks.key(header.get("kid"))
        if key is None:
            raise InvalidToken(f"no key in the JWKS for kid {header.get('kid')!r}")
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[algorithm],
                audience=list(s.expected_audience) or None, issuer=s.expected_issuer,
                leeway=s.clock_skew_seconds,
                options={"require": ["exp"], "verify_aud": bool(s.expected_audience)})
        except jwt.PyJWTError as e:
            raise InvalidToken(str(e)) from None
        principal = claims.get(s.sub_claim_name)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"the JWT has no {s.sub_claim_name!r} claim")
        return principal, int(float(claims["exp"]) * 1000)


class OAuthBearerServer:
    """One connection's OAUTHBEARER exchange (Kafka's OAuthBearerSaslServer)."""

    def __init__(self, validator: JwtValidator) -> None:
        self._validator = validator
        self._error: str | None = None
        self._reason = ""
        self.complete = False
        self.username: str | None = None
        self.expires_at_ms: int | None = None

    def evaluate(self, response: bytes) -> bytes:
        if response == SEPARATOR and self._error is not None:
            # the client acknowledged our error challenge: the exchange fails
            raise AuthenticationFailed(self._error, reason=self._reason)
        self._error = None
        authzid, token = parse_client_first(response)
        try:
            principal, expires_at_ms = self._validator.validate(token)
        except InvalidToken as e:
            self._error, self._reason = INVALID_TOKEN, f"invalid token: {e}"
            return self._error.encode()
        if authzid and authzid != principal:
            raise AuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({principal})")
        self.username, self.expires_at_ms, self.complete = principal, expires_at_ms, True
        return b""
