"""The routing table: API key -> handler and the version range it fully serves.

Every handler, the kernel's own and plugins', is registered here through the
``kafkernel_register_apis`` hook, each plugin through its own ``ApiRegistry`` view, which
attributes what it registers to that plugin. The table rejects a second claim on one API
key and ranges kio cannot decode, and ApiVersions is generated from it, so the broker
never advertises an API or a version it does not serve.

A listener has a role, as in Kafka: ``controller`` when its name is in
``controller.listener.names``, else ``broker``. Each role has its own table (Kafka's
schemas say which listeners serve an API): a registration names the roles it serves,
and a connection is given its listener's table once, when it opens, so the lookup per
request stays one dict index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema

from kernel.requests import BROKER, CONTROLLER, LISTENER_ROLES, Handler

__all__ = ["BROKER", "CONTROLLER", "LISTENER_ROLES", "ApiRoute", "PluginRoutes", "RouteTable",
           "Routes", "RoutingError"]


class RoutingError(Exception):
    """A registration that cannot be honoured; startup stops with this message."""


@dataclass(frozen=True, slots=True)
class ApiRoute:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    owner: str
    # Below min_version only where Kafka itself advertises versions it refuses.
    advertised_min_version: int
    # The listener roles it is served on (LISTENER_ROLES).
    listeners: frozenset[str] = frozenset({BROKER})


class RouteTable:
    """The routes of one listener role: what a connection on such a listener is served
    and what its ApiVersions lists."""

    __slots__ = ("_by_key", "get", "role")
    get: Callable[[int], ApiRoute | None]

    def __init__(self, role: str) -> None:
        self.role = role
        self._by_key: dict[int, ApiRoute] = {}
        self.get = self._by_key.get  # the per-request lookup: the dict's own get

    def __iter__(self) -> Iterator[ApiRoute]:
        return iter(sorted(self._by_key.values(), key=lambda r: r.api_key))

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._by_key

    def put(self, route: ApiRoute) -> None:
        self._by_key[route.api_key] = route


class Routes:
    """The broker's routing table. Plugins add to it only through their own
    ``ApiRegistry`` (``registry_for``), so every route names the plugin that added it."""

    def __init__(self) -> None:
        self._tables = {role: RouteTable(role) for role in LISTENER_ROLES}

    def registry_for(self, owner: str) -> PluginRoutes:
        return PluginRoutes(self, owner)

    def table(self, role: str) -> RouteTable:
        """The routes served on listeners of ``role``."""
        return self._tables[role]

    def add(self, route: ApiRoute) -> None:
        api_key, owner = route.api_key, route.owner
        unknown = sorted(route.listeners - set(LISTENER_ROLES))
        if unknown or not route.listeners:
            raise RoutingError(
                f"plugin {owner!r} registers API key {api_key} on listeners "
                f"{sorted(route.listeners)}; each must be one of {', '.join(LISTENER_ROLES)}"
            )
        for role in sorted(route.listeners):
            existing = self._tables[role].get(api_key)
            if existing is not None:
                where = "" if role == BROKER else f" on {role} listeners"
                raise RoutingError(
                    f"API key {api_key} is claimed by both plugin {existing.owner!r} and "
                    f"plugin {owner!r}{where}; enable only one of them"
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
        for role in route.listeners:
            self._tables[role].put(route)

    def __iter__(self) -> Iterator[ApiRoute]:
        """Every route once, whichever roles serve it, by API key."""
        routes = {id(r): r for t in self._tables.values() for r in t}
        return iter(sorted(routes.values(), key=lambda r: (r.api_key, sorted(r.listeners))))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class PluginRoutes:
    """One plugin's view of the routing table (the ``ApiRegistry`` it registers
    through): what it registers is its own."""

    __slots__ = ("_routes", "owner")

    def __init__(self, routes: Routes, owner: str) -> None:
        self._routes = routes
        self.owner = owner

    def register(
        self, api_key: int, handler: Handler, *, min_version: int, max_version: int,
        advertised_min_version: int | None = None, listeners: Iterable[str] = (BROKER,),
    ) -> None:
        """``advertised_min_version`` (default ``min_version``) is the lowest version
        ApiVersions lists; requests below ``min_version`` are refused all the same.
        ``listeners``: the listener roles served, ``broker`` and/or ``controller``."""
        advertised = min_version if advertised_min_version is None else advertised_min_version
        self._routes.add(ApiRoute(api_key, min_version, max_version, handler, self.owner,
                                  advertised, frozenset(listeners)))
