"""The plugin object: one instance per broker, holding that broker's export supervisors
and the metrics of their state and lag."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from prometheus_client import Counter, Gauge

from kernel.api.config import ConfigSchema, StartupError
from kernel.api.hooks import hookimpl
from kernel.api.services import PluginServices
from plugins.spark_sink.lag import export_lag
from plugins.spark_sink.settings import SparkSinkSettings
from plugins.spark_sink.supervisor import ExportState, ExportSupervisor
from spark.options import ExportOptions
from spark.progress import exported_offsets
from spark.session import PysparkMissing, pyspark_home

__all__ = ["PLUGIN_NAME", "SparkSinkPlugin"]

PLUGIN_NAME = "spark_sink"


class SparkSinkPlugin:
    def __init__(self) -> None:
        self.supervisors: dict[str, ExportSupervisor] = {}
        self._broker: PluginServices | None = None
        self._settings = SparkSinkSettings()
        self._lag_task: asyncio.Task[None] | None = None
        self._progress: dict[str, tuple[int, int]] = {}  # export -> (exported, lag) logged
        self._log: Any = None
        self._offset: Gauge | None = None
        self._lag: Gauge | None = None
        self._state: Gauge | None = None
        self._restarts: Counter | None = None

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{PLUGIN_NAME}", SparkSinkSettings)

    @hookimpl
    def kafkernel_configure(self, settings: SparkSinkSettings) -> None:
        self._settings = settings

    @hookimpl
    def kafkernel_startup(self, broker: PluginServices) -> None:
        self._broker = broker
        self._log = broker.log.bind(component=PLUGIN_NAME)
        if self._settings.exports:
            try:
                pyspark_home()
            except PysparkMissing as e:
                raise StartupError(
                    f"{broker.loaded.source}: plugins.{PLUGIN_NAME}.exports: {e}") from None
        self._register_metrics(broker)
        registration = broker.registration
        own = f"{registration.host}:{registration.port}" if registration else ""
        for table in self._settings.exports:
            options = ExportOptions.from_table(table, defaults={"bootstrap.servers": own})
            self.supervisors[options.name] = self._supervisor(options)
        for supervisor in self.supervisors.values():
            supervisor.start()
        if self.supervisors:
            self._lag_task = asyncio.get_running_loop().create_task(
                self._follow_lag(), name="spark-export-lag")

    def _supervisor(self, options: ExportOptions) -> ExportSupervisor:
        assert self._state is not None and self._restarts is not None
        restarts = self._restarts.labels(options.name)
        supervisor = ExportSupervisor(options, self._settings, self._log,
                                      on_restart=restarts.inc)
        for state in ExportState:
            self._state.labels(options.name, state.value).set_function(
                lambda st=state: float(supervisor.state is st))
        return supervisor

    def _register_metrics(self, broker: PluginServices) -> None:
        registry = broker.metrics.registry
        labels = ["export", "topic", "partition"]
        self._offset = Gauge("kafkernel_spark_export_offset",
                             "Next offset an export will write: every record below it is "
                             "in its table (its checkpoint's last commit).", labels,
                             registry=registry)
        self._lag = Gauge("kafkernel_spark_export_lag",
                          "Records between an export's offset and the high watermark.",
                          labels, registry=registry)
        self._state = Gauge("kafkernel_spark_export_state",
                            "1 for the state each export is in.", ["export", "state"],
                            registry=registry)
        self._restarts = Counter("kafkernel_spark_export_restarts",
                                 "Times an export's Spark job exited and was restarted.",
                                 ["export"], registry=registry)

    async def _follow_lag(self) -> None:
        interval = self._settings.lag_interval_ms / 1000
        while True:
            for name, supervisor in self.supervisors.items():
                try:
                    await self._sample(name, supervisor)
                except Exception:  # a bad sample must not end the sampling
                    self._log.exception("spark export lag sample failed", export=name)
            await asyncio.sleep(interval)

    async def _sample(self, name: str, supervisor: ExportSupervisor) -> None:
        assert self._broker is not None and self._offset is not None
        assert self._lag is not None
        checkpoint = supervisor.options.checkpoint_location
        exported = await asyncio.to_thread(exported_offsets, checkpoint)
        total_exported = total_lag = 0
        for p in export_lag(supervisor.options, exported, self._broker):
            self._offset.labels(name, p.topic, str(p.partition)).set(p.exported)
            self._lag.labels(name, p.topic, str(p.partition)).set(p.lag)
            total_exported += p.exported
            total_lag += p.lag
        if self._progress.get(name) != (total_exported, total_lag):
            self._progress[name] = (total_exported, total_lag)
            self._log.info("spark export progress", export=name,
                           state=supervisor.state.value, exported=total_exported,
                           lag=total_lag)

    @hookimpl
    def kafkernel_shutdown(self, broker: PluginServices) -> Any:
        return self._stop()

    async def _stop(self) -> None:
        if self._lag_task is not None:
            self._lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lag_task
        await asyncio.gather(*(s.stop() for s in self.supervisors.values()))
