"""The plugin object: one instance per broker, holding that broker's producer ids."""

from __future__ import annotations

from typing import Any

from kernel.config import ConfigSchema
from kernel.hookspecs import hookimpl
from kernel.requests import ApiRegistry, RequestContext
from kernel.services import PluginServices
from plugins.txn import init_producer_id
from plugins.txn.producer_ids import ProducerIdManager
from plugins.txn.settings import TxnSettings

__all__ = ["PLUGIN_NAME", "TxnPlugin"]

PLUGIN_NAME = "txn"


class TxnPlugin:
    def __init__(self) -> None:
        self._settings = TxnSettings()
        self._producer_ids: ProducerIdManager | None = None

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{PLUGIN_NAME}", TxnSettings)

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        registry.register(init_producer_id.API_KEY, self._init_producer_id,
                          min_version=init_producer_id.MIN_VERSION,
                          max_version=init_producer_id.MAX_VERSION)

    @hookimpl
    def kafkernel_startup(self, broker: PluginServices) -> None:
        self._settings = broker.plugin_settings(PLUGIN_NAME) or TxnSettings()
        metadata = broker.metadata
        self._producer_ids = ProducerIdManager(metadata.allocate_producer_ids)

    async def _init_producer_id(self, ctx: RequestContext, request: Any) -> Any:
        # Listeners serve only after startup, so the manager is always there.
        if self._producer_ids is None:
            raise RuntimeError("the txn plugin has not started")
        return await init_producer_id.handle(self._producer_ids, self._settings, ctx, request)
