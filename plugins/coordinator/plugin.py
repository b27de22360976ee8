"""The plugin object: one instance per broker, holding that broker's group coordinator."""

from __future__ import annotations

from collections.abc import Awaitable

from kernel.api.config import ConfigSchema
from kernel.api.coordination import CoordinatorRegistry, CoordinatorType
from kernel.api.handlers import ApiRegistry, register_handler_modules
from kernel.api.hooks import hookimpl
from kernel.api.services import PluginServices
from plugins.coordinator.handlers import HANDLER_MODULES
from plugins.coordinator.service import OFFSETS_TOPIC, GroupCoordinatorService
from plugins.coordinator.settings import CoordinatorSettings

__all__ = ["PLUGIN_NAME", "CoordinatorPlugin"]

PLUGIN_NAME = "coordinator"


class CoordinatorPlugin:
    def __init__(self) -> None:
        self._service: GroupCoordinatorService | None = None
        self._settings = CoordinatorSettings()

    def service(self) -> GroupCoordinatorService:
        """Set at startup; listeners serve only after that, so handlers always find it.
        A method, not a property that raises: pluggy reads every attribute of a plugin
        object when it registers it."""
        if self._service is None:
            raise RuntimeError("the group coordinator has not started")
        return self._service

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{PLUGIN_NAME}", CoordinatorSettings)

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        register_handler_modules(registry, HANDLER_MODULES, self.service)

    @hookimpl
    def kafkernel_register_coordinators(self, registry: CoordinatorRegistry) -> None:
        registry.register(
            CoordinatorType.GROUP,
            lambda group_id: self.service().coordinator_partition(group_id),
            topic=OFFSETS_TOPIC,
            # Markers for __consumer_offsets go through the runtime (WriteTxnMarkers).
            complete_transaction=lambda *marker: self.service().complete_transaction(*marker),
        )

    @hookimpl
    def kafkernel_configure(self, settings: CoordinatorSettings) -> None:
        self._settings = settings

    @hookimpl
    def kafkernel_startup(self, broker: PluginServices) -> Awaitable[None]:
        self._service = GroupCoordinatorService(broker, self._settings)
        return self._service.start()

    @hookimpl
    def kafkernel_shutdown(self, broker: PluginServices) -> Awaitable[None] | None:
        return self._service.stop() if self._service is not None else None
