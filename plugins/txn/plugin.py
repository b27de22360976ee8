"""The plugin object: one instance per broker, holding that broker's transaction
coordinator (and its producer ids)."""

from __future__ import annotations

from collections.abc import Awaitable

from kernel.api.config import ConfigSchema
from kernel.api.coordination import CoordinatorRegistry, CoordinatorType
from kernel.api.handlers import ApiRegistry, register_handler_modules
from kernel.api.hooks import hookimpl
from kernel.api.services import PluginServices
from plugins.txn.handlers import HANDLER_MODULES
from plugins.txn.producer_ids import ProducerIdManager
from plugins.txn.service import TransactionCoordinator
from plugins.txn.settings import TxnSettings

__all__ = ["PLUGIN_NAME", "TxnPlugin"]

PLUGIN_NAME = "txn"


class TxnPlugin:
    def __init__(self) -> None:
        self._coordinator: TransactionCoordinator | None = None
        self._settings = TxnSettings()

    def coordinator(self) -> TransactionCoordinator:
        """Set at startup; listeners serve only after that, so handlers always find it.
        A method, not a property that raises: pluggy reads every attribute of a plugin
        object when it registers it."""
        if self._coordinator is None:
            raise RuntimeError("the transaction coordinator has not started")
        return self._coordinator

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{PLUGIN_NAME}", TxnSettings)

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        register_handler_modules(registry, HANDLER_MODULES, self.coordinator)

    @hookimpl
    def kafkernel_register_coordinators(self, registry: CoordinatorRegistry) -> None:
        registry.register(CoordinatorType.TRANSACTION,
                          lambda transactional_id:
                          self.coordinator().coordinator_partition(transactional_id),
                          verify_transaction=lambda *args, **kwargs: self.coordinator().verify(
                              *args, **kwargs))

    @hookimpl
    def kafkernel_configure(self, settings: TxnSettings) -> None:
        self._settings = settings

    @hookimpl
    def kafkernel_startup(self, broker: PluginServices) -> Awaitable[None]:
        producer_ids = ProducerIdManager(broker.metadata.allocate_producer_ids)
        self._coordinator = TransactionCoordinator(broker, self._settings, producer_ids)
        return self._coordinator.start()

    @hookimpl
    def kafkernel_shutdown(self, broker: PluginServices) -> Awaitable[None] | None:
        return self._coordinator.stop() if self._coordinator is not None else None
