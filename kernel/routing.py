"""The routing table: API key -> handler and the version range it fully serves.

Every handler, the kernel's own and plugins', is registered here through the
``kafkernel_register_apis`` hook, each plugin through its own ``ApiRegistry`` view, which
attributes what it registers to that plugin. The table rejects a second claim on one API
key and ranges kio cannot decode, and ApiVersions is generated from it, so the broker
never advertises an API or a version it does not serve.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema

if TYPE_CHECKING:
    from kernel.server import Broker


class RoutingError(Exception):
    """A registration that cannot be honoured; startup stops with this message."""


ANONYMOUS = "User:ANONYMOUS"
# Security protocols whose connections are authenticated as soon as they open, as
# ANONYMOUS (Kafka's principal without SASL or a TLS client certificate). On SASL_* ones
# the SASL plugin authenticates the session once its exchange completes.
AUTHENTICATED_AT_OPEN = frozenset({"PLAINTEXT", "SSL"})


@dataclass(slots=True)
class Session:
    """Per-connection state that outlives one request (authentication, client info).

    A session starts unauthenticated: until ``authenticate`` only ApiVersions,
    SaslHandshake and SaslAuthenticate are served, as Kafka does."""

    peer: str
    listener_name: str
    security_protocol: str = "PLAINTEXT"
    principal: str | None = None
    authenticated: bool = False
    client_software_name: str | None = None
    client_software_version: str | None = None
    # Plugins keep their per-connection state here, keyed by plugin name.
    extensions: dict[str, Any] = field(default_factory=dict)

    def authenticate(self, principal: str) -> None:
        """The connection's client is ``principal`` from now on: set at open by the
        kernel where the security protocol authenticates (``AUTHENTICATED_AT_OPEN``), by
        the SASL plugin when its exchange succeeds."""
        self.principal = principal
        self.authenticated = True


@dataclass(slots=True)
class RequestContext:
    """Everything a handler knows about the request besides its decoded body."""

    broker: Broker
    session: Session
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # Size of the whole request frame, for metrics and quotas.
    size: int = 0


Response = Any  # a kio response entity of the request's version
HandlerResult = Response | None | Awaitable[Response | None]
Handler = Callable[[RequestContext, Any], HandlerResult]
"""A handler takes the context and the decoded kio request entity and returns the kio
response entity of the same version, an awaitable of it, or None for no response
(Produce with acks=0). Raising ``KafkaError`` answers with that error code where the
response has a top-level error code; any other exception closes the connection."""


@dataclass(frozen=True, slots=True)
class ApiRoute:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    owner: str
    # Below min_version only where Kafka itself advertises versions it refuses.
    advertised_min_version: int


class Routes:
    """The broker's routing table. Plugins add to it only through their own
    ``ApiRegistry`` (``registry_for``), so every route names the plugin that added it."""

    def __init__(self) -> None:
        self._routes: dict[int, ApiRoute] = {}

    def registry_for(self, owner: str) -> ApiRegistry:
        return ApiRegistry(self, owner)

    def add(self, route: ApiRoute) -> None:
        api_key, owner = route.api_key, route.owner
        existing = self._routes.get(api_key)
        if existing is not None:
            raise RoutingError(
                f"API key {api_key} is claimed by both plugin {existing.owner!r} and "
                f"plugin {owner!r}; enable only one of them"
            )
        if route.min_version > route.max_version:
            raise RoutingError(
                f"API key {api_key}: empty version range "
                f"{route.min_version}..{route.max_version}"
            )
        for version in (route.min_version, route.max_version):
            try:
                load_request_schema(api_key, version)
            except (UnknownAPIKey, UnknownEntity) as e:
                raise RoutingError(
                    f"plugin {owner!r} registers API key {api_key} v{version}, "
                    f"which kio has no schema for: {e}"
                ) from None
        if not 0 <= route.advertised_min_version <= route.min_version:
            raise RoutingError(
                f"API key {api_key}: advertised minimum {route.advertised_min_version} is "
                f"outside 0..{route.min_version}"
            )
        self._routes[api_key] = route

    def get(self, api_key: int) -> ApiRoute | None:
        return self._routes.get(api_key)

    def __iter__(self) -> Iterator[ApiRoute]:
        return iter(sorted(self._routes.values(), key=lambda r: r.api_key))

    def __len__(self) -> int:
        return len(self._routes)


class ApiRegistry:
    """One plugin's view of the routing table: what it registers is its own."""

    __slots__ = ("_routes", "owner")

    def __init__(self, routes: Routes, owner: str) -> None:
        self._routes = routes
        self.owner = owner

    def register(
        self, api_key: int, handler: Handler, *, min_version: int, max_version: int,
        advertised_min_version: int | None = None,
    ) -> None:
        """``advertised_min_version`` (default ``min_version``) is the lowest version
        ApiVersions lists; requests below ``min_version`` are refused all the same."""
        advertised = min_version if advertised_min_version is None else advertised_min_version
        self._routes.add(ApiRoute(api_key, min_version, max_version, handler, self.owner,
                                  advertised))
