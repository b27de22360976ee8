"""The routing table: API key -> handler and the version range it fully serves.

Every handler, the kernel's own and plugins', is registered here through the
``kafkernel_register_apis`` hook. The table rejects a second claim on one API key and
ranges kio cannot decode, and ApiVersions is generated from it, so the broker never
advertises an API or a version it does not serve.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema

from kernel.services import BrokerServices


class RoutingError(Exception):
    """A registration that cannot be honoured; startup stops with this message."""


@dataclass(slots=True)
class Session:
    """Per-connection state that outlives one request (authentication, client info)."""

    peer: str
    listener_name: str
    security_protocol: str = "PLAINTEXT"
    principal: str = "User:ANONYMOUS"
    authenticated: bool = True
    client_software_name: str | None = None
    client_software_version: str | None = None
    # Plugins keep their per-connection state here, keyed by plugin name.
    extensions: dict[str, Any] = field(default_factory=dict)


Authorize = Callable[[Session, str, str, str], bool]
"""(session, operation, resource type, resource name) -> allowed: the enabled authorizer
(the ``kafkernel_authorize`` hook), as Kafka's handlers ask it."""


@dataclass(slots=True)
class RequestContext:
    """Everything a handler knows about the request besides its decoded body: the
    broker's services (not the broker), the connection's session and the authorizer."""

    services: BrokerServices
    authorize: Authorize
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


class ApiRegistry:
    def __init__(self) -> None:
        self._routes: dict[int, ApiRoute] = {}
        self._owner = "kernel"

    def owned_by(self, owner: str) -> ApiRegistry:
        """Set the name that following registrations are attributed to (the kernel
        sets it to each plugin's name before calling its hook)."""
        self._owner = owner
        return self

    def register(
        self, api_key: int, handler: Handler, *, min_version: int, max_version: int,
        advertised_min_version: int | None = None,
    ) -> None:
        """``advertised_min_version`` (default ``min_version``) is the lowest version
        ApiVersions lists; requests below ``min_version`` are refused all the same."""
        existing = self._routes.get(api_key)
        if existing is not None:
            raise RoutingError(
                f"API key {api_key} is claimed by both plugin {existing.owner!r} and "
                f"plugin {self._owner!r}; enable only one of them"
            )
        if min_version > max_version:
            raise RoutingError(
                f"API key {api_key}: empty version range {min_version}..{max_version}"
            )
        for version in (min_version, max_version):
            try:
                load_request_schema(api_key, version)
            except (UnknownAPIKey, UnknownEntity) as e:
                raise RoutingError(
                    f"plugin {self._owner!r} registers API key {api_key} v{version}, "
                    f"which kio has no schema for: {e}"
                ) from None
        advertised = min_version if advertised_min_version is None else advertised_min_version
        if not 0 <= advertised <= min_version:
            raise RoutingError(
                f"API key {api_key}: advertised minimum {advertised} is outside 0..{min_version}"
            )
        self._routes[api_key] = ApiRoute(api_key, min_version, max_version, handler,
                                         self._owner, advertised)

    def get(self, api_key: int) -> ApiRoute | None:
        return self._routes.get(api_key)

    def __iter__(self) -> Iterator[ApiRoute]:
        return iter(sorted(self._routes.values(), key=lambda r: r.api_key))

    def __len__(self) -> int:
        return len(self._routes)
