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
import traceback
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

import pluggy

from kernel import hookspecs
from kernel.config import ConfigError, ConfigSchema

if TYPE_CHECKING:
    from kernel.cluster import MetadataBackend
    from kernel.coordination.registry import Coordinators
    from kernel.requests import Session
    from kernel.routing import Routes
    from kernel.sasl import SaslMechanisms
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


def installed_plugin_keys() -> dict[str, str]:
    """Each setting an installed plugin takes -> its table (``plugins.auth_sasl``), read
    from the plugins' config schemas: where a key the broker does not take belongs."""
    owners: dict[str, str] = {}
    for name in installed_plugins():
        try:
            schema_hook = getattr(load_plugin(name, ""), "kafkernel_config_schema", None)
            schema = schema_hook() if schema_hook is not None else None
        except Exception:  # a plugin that fails to load owns no keys here
            continue
        if isinstance(schema, ConfigSchema):
            for key in schema.keys:
                owners.setdefault(key, schema.table)
    return owners


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
    """The broker's plugins with one typed method per hook.

    Every hook is called through pluggy (wrappers, tryfirst and trylast apply). pluggy
    calls the implementation registered last first, so plugins are registered in reverse:
    its call order is then the kernel's, then the plugins' in config order. Registration
    hooks are called once per plugin (its implementations only), each with the plugin's
    own view of the registry."""

    def __init__(self, enabled: tuple[str, ...], source: str, essential: list[Any]) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.enabled = enabled
        self._source = source
        plugins = [(f"{KERNEL_PLUGIN}:{getattr(obj, '__name__', type(obj).__name__)}", obj)
                   for obj in essential]
        plugins += [(name, load_plugin(name, source)) for name in enabled]
        for name, obj in reversed(plugins):
            try:
                self.pm.register(obj, name=name)
            except ValueError as e:
                raise PluginError(f"{source}: plugins.enabled: plugin {name!r}: {e}") from e
        # (owner, plugin object) in call order, for the registration hooks.
        self._plugins = [(self._owner(name), obj) for name, obj in plugins]
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as e:
            raise PluginError(f"{source}: plugins.enabled: {e}") from e
        # Observers run per request (appends, high watermarks) or per connection: with no
        # implementation the kernel skips pluggy's call altogether.
        def implemented(hook: str) -> bool:
            return bool(getattr(self.pm.hook, hook).get_hookimpls())

        self._log_appended = implemented("kafkernel_log_appended")
        self._high_watermark_changed = implemented("kafkernel_high_watermark_changed")
        self._segment_rolled = implemented("kafkernel_segment_rolled")
        self._connection_opened = implemented("kafkernel_connection_opened")
        self._connection_closed = implemented("kafkernel_connection_closed")
        # Asked per request and per topic: with no authorizer everything is allowed, as
        # Kafka without authorizer.class.name.
        self._authorizer = implemented("kafkernel_authorize")
        self._authorizer_by_resource_type = implemented(
            "kafkernel_authorize_by_resource_type")

    @staticmethod
    def _owner(plugin_name: str) -> str:
        return KERNEL_PLUGIN if plugin_name.startswith(KERNEL_PLUGIN + ":") else plugin_name

    def _each_plugin(self, hook: str) -> Iterator[tuple[str, pluggy.HookCaller]]:
        """``hook`` of one plugin at a time, in call order: a registration hook's
        argument is the plugin's own view, so each plugin gets its own call."""
        for owner, obj in self._plugins:
            others = [other for _, other in self._plugins if other is not obj]
            caller = self.pm.subset_hook_caller(hook, others)
            impls = caller.get_hookimpls()
            stray = [i.plugin_name for i in impls if i.plugin is not obj]
            if stray:  # older pluggy removes others by attribute name, missing a specname
                raise PluginError(f"{self._source}: plugins.enabled: plugin {stray[0]!r}: "
                                  f"implement {hook} under its own name")
            if impls:
                yield owner, caller

    # -- registration ------------------------------------------------------

    def config_schemas(self) -> dict[str, ConfigSchema]:
        schemas: dict[str, ConfigSchema] = {}
        for owner, caller in self._each_plugin("kafkernel_config_schema"):
            for schema in caller():
                schemas[owner] = schema
        return schemas

    def configure(self, settings: Mapping[str, Any], config: Any = None) -> None:
        """Each plugin its own settings (``settings``: by the name it was enabled as),
        and the broker's ``config``."""
        for owner, caller in self._each_plugin("kafkernel_configure"):
            caller(settings=settings.get(owner), config=config)

    def register_apis(self, routes: Routes) -> None:
        # Kernel first, then plugins in config order: the error for a double claim
        # then names the plugin that came second.
        for owner, caller in self._each_plugin("kafkernel_register_apis"):
            caller(registry=routes.registry_for(owner))

    def register_coordinators(self, coordinators: Coordinators) -> None:
        for owner, caller in self._each_plugin("kafkernel_register_coordinators"):
            caller(registry=coordinators.registry_for(owner))

    def register_sasl_mechanisms(self, mechanisms: SaslMechanisms) -> None:
        for owner, caller in self._each_plugin("kafkernel_register_sasl_mechanisms"):
            caller(registry=mechanisms.registry_for(owner))

    # -- providers ---------------------------------------------------------

    def metadata_backend(self, broker: PluginServices) -> MetadataBackend | None:
        return self.pm.hook.kafkernel_metadata_backend(broker=broker)

    def authorize(
        self, session: Session, operation: str, resource_type: str, resource_name: str
    ) -> bool:
        if not self._authorizer:
            return True
        decision = self.pm.hook.kafkernel_authorize(
            session=session, operation=operation, resource_type=resource_type,
            resource_name=resource_name,
        )
        return decision is not False

    def authorize_by_resource_type(
        self, session: Session, operation: str, resource_type: str
    ) -> bool:
        if not self._authorizer_by_resource_type:
            return True
        decision = self.pm.hook.kafkernel_authorize_by_resource_type(
            session=session, operation=operation, resource_type=resource_type)
        return decision is not False

    # -- lifecycle ---------------------------------------------------------

    async def startup(self, broker: PluginServices) -> None:
        try:
            results = self.pm.hook.kafkernel_startup(broker=broker)
        except BaseException as e:
            _close_unstarted(e)
            raise
        await _await_each(results)

    async def shutdown(self, broker: PluginServices) -> None:
        # Reverse of startup: the plugin that started last stops first.
        await _await_each(self.pm.hook.kafkernel_shutdown(broker=broker)[::-1])

    # -- observers ---------------------------------------------------------

    def connection_opened(self, session: Session) -> None:
        if self._connection_opened:
            self.pm.hook.kafkernel_connection_opened(session=session)

    def connection_closed(self, session: Session) -> None:
        if self._connection_closed:
            self.pm.hook.kafkernel_connection_closed(session=session)

    def log_appended(self, topic: str, partition: int, base_offset: int, last_offset: int) -> None:
        if self._log_appended:
            self.pm.hook.kafkernel_log_appended(
                topic=topic, partition=partition, base_offset=base_offset,
                last_offset=last_offset,
            )

    def high_watermark_changed(self, topic: str, partition: int, high_watermark: int) -> None:
        if self._high_watermark_changed:
            self.pm.hook.kafkernel_high_watermark_changed(
                topic=topic, partition=partition, high_watermark=high_watermark
            )

    def segment_rolled(self, topic: str, partition: int, base_offset: int) -> None:
        if self._segment_rolled:
            self.pm.hook.kafkernel_segment_rolled(
                topic=topic, partition=partition, base_offset=base_offset
            )


async def _await_each(results: list[Awaitable[None] | None]) -> None:
    """Await what the implementations returned, one at a time in order; after a failure
    the coroutines not yet awaited are closed, never started."""
    pending = iter(results)
    try:
        for result in pending:
            if result is not None and inspect.isawaitable(result):
                await result
    except BaseException:
        for result in pending:
            if inspect.iscoroutine(result):
                result.close()
        raise


def _close_unstarted(error: BaseException) -> None:
    """A hook raised while pluggy was calling the plugins: what the earlier ones
    returned will never be awaited. Their coroutines are still referenced from the
    traceback (pluggy's list of results); close them, so they are not reported as
    never awaited when the process exits."""
    for frame, _ in traceback.walk_tb(error.__traceback__):
        for value in frame.f_locals.values():
            if isinstance(value, list):
                for item in value:
                    if (inspect.iscoroutine(item)
                            and inspect.getcoroutinestate(item) == inspect.CORO_CREATED):
                        item.close()
