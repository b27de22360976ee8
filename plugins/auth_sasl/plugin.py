"""The plugin object: one instance per broker, holding that broker's PLAIN users, SCRAM
credentials and failed-authentication counter, and serving SaslHandshake and
SaslAuthenticate on SASL_* listeners (the kernel admits nothing else before them)."""

from __future__ import annotations

import asyncio
import datetime
import importlib.util
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from prometheus_client import Counter

from kernel.api.config import SASL_ENABLED_MECHANISMS, ConfigError, ConfigSchema
from kernel.api.errors import InvalidRequest
from kernel.api.handlers import LISTENER_ROLES, ApiRegistry, RequestContext, Session
from kernel.api.hooks import hookimpl
from kernel.api.protocol import make, response_module
from kernel.api.sasl import SaslMechanismRegistry
from kernel.api.services import PluginServices
from plugins.auth_sasl import credentials_api
from plugins.auth_sasl.credentials import ScramCredentials
from plugins.auth_sasl.exchange import AuthenticationFailed, InvalidCredentials
from plugins.auth_sasl.oauthbearer import Jwks, JwtSettings, JwtValidator, OAuthBearerServer
from plugins.auth_sasl.plain import PlainServer, parse_users, read_users_file
from plugins.auth_sasl.scram import MECHANISMS, ScramServer
from plugins.auth_sasl.settings import SUPPORTED_MECHANISMS, AuthSaslSettings

__all__ = ["PLUGIN_NAME", "AuthSaslPlugin"]

PLUGIN_NAME = "auth_sasl"
# Session.extensions key of what a completed exchange leaves for re-authentication.
_AUTHENTICATED = PLUGIN_NAME + ".authenticated"
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


# Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS
MIN_REAUTH_INTERVAL_S = 1.0


@dataclass(slots=True)
class _Authenticated:
    """A completed exchange, which a KIP-368 re-authentication must repeat: the same
    mechanism and principal."""

    mechanism: str
    principal: str
    reauthenticable: bool  # the client used SaslAuthenticate v1+, so knows its lifetime
    reauth_started: float | None = None

    def may_reauthenticate(self, session: Session) -> bool:
        """As Kafka's KafkaChannel.maybeBeginServerReauthentication: only a session with
        a lifetime, and at most once a second; otherwise the SaslHandshake is answered
        as on any authenticated connection."""
        now = time.monotonic()
        if not self.reauthenticable or session.session_expires_at is None or (
                self.reauth_started is not None
                and now - self.reauth_started < MIN_REAUTH_INTERVAL_S):
            return False
        self.reauth_started = now
        return True


@dataclass(frozen=True, slots=True)
class _BadMechanism:
    """A re-authentication that asked for another mechanism: its SaslAuthenticate fails."""

    message: str


class AuthSaslPlugin:
    def __init__(self) -> None:
        self._settings = AuthSaslSettings()
        self._given = AuthSaslSettings()  # as the file has them; _configure checks them
        self._plain_users: dict[str, str] = {}
        self._scram: ScramCredentials | None = None
        self._broker: PluginServices | None = None
        self._failed: Counter | None = None
        self._reauthenticated: Counter | None = None
        self._failed_reauthentication: Counter | None = None
        self._jwks: Jwks | None = None
        # listener -> the mechanisms its SaslHandshake offers, where Kafka's
        # listener.name.<listener>.sasl.enabled.mechanisms overrides the plugin's list
        self._offered: dict[str, tuple[str, ...]] = {}
        self._jwt_validator: JwtValidator | None = None
        self._succeeded: Counter | None = None

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{PLUGIN_NAME}", AuthSaslSettings)

    @hookimpl
    def kafkernel_register_sasl_mechanisms(self, registry: SaslMechanismRegistry) -> None:
        # Registration comes before the plugin sees its settings: every mechanism it
        # supports is registered, and SaslHandshake offers the sasl.enabled.mechanisms.
        for name in SUPPORTED_MECHANISMS:
            registry.register(name, self._exchange_factory(name))

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        # v0 of SaslHandshake is followed by raw tokens (Session.raw_sasl_token), v1 by
        # SaslAuthenticate requests. Controller listeners authenticate too, as Kafka's.
        registry.register(SASL_HANDSHAKE, self.handshake, min_version=0, max_version=1,
                          listeners=LISTENER_ROLES)
        registry.register(SASL_AUTHENTICATE, self.authenticate, min_version=0, max_version=2,
                          listeners=LISTENER_ROLES)
        credentials_api.register(registry, self.scram)

    def scram(self) -> ScramCredentials:
        """Set at startup; listeners serve only after that, so handlers always find it.
        A method, not a property that raises (as jwt_validator): pluggy reads every
        attribute of a plugin object when it registers it."""
        if self._scram is None:
            raise RuntimeError("the auth_sasl plugin has not started")
        return self._scram

    def jwt_validator(self) -> JwtValidator:
        """Set at startup when OAUTHBEARER is enabled; SaslHandshake offers it only then."""
        if self._jwt_validator is None:
            raise RuntimeError("OAUTHBEARER is not enabled")
        return self._jwt_validator

    @hookimpl
    def kafkernel_configure(self, settings: AuthSaslSettings) -> None:
        self._given = settings

    @hookimpl
    def kafkernel_startup(self, broker: PluginServices) -> Awaitable[None] | None:
        self._broker = broker
        self._scram = ScramCredentials(broker.metadata)
        self._offered = _listener_mechanisms(broker, broker.loaded.source)
        self._configure(self._given, broker.loaded.source)
        registry = broker.metrics.registry
        self._failed = Counter(
            "kafkernel_failed_authentication", "SASL authentications that failed.",
            registry=registry)
        self._succeeded = Counter(
            "kafkernel_successful_authentication", "SASL authentications that succeeded.",
            registry=registry)
        # Kafka's successful-reauthentication and failed-reauthentication (KIP-368).
        self._reauthenticated = Counter(
            "kafkernel_successful_reauthentication",
            "SASL re-authentications (KIP-368) that succeeded.", registry=registry)
        self._failed_reauthentication = Counter(
            "kafkernel_failed_reauthentication",
            "SASL re-authentications (KIP-368) that failed.", registry=registry)
        s = self._settings
        if not any("OAUTHBEARER" in m for m in (s.sasl_enabled_mechanisms,
                                                  *self._offered.values())):
            return None
        assert s.sasl_oauthbearer_jwks_endpoint_url is not None  # checked by _configure
        self._jwks = Jwks(s.sasl_oauthbearer_jwks_endpoint_url,
                          s.sasl_oauthbearer_jwks_endpoint_refresh_ms,
                          broker.log.bind(component=PLUGIN_NAME))
        self._jwt_validator = JwtValidator(self._jwks, JwtSettings(
            tuple(s.sasl_oauthbearer_expected_audience), s.sasl_oauthbearer_expected_issuer,
            s.sasl_oauthbearer_sub_claim_name, s.sasl_oauthbearer_clock_skew_seconds))
        return self._jwks.start()

    @hookimpl
    def kafkernel_shutdown(self, broker: PluginServices) -> Awaitable[None] | None:
        return self._jwks.stop() if self._jwks is not None else None

    def _configure(self, settings: AuthSaslSettings, source: str) -> None:
        """PLAIN users from plain.users and plain.users.file; a bad line is named by
        its place, never its content (it holds a password)."""
        where = f"{source}: plugins.{PLUGIN_NAME}"
        try:
            users = parse_users(settings.plain_users, f"{where}.plain.users")
            if settings.plain_users_file:
                users.update(read_users_file(settings.plain_users_file))
            if "OAUTHBEARER" in settings.sasl_enabled_mechanisms or any(
                    "OAUTHBEARER" in m for m in self._offered.values()):
                _check_oauthbearer(settings, where)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        except OSError as e:
            raise ConfigError(f"{where}.plain.users.file: cannot read "
                              f"{settings.plain_users_file}: {e.strerror}") from None
        self._settings, self._plain_users = settings, users

    def _exchange_factory(self, name: str) -> Any:
        if name == "PLAIN":
            return lambda: PlainServer(self._plain_users)
        if name == "OAUTHBEARER":
            return lambda: OAuthBearerServer(self.jwt_validator())
        mechanism = MECHANISMS[name]
        return lambda: ScramServer(mechanism, lambda user, name: self.scram().get(user, name))

    # -- the exchange ----------------------------------------------------------------

    def handshake(self, ctx: RequestContext, request: Any) -> Any:
        session = ctx.session
        m = response_module(SASL_HANDSHAKE, ctx.api_version)
        previous: _Authenticated | None = session.extensions.get(_AUTHENTICATED)
        reauthenticating = (session.authenticated and previous is not None
                            and ctx.api_version >= 1 and previous.may_reauthenticate(session))
        if session.authenticated and not reauthenticating:
            # Kafka's KafkaApis: an authenticated connection (PLAINTEXT, SSL, or after
            # an exchange without KIP-368 support) is answered, not closed.
            return m.SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state,
                                           mechanisms=())
        if PLUGIN_NAME in session.extensions:
            raise InvalidRequest("SaslHandshake during SASL authentication")
        offered = self._offered.get(session.listener_name,
                                    tuple(self._settings.sasl_enabled_mechanisms))
        if request.mechanism not in offered:
            self._log_failure(session, request.mechanism, "unsupported SASL mechanism")
            session.close_after_response = True
            return m.SaslHandshakeResponse(
                error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=offered)
        if reauthenticating and previous is not None and request.mechanism != previous.mechanism:
            # Kafka answers the handshake and fails the SaslAuthenticate that follows
            # (its REAUTH_BAD_MECHANISM state).
            session.extensions[PLUGIN_NAME] = (request.mechanism, _BadMechanism(
                f"SASL mechanism '{request.mechanism}' requested by client is not "
                f"supported for re-authentication of mechanism '{previous.mechanism}'"))
            return m.SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=offered)
        exchange = self._exchange_factory(request.mechanism)()
        session.extensions[PLUGIN_NAME] = (request.mechanism, exchange)
        if ctx.api_version == 0:
            mechanism = request.mechanism
            session.raw_sasl_token = lambda token: self._raw_token(
                session, mechanism, exchange, token)
        return m.SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=offered)

    def _raw_token(self, session: Session, name: str, exchange: Any,
                   token: bytes) -> bytes | Awaitable[bytes]:
        """One client token after SaslHandshake v0 (KIP-43's raw framing): the
        mechanism's answer, sent back size-prefixed by the kernel. A failed login has no
        error answer in this framing: Kafka closes the connection, after
        connection.failed.authentication.delay.ms."""
        try:
            challenge = exchange.evaluate(token)
        except (AuthenticationFailed, InvalidCredentials) as e:
            self._log_failure(session, name, getattr(e, "reason", str(e)))
            if self._failed is not None:
                self._failed.inc()
            session.raw_sasl_token = None
            delay_ms = self._settings.connection_failed_authentication_delay_ms

            async def closed() -> bytes:
                await asyncio.sleep(delay_ms / 1000)
                raise InvalidRequest(f"SASL {name} authentication failed")

            return closed()
        if exchange.complete:
            self._authenticated(session, name, exchange, reauthenticable=False)
            session.raw_sasl_token = None
        return challenge

    def _authenticated(self, session: Session, mechanism: str, exchange: Any, *,
                       reauthenticable: bool) -> int:
        """Authenticate the session; returns its KIP-368 lifetime in ms (0: unlimited),
        as Kafka's ReauthInfo computes it: the smaller of connections.max.reauth.ms and
        the time left on the credential."""
        assert exchange.username is not None
        expires_at_ms = getattr(exchange, "expires_at_ms", None)
        session.authenticate("User:" + exchange.username, expires_at_ms=expires_at_ms)
        del session.extensions[PLUGIN_NAME]
        previous = session.extensions.get(_AUTHENTICATED)
        session.extensions[_AUTHENTICATED] = _Authenticated(
            mechanism, session.principal or "", reauthenticable,
            previous.reauth_started if previous is not None else None)
        if self._succeeded is not None:
            self._succeeded.inc()
        assert self._broker is not None
        max_reauth_ms = self._broker.config.connections_max_reauth_ms
        if expires_at_ms is None and max_reauth_ms <= 0:
            session.session_expires_at = None
            return 0
        left = max_reauth_ms if expires_at_ms is None else expires_at_ms - int(time.time() * 1000)
        if expires_at_ms is not None and max_reauth_ms > 0:
            left = min(left, max_reauth_ms)
        lifetime_ms = max(0, left)
        session.session_expires_at = time.monotonic() + lifetime_ms / 1000
        return lifetime_ms

    def authenticate(self, ctx: RequestContext, request: Any) -> Any:
        session = ctx.session
        state = session.extensions.get(PLUGIN_NAME)
        m = response_module(SASL_AUTHENTICATE, ctx.api_version)
        if session.authenticated and state is None:
            return make(m.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                        error_message="SaslAuthenticate request received after successful "
                        "authentication", auth_bytes=b"",
                        session_lifetime=datetime.timedelta(0))
        if state is None:
            raise InvalidRequest("SaslAuthenticate without a SaslHandshake")
        name, exchange = state
        previous: _Authenticated | None = (session.extensions.get(_AUTHENTICATED)
                                           if session.authenticated else None)
        what = "re-authentication" if previous is not None else "authentication"
        try:
            if isinstance(exchange, _BadMechanism):
                raise AuthenticationFailed(exchange.message)
            challenge = exchange.evaluate(request.auth_bytes)
            if (previous is not None and exchange.complete
                    and "User:" + (exchange.username or "") != previous.principal):
                raise AuthenticationFailed(
                    "Cannot change principals during re-authentication from "
                    f"{previous.principal.replace(':', '.', 1)}: "
                    f"User.{exchange.username}")
        except AuthenticationFailed as e:
            return self._failure(ctx, m, name, e.reason, str(e), reauth=previous is not None)
        except InvalidCredentials as e:
            message = (f"Authentication failed during {what} due to invalid "
                       f"credentials with SASL mechanism {name}")
            return self._failure(ctx, m, name, str(e), message, reauth=previous is not None)
        lifetime_ms = 0
        if exchange.complete:
            lifetime_ms = self._authenticated(session, name, exchange,
                                              reauthenticable=ctx.api_version >= 1)
            if previous is not None and self._reauthenticated is not None:
                self._reauthenticated.inc()
        # Kafka's answer carries an empty error message, not a null one
        return make(m.SaslAuthenticateResponse, error_code=ErrorCode.none,
                    error_message="", auth_bytes=challenge,
                    session_lifetime=datetime.timedelta(milliseconds=lifetime_ms))

    def _failure(self, ctx: RequestContext, m: Any, mechanism: str, reason: str,
                 message: str, *, reauth: bool = False) -> Any:
        """Kafka answers SASL_AUTHENTICATION_FAILED and closes the connection, both
        after connection.failed.authentication.delay.ms (which slows password guessing)."""
        session = ctx.session
        self._log_failure(session, mechanism, reason)
        failed = self._failed_reauthentication if reauth else self._failed
        if failed is not None:
            failed.inc()
        session.close_after_response = True
        response = make(m.SaslAuthenticateResponse,
                        error_code=ErrorCode.sasl_authentication_failed,
                        error_message=message, auth_bytes=b"",
                        session_lifetime=datetime.timedelta(0))
        delay_ms = self._settings.connection_failed_authentication_delay_ms
        if delay_ms == 0:
            return response

        async def delayed() -> Any:
            await asyncio.sleep(delay_ms / 1000)
            return response

        return delayed()

    def _log_failure(self, session: Session, mechanism: str, reason: str) -> None:
        if self._broker is not None:
            # The reason never holds a password: the mechanisms' messages name none.
            self._broker.log.warning(
                "failed authentication", client=session.peer,
                listener=session.listener_name, mechanism=mechanism, reason=reason)


def _check_oauthbearer(settings: AuthSaslSettings, where: str) -> None:
    if settings.sasl_oauthbearer_jwks_endpoint_url is None:
        raise ValueError(f"{where}.sasl.oauthbearer.jwks.endpoint.url: OAUTHBEARER is "
                         "enabled, and tokens are checked against this JWKS: set it")
    if importlib.util.find_spec("jwt") is None:
        raise ValueError(f"{where}.sasl.enabled.mechanisms: OAUTHBEARER needs PyJWT: "
                         "install kafkernel[oauth]")


def _listener_mechanisms(broker: PluginServices, source: str) -> dict[str, tuple[str, ...]]:
    """Kafka's listener.name.<listener>.sasl.enabled.mechanisms, checked: each one a
    mechanism this plugin serves."""
    offered: dict[str, tuple[str, ...]] = {}
    for listener, overrides in broker.config.listener_overrides.items():
        mechanisms = overrides.get(SASL_ENABLED_MECHANISMS)
        if mechanisms is None:
            continue
        unknown = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown or not mechanisms:
            raise ConfigError(
                f"{source}: listener.name.{listener.lower()}.{SASL_ENABLED_MECHANISMS}: "
                f"{', '.join(unknown) or 'none'} is not a mechanism the auth_sasl plugin "
                f"serves (one or more of {', '.join(SUPPORTED_MECHANISMS)})")
        offered[listener] = tuple(mechanisms)
    return offered
