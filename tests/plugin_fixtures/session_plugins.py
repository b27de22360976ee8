"""Small plugins for the kernel's seams: one that sees connections open and close and
authenticates SASL_* connections with a made-up mechanism, and a few that show pluggy's
ordering (tryfirst) and wrappers taking effect on the kernel's hook calls."""

from __future__ import annotations

import datetime
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kernel.api.handlers import ApiRegistry, RequestContext, Session
from kernel.api.hooks import hookimpl
from kernel.api.protocol import make, response_module

if TYPE_CHECKING:
    from kernel.api.sasl import SaslMechanismRegistry

PREFIX = "tests.plugin_fixtures.session_plugins:"
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
MECHANISM = "TEST-SECRET"
SECRET = b"open sesame"
PRINCIPAL = "User:tester"


class SecretGate:
    """Offers TEST-SECRET on every SASL listener and serves SaslHandshake and
    SaslAuthenticate: the secret authenticates a connection as ``PRINCIPAL``. Keeps what
    it saw of connections (listener, authenticated at open; the session) per peer."""

    NAME = PREFIX + "SecretGate"

    def __init__(self) -> None:
        self.opened: dict[str, tuple[str, bool]] = {}
        self.sessions: dict[str, Session] = {}
        self.closed: list[str] = []
        self.mechanisms: tuple[str, ...] = ()

    @hookimpl
    def kafkernel_connection_opened(self, session: Session) -> None:
        self.opened[session.peer] = (session.listener_name, session.authenticated)
        self.sessions[session.peer] = session
        session.extensions[self.NAME] = "handshake"

    @hookimpl
    def kafkernel_connection_closed(self, session: Session) -> None:
        self.closed.append(session.peer)

    @hookimpl
    def kafkernel_register_sasl_mechanisms(self, registry: SaslMechanismRegistry) -> None:
        registry.register(MECHANISM, object)

    @hookimpl
    def kafkernel_startup(self, broker: Any) -> None:
        self._broker = broker

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        registry.register(SASL_HANDSHAKE, self.handshake, min_version=0, max_version=1)
        registry.register(SASL_AUTHENTICATE, self.authenticate, min_version=0, max_version=2)

    def handshake(self, ctx: RequestContext, request: Any) -> Any:
        offered = tuple(self._broker.sasl_mechanisms.for_listener(ctx.session.listener_name))
        ok = request.mechanism in offered
        if ok:
            ctx.session.extensions[self.NAME] = "authenticate"
        m = response_module(SASL_HANDSHAKE, ctx.api_version)
        return m.SaslHandshakeResponse(
            error_code=ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism,
            mechanisms=offered,
        )

    def authenticate(self, ctx: RequestContext, request: Any) -> Any:
        session = ctx.session
        ok = session.extensions.get(self.NAME) == "authenticate" and request.auth_bytes == SECRET
        if ok:
            session.authenticate(PRINCIPAL)
        m = response_module(SASL_AUTHENTICATE, ctx.api_version)
        return make(
            m.SaslAuthenticateResponse,
            error_code=ErrorCode.none if ok else ErrorCode.sasl_authentication_failed,
            error_message=None if ok else "wrong secret", auth_bytes=b"",
            session_lifetime=datetime.timedelta(0),
        )


class FailsOnConnect:
    """A plugin bug on every new connection: the broker names it and closes the
    connection, and keeps serving."""

    NAME = PREFIX + "FailsOnConnect"

    @hookimpl
    def kafkernel_connection_opened(self, session: Session) -> None:
        raise RuntimeError("no room for " + session.peer)


class SameMechanism:
    """Offers TEST-SECRET too: with SecretGate enabled, startup must stop."""

    NAME = PREFIX + "SameMechanism"

    @hookimpl
    def kafkernel_register_sasl_mechanisms(self, registry: SaslMechanismRegistry) -> None:
        registry.register(MECHANISM, object)


class Allows:
    """Allows everything, answering first in config order."""

    NAME = PREFIX + "Allows"

    @hookimpl
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> bool:
        return True


class Denies:
    """Denies everything."""

    NAME = PREFIX + "Denies"

    @hookimpl
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> bool:
        return False


class DeniesFirst:
    """Denies everything, and asks to be called before the plugins listed ahead of it."""

    NAME = PREFIX + "DeniesFirst"

    @hookimpl(tryfirst=True)
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> bool:
        return False


class HidesSecrets:
    """Wraps every authorizer: a topic named ``secret`` is denied whatever they say."""

    NAME = PREFIX + "HidesSecrets"

    @hookimpl(wrapper=True)
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> Generator[None, bool | None, bool | None]:
        decision = yield
        return False if resource_name == "secret" else decision


class StartupOrder:
    """Notes which of the broker's plugins had started (stopped) when it started
    (stopped): the order the kernel drives them in."""

    def __init__(self) -> None:
        self.state = "new"
        self.after: list[str] = []
        self.stopped_after: list[str] = []

    def _others(self, broker: Any, state: str) -> list[str]:
        return [name for name, plugin in broker.plugins.pm.list_name_plugin()
                if isinstance(plugin, StartupOrder) and plugin.state == state]

    def _start(self, broker: Any) -> Any:
        async def start() -> None:
            self.after = self._others(broker, "started")
            self.state = "started"

        return start()

    @hookimpl
    def kafkernel_shutdown(self, broker: Any) -> Any:
        async def stop() -> None:
            self.stopped_after = self._others(broker, "stopped")
            self.state = "stopped"

        return stop()


class StartsInOrder(StartupOrder):
    NAME = PREFIX + "StartsInOrder"

    @hookimpl
    def kafkernel_startup(self, broker: Any) -> Any:
        return self._start(broker)


class AlsoInOrder(StartsInOrder):
    NAME = PREFIX + "AlsoInOrder"


class StartsFirst(StartupOrder):
    NAME = PREFIX + "StartsFirst"

    @hookimpl(tryfirst=True)
    def kafkernel_startup(self, broker: Any) -> Any:
        return self._start(broker)
