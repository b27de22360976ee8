"""One pluggy PluginManager per broker, plugin selection from config, and a typed facade.

Plugins are named in ``[plugins] enabled = [...]`` either by an entry point name of the
``kafkernel.plugins`` group (Kafkernel's own plugins are published the same way) or by
a ``module`` / ``module:object`` path. A plugin object is a module, or a class that is
instantiated once per broker. The kernel's own request handlers are an essential plugin
that is always registered, through the same hook as everyone else's.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

import pluggy

from kernel import hookspecs
from kernel.config import ConfigError, ConfigSchema

if TYPE_CHECKING:
    from kernel.cluster import MetadataBackend
    from kernel.coordination.registry import CoordinatorRegistry
    from kernel.routing import ApiRegistry, Session
    from kernel.services import PluginServices

ENTRY_POINT_GROUP = "kafkernel.plugins"
KERNEL_PLUGIN = "kernel"


class PluginError(ConfigError):
    """A plugin that cannot be found, loaded or registered; startup stops."""


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    name: str
    value: str  # module[:object] the entry point points at
    distribution: str | None


def installed_plugins() -> dict[str, InstalledPlugin]:
    found: dict[str, InstalledPlugin] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else None
        found.setdefault(ep.name, InstalledPlugin(ep.name, ep.value, dist))
    return dict(sorted(found.items()))


def _import_path(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def load_plugin(name: str, source: str) -> Any:
    """Resolve a plugin name to its object; errors say what is installed."""
    installed = installed_plugins()
    try:
        if name in installed:
            obj = EntryPoint(name, installed[name].value, ENTRY_POINT_GROUP).load()
        elif ":" in name or "." in name:
            obj = _import_path(name)
        else:
            names = ", ".join(installed) or "none"
            raise PluginError(
                f"{source}: plugins.enabled: plugin {name!r} can't be found, is the plugin "
                f"not installed? Installed plugins: {names}"
            )
    except PluginError:
        raise
    except ModuleNotFoundError as e:
        module = name.partition(":")[0]
        if e.name is None or not (module + ".").startswith(e.name + "."):
            raise PluginError(  # the plugin was found; something it imports was not
                f"{source}: plugins.enabled: plugin {name!r} failed to load: {e}"
            ) from e
        raise PluginError(
            f"{source}: plugins.enabled: plugin {name!r} failed to load: {e} (an import "
            "path is looked up in the installed packages, PYTHONPATH and the current "
            "directory)"
        ) from e
    except (ImportError, AttributeError) as e:
        raise PluginError(f"{source}: plugins.enabled: plugin {name!r} failed to load: {e}") from e
    return obj() if inspect.isclass(obj) else obj


class PluginFacade:
    """The broker's plugins with one typed method per hook."""

    def __init__(self, enabled: tuple[str, ...], source: str, essential: list[Any]) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.enabled = enabled
        for obj in essential:
            label = getattr(obj, "__name__", type(obj).__name__)
            self.pm.register(obj, name=f"{KERNEL_PLUGIN}:{label}")
        for name in enabled:
            obj = load_plugin(name, source)
            try:
                self.pm.register(obj, name=name)
            except ValueError as e:
                raise PluginError(f"{source}: plugins.enabled: plugin {name!r}: {e}") from e
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as e:
            raise PluginError(f"{source}: plugins.enabled: {e}") from e
        self._observers = {
            hook: bool(getattr(self.pm.hook, hook).get_hookimpls())
            for hook in ("kafkernel_log_appended", "kafkernel_high_watermark_changed",
                         "kafkernel_segment_rolled")
        }

    @staticmethod
    def _owner(plugin_name: str) -> str:
        return KERNEL_PLUGIN if plugin_name.startswith(KERNEL_PLUGIN + ":") else plugin_name

    # -- registration ------------------------------------------------------

    def config_schemas(self) -> dict[str, ConfigSchema]:
        schemas: dict[str, ConfigSchema] = {}
        for impl in self.pm.hook.kafkernel_config_schema.get_hookimpls():
            schema = impl.function()
            if schema is not None:
                schemas[self._owner(impl.plugin_name)] = schema
        return schemas

    def register_apis(self, registry: ApiRegistry) -> None:
        # Kernel first, then plugins in config order: the error for a double claim
        # then names the plugin that came second.
        impls = self.pm.hook.kafkernel_register_apis.get_hookimpls()
        order = {name: i for i, name in enumerate(self.enabled)}
        impls.sort(key=lambda i: -1 if self._owner(i.plugin_name) == KERNEL_PLUGIN
                   else order.get(i.plugin_name, len(order)))
        for impl in impls:
            impl.function(registry=registry.owned_by(self._owner(impl.plugin_name)))
        registry.owned_by(KERNEL_PLUGIN)

    def register_coordinators(self, registry: CoordinatorRegistry) -> None:
        for impl in self.pm.hook.kafkernel_register_coordinators.get_hookimpls():
            impl.function(registry=registry.owned_by(self._owner(impl.plugin_name)))
        registry.owned_by(KERNEL_PLUGIN)

    def register_sasl_mechanisms(self) -> dict[str, object]:
        mechanisms: dict[str, object] = {}
        self.pm.hook.kafkernel_register_sasl_mechanisms(registry=mechanisms)
        return mechanisms

    # -- providers ---------------------------------------------------------

    def metadata_backend(self, broker: PluginServices) -> MetadataBackend | None:
        return self.pm.hook.kafkernel_metadata_backend(broker=broker)

    def authorize(
        self, session: Session, operation: str, resource_type: str, resource_name: str
    ) -> bool:
        decision = self.pm.hook.kafkernel_authorize(
            session=session, operation=operation, resource_type=resource_type,
            resource_name=resource_name,
        )
        return decision is not False

    # -- lifecycle ---------------------------------------------------------

    async def startup(self, broker: PluginServices) -> None:
        await _await_all(self.pm.hook.kafkernel_startup(broker=broker))

    async def shutdown(self, broker: PluginServices) -> None:
        # Reverse of startup: plugins registered last stop first.
        await _await_all(self.pm.hook.kafkernel_shutdown(broker=broker), reverse=False)

    # -- observers ---------------------------------------------------------

    def log_appended(self, topic: str, partition: int, base_offset: int, last_offset: int) -> None:
        if self._observers["kafkernel_log_appended"]:
            self.pm.hook.kafkernel_log_appended(
                topic=topic, partition=partition, base_offset=base_offset,
                last_offset=last_offset,
            )

    def high_watermark_changed(self, topic: str, partition: int, high_watermark: int) -> None:
        if self._observers["kafkernel_high_watermark_changed"]:
            self.pm.hook.kafkernel_high_watermark_changed(
                topic=topic, partition=partition, high_watermark=high_watermark
            )

    def segment_rolled(self, topic: str, partition: int, base_offset: int) -> None:
        if self._observers["kafkernel_segment_rolled"]:
            self.pm.hook.kafkernel_segment_rolled(
                topic=topic, partition=partition, base_offset=base_offset
            )


async def _await_all(results: list[Awaitable[None] | None], reverse: bool = True) -> None:
    # pluggy calls implementations last-registered first; coroutines run when awaited,
    # so awaiting in reverse runs them in registration order (kernel, then config order).
    for result in reversed(results) if reverse else results:
        if result is not None and inspect.isawaitable(result):
            await result
