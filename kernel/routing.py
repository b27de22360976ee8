"""The routing table: API key -> handler and the version range it fully serves.

Every handler, the kernel's own and plugins', is registered here through the
``kafkernel_register_apis`` hook, each plugin through its own ``ApiRegistry`` view, which
attributes what it registers to that plugin. The table rejects a second claim on one API
key and ranges kio cannot decode, and ApiVersions is generated from it, so the broker
never advertises an API or a version it does not serve.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema

from kernel.requests import Handler


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


class Routes:
    """The broker's routing table. Plugins add to it only through their own
    ``ApiRegistry`` (``registry_for``), so every route names the plugin that added it."""

    def __init__(self) -> None:
        self._routes: dict[int, ApiRoute] = {}

    def registry_for(self, owner: str) -> PluginRoutes:
        return PluginRoutes(self, owner)

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


class PluginRoutes:
    """One plugin's view of the routing table (the ``ApiRegistry`` it registers
    through): what it registers is its own."""

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
