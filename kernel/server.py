"""The Broker: wires the kernel's components and plugins, in a fixed start/stop order.

Start: plugins loaded and their tables validated -> routes registered (ApiVersions is
generated from them) and SASL mechanisms per listener -> what the machine can refuse,
before anything starts or logs: log dirs locked and checked for writes, listeners bound
(not yet serving, so port 0 resolves to the real port before registration), the metrics
endpoint bound -> metadata backend started (replay, registration) -> replication
(followers fetch from their leaders, leaders keep their ISR) -> plugins' startup ->
listeners serve. Stop is the reverse: stop accepting, plugins' shutdown (they answer
what they parked), replication stopped, let in-flight requests finish, logs closed
cleanly, metadata backend stop. A start that fails stops what it started without a
word, so its one-line error is the last.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import traceback
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from types import MappingProxyType
from typing import Any

from kernel import handlers
from kernel.client_quotas import QuotaEntity, QuotaValues
from kernel.cluster import (
    BrokerEndpoint,
    BrokerRegistration,
    ClusterImage,
    MetadataBackend,
)
from kernel.config import (
    INT_MAX,
    BrokerConfig,
    ConfigError,
    ConfigProblem,
    LoadedConfig,
    StartupError,
    coerce,
    controller_listeners,
    replace_settings,
    schema_keys,
    toml_key,
)
from kernel.coordination.partition_writer import CoordinatorPartitionWriter
from kernel.coordination.registry import Coordinators, RegistrationError
from kernel.coordination.txn_markers import MARKER_TIMEOUT_MS, write_txn_markers
from kernel.fetch_session import FetchSessionCache
from kernel.handlers import find_coordinator
from kernel.log.log_cleaner import CleanerObserver
from kernel.log.manager import LogDirError, LogManager
from kernel.log.volume import volume_bytes
from kernel.logging import Notices, make_logger
from kernel.metrics import (
    BrokerMetrics,
    CleanerSample,
    FetchSessionSample,
    LogDirSample,
    MetadataHealth,
    PartitionSample,
    StateSample,
)
from kernel.network.descriptors import DescriptorReserve, describe_room, open_files_limit
from kernel.network.dispatch import RequestDispatcher
from kernel.network.inter_broker import InterBrokerChannel, inter_broker_sasl
from kernel.network.listener import Listener, check_listener_names, parse_endpoints
from kernel.network.memory_pool import MemoryPool, PreAuthPool, preauth_share
from kernel.network.quotas import (
    ConnectionQuotas,
    QuotaSource,
    parse_overrides,
    resolve_overrides,
)
from kernel.network.tls import TLS_PROTOCOLS, inter_broker_client_tls, server_tls
from kernel.plugins import KERNEL_PLUGIN, PluginFacade
from kernel.protocol.client import BrokerConnectionError
from kernel.purgatory import Purgatory, Timer
from kernel.replica.fetcher import ReplicaFetcherManager
from kernel.replica.manager import ReplicaManager
from kernel.replication_control import preferred_replica_imbalance
from kernel.routing import BROKER, CONTROLLER, Routes, RouteTable, RoutingError
from kernel.sasl import SaslError, SaslMechanisms
from kernel.services import PartitionView, PartitionWriter, TxnMarker, TxnMarkerResult
from kernel.terminal import ProgressBar

SHUTDOWN_GRACE_S = 5.0
# A WriteTxnMarkers waits up to request.timeout.ms (30 s) for its markers' commit on the
# leader: the other broker's answer is awaited a little longer than that.
INTER_BROKER_REQUEST_TIMEOUT_S = MARKER_TIMEOUT_MS / 1000 + 5.0
RECENT_ERRORS = 20
NO_QUOTAS: Mapping[QuotaEntity, QuotaValues] = MappingProxyType({})


class Broker:
    def __init__(self, loaded: LoadedConfig, *,
                 progress_bar: ProgressBar | None = None) -> None:
        """``progress_bar``: a terminal's (``kafkernel serve`` on one): the log lines go
        through it and a start-up's log recovery is drawn on it."""
        self.loaded = loaded
        self.config = loaded.broker
        cfg = self.config
        self.metrics = BrokerMetrics(cfg.broker_id)
        # Error-level log events, counted (a metric) with the last few kept: tests fail
        # on any they did not expect, and operators can alert on the count.
        self.recent_errors: collections.deque[str] = collections.deque(maxlen=RECENT_ERRORS)
        # Warnings about input a client may send on every request (refused batches).
        self.refused_input_notices = Notices()
        self.log: Any = make_logger(cfg.logging_format, cfg.logging_level, stream=progress_bar,
                                    on_error=self._error_logged, broker_id=cfg.broker_id)
        self.plugins = PluginFacade(loaded.enabled_plugins, loaded.source, [handlers])
        plugin_settings = self._validate_plugin_tables()
        try:
            self.plugins.configure(plugin_settings, cfg)
        except ConfigError as e:  # a plugin's check names the key, not the file
            raise ConfigError(problems=[dataclasses.replace(p, text=f"{loaded.source}: {p}")
                                        for p in e.problems]) from None
        self.routes = Routes()
        self.coordinators = Coordinators()
        try:
            self.plugins.register_apis(self.routes)
            self.plugins.register_coordinators(self.coordinators)
            find_coordinator.register(self.routes.registry_for(KERNEL_PLUGIN),
                                      self.coordinators)
        except (RoutingError, RegistrationError) as e:
            raise ConfigError(f"{loaded.source}: plugins.enabled: {e}") from None
        self.dispatcher = RequestDispatcher(self.routes, self, self.plugins.authorize,
                                            self.plugins.authorize_by_resource_type,
                                            self.metrics, self.log)
        try:
            self.endpoints = parse_endpoints(
                cfg.listeners, cfg.listener_security_protocol_map, "listeners"
            )
            self.advertised = (
                parse_endpoints(cfg.advertised_listeners, cfg.listener_security_protocol_map,
                                "advertised.listeners")
                if cfg.advertised_listeners else None
            )
            check_listener_names(cfg, self.endpoints, self.advertised)
            # TLS contexts are made (their PEM files read and checked) before anything
            # starts, so config check refuses what serve would.
            tls = {e.listener_name: server_tls(cfg, e.listener_name)
                   for e in self.endpoints if e.security_protocol in TLS_PROTOCOLS}
            # How this broker connects to the others' inter-broker listener, checked now
            # too: its TLS client context, and its SASL login.
            inter_broker = (cfg.inter_broker_listener_name
                            or cfg.security_inter_broker_protocol).upper()
            protocol = next((e.security_protocol for e in self.endpoints
                             if e.listener_name == inter_broker), "PLAINTEXT")
            self._inter_broker_tls = (inter_broker_client_tls(cfg, inter_broker)
                                      if protocol in TLS_PROTOCOLS else None)
            self._inter_broker_sasl = (inter_broker_sasl(cfg, inter_broker)
                                       if protocol.startswith("SASL_") else None)
            # Shared by every listener: Kafka counts connections and request memory per
            # broker.
            self.connection_quotas = connection_quotas(
                cfg, self._client_room, [e.listener_name for e in self.endpoints],
                ip_quotas=self._client_quotas)
            self.memory_pool = memory_pool(cfg)
            self.preauth_pool = PreAuthPool(preauth_share(cfg.queued_max_request_bytes,
                                                          cfg.sasl_server_max_receive_size))
        except ConfigError as e:  # the listener module names the key, not the file
            raise ConfigError(f"{loaded.source}: {e}") from None
        self.metrics.request_pool_used.set_function(lambda: self.memory_pool.used)
        self.metrics.preauth_pool_used.set_function(lambda: self.preauth_pool.used)
        # Each listener's role (routing.py): controller when controller.listener.names
        # names it; its connections are served that role's routes.
        controllers = controller_listeners(cfg)
        self.listener_roles = {
            e.listener_name: CONTROLLER if e.listener_name in controllers else BROKER
            for e in self.endpoints}
        self.listeners = [
            Listener(e, self.dispatcher.for_role(self.listener_roles[e.listener_name]),
                     max_request_size=cfg.socket_request_max_bytes,
                     idle_timeout_ms=cfg.connections_max_idle_ms,
                     quotas=self.connection_quotas, pool=self.memory_pool,
                     on_count=self.metrics.connections.labels(e.listener_name).set,
                     on_rejected=self.metrics.connection_rejected(e.listener_name),
                     on_throttled=self.metrics.connection_throttled(e.listener_name),
                     on_ip_throttled=self.metrics.ip_connection_throttled(e.listener_name),
                     on_session_opened=self.plugins.connection_opened,
                     on_session_closed=self.plugins.connection_closed,
                     tls=tls.get(e.listener_name), preauth_pool=self.preauth_pool,
                     sasl_max_receive_size=cfg.sasl_server_max_receive_size)
            for e in self.endpoints
        ]
        # What SaslHandshake offers per listener; a SASL listener needs at least one.
        self.sasl_mechanisms = SaslMechanisms(
            e.listener_name for e in self.endpoints if e.security_protocol.startswith("SASL_")
        )
        try:
            self.plugins.register_sasl_mechanisms(self.sasl_mechanisms)
        except SaslError as e:
            raise ConfigError(f"{loaded.source}: plugins.enabled: {e}") from None
        unserved = self.sasl_mechanisms.without_mechanisms()
        if unserved:
            raise ConfigError(
                f"{loaded.source}: listeners: {', '.join(unserved)}: a SASL listener needs "
                "a SASL mechanism, and no enabled plugin offers one on it"
            )
        self._metadata: MetadataBackend | None = None
        self._static_config = cfg
        self.metrics.watch_state(self._state_sample)
        self.registration: BrokerRegistration | None = None
        # Delayed operations (long-poll fetches, acks=all produces, DeleteRecords waiting
        # for the replicas, group joins) share one timing wheel per broker.
        self.timer = Timer(logger=self.log)
        self.produce_purgatory: Purgatory[Any] = Purgatory("Produce", self.timer, logger=self.log)
        self.fetch_purgatory: Purgatory[Any] = Purgatory("Fetch", self.timer, logger=self.log)
        self.delete_records_purgatory: Purgatory[Any] = Purgatory(
            "DeleteRecords", self.timer, logger=self.log)
        # KIP-227: consumers' and followers' incremental fetch sessions.
        self.fetch_sessions = FetchSessionCache(
            cfg.max_incremental_fetch_session_cache_slots,
            cfg.min_incremental_fetch_session_eviction_ms)
        self.logs = LogManager(
            cfg.log_dirs, cfg, logger=self.log.bind(component="log"),
            high_watermark=self._high_watermark_of,
            on_segment_rolled=self.plugins.segment_rolled,
            on_flush=self.metrics.flush_latency.observe,
            cleaner_observer=CleanerObserver(on_clean=lambda _tp, stats: (
                self.metrics.log_cleaned(stats.map_bytes_read, stats.bytes_read,
                                         stats.bytes_written, stats.elapsed_s,
                                         stats.buffer_utilization))),
            on_recovery_progress=None if progress_bar is None else progress_bar.update,
        )
        if self.logs.cleaner is not None:
            self.metrics.watch_cleaner(self._cleaner_sample)
        # The descriptors the broker's own work needs, from the limit it runs under
        # (kafkernel serve has raised the soft limit to the hard one by now).
        self.descriptor_reserve = DescriptorReserve.at_start(
            limit=open_files_limit(),
            listening_sockets=2 * len(self.endpoints),  # IPv4 and IPv6 at most
            log_dirs=len(cfg.log_dirs), log_workers=self.logs.num_workers,
            cleaner_threads=cfg.log_cleaner_threads if cfg.log_cleaner_enable else 0)
        # the log keeps its open segment files within their share of the limit
        self.logs.open_segments.capacity = self.descriptor_reserve.open_segments
        self.metrics.client_connection_room.set_function(self._client_room_metric)
        self.replicas = ReplicaManager(
            cfg.broker_id, self.logs, self.produce_purgatory, self.fetch_purgatory,
            self.delete_records_purgatory, self.plugins, self.log.bind(component="replica"),
            metrics=self.metrics, config=cfg,
            transaction_verifier=self.coordinators.transaction_verifier,
        )
        self.fetchers: ReplicaFetcherManager | None = None
        self.inter_broker: InterBrokerChannel | None = None
        self._isr_expiration: asyncio.Task[None] | None = None
        self.metrics_port: int | None = None
        self._stopped = asyncio.Event()
        self._starting = False  # start() was called: stop() has something to undo
        self._plugins_starting = False
        self._started = False
        self._stopping = False  # stop() began: images are no longer followed

    def _validate_plugin_tables(self) -> dict[str, Any]:
        schemas = self.plugins.config_schemas()
        settings: dict[str, Any] = {}
        problems: list[ConfigProblem] = []  # every table's, reported at once
        for name in self.loaded.enabled_plugins:
            table = self.loaded.plugin_tables.get(name, {})
            schema = schemas.get(name)
            if schema is None:
                if table:
                    raise ConfigError(
                        f"{self.loaded.source}: plugins.{name}: plugin {name!r} takes no settings"
                    )
                continue
            # Errors name the table as the file writes it, whatever the plugin calls it.
            written = dataclasses.replace(schema, table=f"plugins.{toml_key(name)}")
            try:
                settings[name] = written.build(table, self.loaded.source)
            except ConfigError as e:
                problems += e.problems
        if problems:
            raise ConfigError(problems=problems)
        for name in self.loaded.plugin_tables:
            if name not in self.loaded.enabled_plugins:
                raise ConfigError(
                    f"{self.loaded.source}: plugins.{name}: settings for a plugin that is not "
                    f"enabled; enabled: {', '.join(self.loaded.enabled_plugins) or 'none'}"
                )
        return settings

    async def write_txn_markers(self, markers: Sequence[TxnMarker]) -> list[TxnMarkerResult]:
        """WriteTxnMarkers, called locally (``PluginServices.write_txn_markers``)."""
        return await write_txn_markers(self, markers)

    def partition_writer(self) -> PartitionWriter:
        """A coordinator's writer over the replicas (``PluginServices.partition_writer``)."""
        return CoordinatorPartitionWriter(self.replicas)

    def partition(self, topic: str, partition: int) -> PartitionView | None:
        """The local replica, read-only (``PluginServices.partition``)."""
        return self.replicas.get_partition(topic, partition)

    async def send_to_broker(self, broker_id: int, request: Any) -> Any:
        """A request to another broker (``PluginServices.send_to_broker``)."""
        if self.inter_broker is None:
            raise BrokerConnectionError("this broker is not connected to the others yet")
        return await self.inter_broker.send(broker_id, request)

    def _client_quotas(self) -> Mapping[QuotaEntity, QuotaValues]:
        """The quotas in the metadata; none before the backend started (a client
        accepted then is not rated by its ip)."""
        return NO_QUOTAS if self._metadata is None else self._metadata.client_quotas()

    @property
    def metadata(self) -> MetadataBackend:
        if self._metadata is None:
            raise RuntimeError("metadata backend not started")
        return self._metadata

    @property
    def bootstrap(self) -> str:
        """host:port of the first broker listener, for clients (a controller-only node:
        its first listener, for ``--bootstrap-controller``)."""
        first = next((lst for lst in self.listeners
                      if self.listener_roles[lst.endpoint.listener_name] == BROKER),
                     self.listeners[0])
        host = first.endpoint.host or "127.0.0.1"
        return f"{host}:{first.port}"

    def routes_for(self, listener_name: str) -> RouteTable:
        return self.routes.table(self.listener_roles.get(listener_name, BROKER))

    def _advertised_endpoints(self) -> tuple[BrokerEndpoint, ...]:
        """Every endpoint this broker registers: advertised.listeners when set (a port
        of 0 is the one bound), else each listener at its bound port, as Kafka's
        effective advertised listeners. Controller listeners are not the broker's
        endpoints: Kafka's effective advertised broker listeners leave them out."""
        controllers = controller_listeners(self.config)
        if self.advertised:
            bound = {lst.endpoint.listener_name: lst.port for lst in self.listeners}
            return tuple(
                BrokerEndpoint(ep.listener_name, ep.host,
                               ep.port or bound.get(ep.listener_name, ep.port),
                               ep.security_protocol)
                for ep in self.advertised if ep.listener_name not in controllers)
        endpoints = []
        for lst in self.listeners:
            if lst.endpoint.listener_name in controllers:
                continue
            host = lst.endpoint.host or "127.0.0.1"
            if host in ("0.0.0.0", "::"):
                import socket
                host = socket.getfqdn()
            endpoints.append(BrokerEndpoint(lst.endpoint.listener_name, host, lst.port,
                                            lst.endpoint.security_protocol))
        return tuple(endpoints)

    async def start(self) -> None:
        """Start everything, or fail with a :class:`StartupError` (a config problem
        found only now) after stopping what had started, quietly: the error is the one
        line the operator sees."""
        try:
            await self._start()
        except BaseException:
            await self._stop(quiet=True)
            raise

    async def _acquire_resources(self) -> None:
        """What the machine can refuse, before anything is started or logged: log dir
        locks and writability, listener ports, the metrics port."""
        source = self.loaded.source
        try:
            self.logs.lock_dirs()
        except LogDirError as e:
            raise StartupError(f"{source}: log.dirs: {e}") from None
        for listener in self.listeners:
            try:
                await listener.bind()
            except ConfigError as e:
                raise StartupError(f"{source}: {e}") from None
        cfg = self.config
        if cfg.metrics_port >= 0:
            try:
                self.metrics_port = self.metrics.serve(cfg.metrics_host, cfg.metrics_port)
            except OSError as e:
                raise StartupError(
                    f"{source}: metrics.port: cannot listen on {cfg.metrics_host}:"
                    f"{cfg.metrics_port}: {e.strerror or e}"
                ) from None

    async def _start(self) -> None:
        cfg = self.config
        self._starting = True
        await self._acquire_resources()
        # A controller-only node (process.roles=controller) has no broker endpoint and
        # registers nothing.
        endpoints = self._advertised_endpoints()
        self.registration = (BrokerRegistration.of(cfg.broker_id, endpoints, cfg.broker_rack)
                             if endpoints else None)
        backend = self.plugins.metadata_backend(self)
        if backend is None:
            raise ConfigError(
                f"{self.loaded.source}: plugins.enabled: no metadata plugin is enabled; "
                "enable metadata_kraft (embedded) or metadata_zk"
            )
        self._metadata = backend
        await backend.start()
        await self.logs.start()
        self._on_image(None, backend.image)
        backend.add_listener(self._on_image)
        self._start_replication(backend)
        self._plugins_starting = True
        try:
            await self.plugins.startup(self)
        except ConfigError:
            raise
        except Exception as e:
            # A plugin's bug, not the operator's: still one line, naming where it broke.
            raise StartupError(
                f"{self.loaded.source}: plugins.enabled: a plugin failed to start "
                f"({_plugin_module(e)}): {type(e).__name__}: {e}"
            ) from None
        for listener in self.listeners:
            await listener.start_serving()
        self.metrics.watch_event_loop(asyncio.get_running_loop())
        self._started = True
        self.log.info(
            "broker started", listeners=[f"{lst.endpoint.listener_name}://"
                                         f"{lst.endpoint.host}:{lst.port}"
                                         for lst in self.listeners],
            plugins=list(self.loaded.enabled_plugins), metrics_port=self.metrics_port,
            open_files_limit=self.descriptor_reserve.limit,
            client_connection_room=self._client_room(),
        )
        self.log.info(describe_room(self.descriptor_reserve, self.logs.num_logs,
                                    self._other_brokers()))

    def _other_brokers(self) -> int:
        metadata = self._metadata
        return max(len(metadata.image.brokers) - 1, 0) if metadata is not None else 0

    def _client_room_metric(self) -> float:
        room = self._client_room()
        return -1 if room is None else room

    def _client_room(self) -> int | None:
        """Client connections the open files limit leaves room for now: the reserve
        grows with the partitions hosted and the brokers linked to."""
        return self.descriptor_reserve.client_room(self.logs.num_logs, self._other_brokers())

    async def stop(self) -> None:
        await self._stop(quiet=False)

    async def _stop(self, *, quiet: bool) -> None:
        """Stop what was started, in reverse order; ``quiet`` (a failed start) logs
        nothing, so the start-up error stays the last word. Idempotent."""
        if self._stopped.is_set() or not self._starting:
            self._stopped.set()
            return
        # The metadata backend stops last (it ends the registration), so its images can
        # come while the replicas and logs stop: they are no longer followed, as Kafka's
        # BrokerServer shuts its metadata listener down first.
        self._stopping = True
        for listener in self.listeners:
            await listener.stop_accepting()
        # Plugins first: they answer the requests they parked (e.g. a JoinGroup gets
        # NOT_COORDINATOR) while the connections can still carry the answer. A start
        # that failed half-way through the plugins stops the ones that did start too.
        if self._plugins_starting:
            await self.plugins.shutdown(self)
        await self._stop_replication()
        for listener in self.listeners:
            await listener.close_connections(SHUTDOWN_GRACE_S)
        self.dispatcher.close()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self.delete_records_purgatory.shutdown()
        self.timer.shutdown()
        await self.logs.stop()
        if self._metadata is not None:
            await self._metadata.stop()
        self.metrics.stop_watching_event_loop()
        self.metrics.close()
        self._started = False
        self._stopped.set()
        if not quiet:
            self.log.info("broker stopped")

    def _inter_broker_listener(self) -> str:
        cfg = self.config
        return (cfg.inter_broker_listener_name or cfg.security_inter_broker_protocol).upper()

    def _start_replication(self, backend: MetadataBackend) -> None:
        """Followers fetch from their leaders on the inter-broker listener; every half
        replica.lag.time.max.ms, leaders drop lagging followers from their ISR."""
        listener = self._inter_broker_listener()

        def endpoint_of(broker_id: int) -> BrokerEndpoint | None:
            registration = backend.image.brokers.get(broker_id)
            return registration.endpoint(listener) if registration is not None else None

        self.inter_broker = InterBrokerChannel(
            self.config.broker_id, listener, endpoint_of,
            timeout_s=INTER_BROKER_REQUEST_TIMEOUT_S, ssl_context=self._inter_broker_tls,
            sasl=self._inter_broker_sasl)
        self.fetchers = ReplicaFetcherManager(
            self.config.broker_id, lambda: self.config, self.replicas, self.inter_broker,
            self.log.bind(component="fetcher"),
            quota=self.replicas.replication_quotas.follower)
        self.replicas.start_replication(self.fetchers, backend.alter_partition)
        self._isr_expiration = asyncio.ensure_future(self._expire_isrs())

    async def _expire_isrs(self) -> None:
        while True:
            lag_max = self.config.replica_lag_time_max_ms
            await asyncio.sleep(lag_max / 2000)
            try:
                self.replicas.shrink_isrs(lag_max)
            except Exception:  # one bad partition must not end the checks for all
                self.log.exception("ISR expiration failed")

    async def _stop_replication(self) -> None:
        if self._isr_expiration is not None:
            self._isr_expiration.cancel()
            await asyncio.gather(self._isr_expiration, return_exceptions=True)
            self._isr_expiration = None
        await self.replicas.stop_replication()
        if self.fetchers is not None:
            await self.fetchers.shutdown()
            self.fetchers = None
        if self.inter_broker is not None:
            self.inter_broker.close()
            self.inter_broker = None

    def _error_logged(self, event: MutableMapping[str, Any]) -> None:
        self.recent_errors.append(" ".join(f"{k}={v}" for k, v in event.items()))
        self.metrics.errors_logged.inc()

    def report_loop_error(self, loop: asyncio.AbstractEventLoop,
                          context: dict[str, Any]) -> None:
        """An event loop exception handler for whoever runs the broker's loop: what
        escaped a callback or a task nobody awaited is logged as the broker's error."""
        exc = context.get("exception")
        self.log.error("unhandled error on the event loop", message=context.get("message"),
                       error=repr(exc) if exc is not None else None)

    def _cleaner_sample(self) -> CleanerSample:
        """Runs in the metrics HTTP thread: the cleaner replaces what it publishes
        rather than changing it, so reading is safe."""
        cleaner = self.logs.cleaner
        assert cleaner is not None
        last_cleans = list(cleaner.last_clean_ms.values())
        return CleanerSample(cleaner.manager.dirty_ratios, cleaner.manager.last_run_ms,
                             max(last_cleans, default=None), cleaner.time_ms())

    def _state_sample(self) -> StateSample:
        """Runs in the metrics HTTP thread: copies before iterating, reads plain ints."""
        partitions = []
        for p in list(self.replicas.partitions.values()):
            log = p.log
            segments = log.segments
            high_watermark = p.high_watermark
            try:
                lag = high_watermark - p.last_stable_offset
            except RuntimeError:  # the loop changed the open transactions while we read
                lag = 0
            partitions.append(PartitionSample(
                p.topic, p.partition, sum(s.size for s in segments), len(segments),
                log.log_start_offset, log.log_end_offset, high_watermark, lag,
                p.is_under_replicated, p.is_under_min_isr,
            ))
        sessions = self.fetch_sessions
        log_dirs = []
        for directory in self.logs.log_dirs:
            try:
                total, usable = volume_bytes(directory)
            except OSError:  # DescribeLogDirs answers KAFKA_STORAGE_ERROR for it
                continue
            log_dirs.append(LogDirSample(os.path.abspath(directory), total, usable))
        metadata = self._metadata
        return StateSample(
            partitions, {
                "Produce": self.produce_purgatory.num_delayed,
                "Fetch": self.fetch_purgatory.num_delayed,
                "DeleteRecords": self.delete_records_purgatory.num_delayed,
            }, FetchSessionSample(len(sessions), sessions.num_partitions, sessions.evictions),
            log_dirs=log_dirs,
            offline_partitions=metadata.image.offline_partitions() if metadata else None,
            open_segments=len(self.logs.open_segments),
            open_segments_capacity=self.logs.open_segments.capacity,
            open_segment_evictions=self.logs.open_segments.evictions,
            metadata=_metadata_health(metadata) if metadata else None,
            preferred_replica_imbalance=(
                preferred_replica_imbalance(metadata.image) if metadata else 0),
        )

    def _high_watermark_of(self, log: Any) -> int | None:
        partition = self.replicas.get_partition(log.topic, log.partition)
        return partition.high_watermark if partition is not None else None

    def _on_image(self, old: ClusterImage | None, new: ClusterImage) -> None:
        """Follow the cluster image: dynamic broker configs, then partition roles."""
        if self._stopping:
            return
        dynamic = self._dynamic_configs(new)
        if old is None or dynamic != self._dynamic_configs(old):
            self.config = self._apply_dynamic(dynamic)
            self.replicas.reconfigure(self.config)
            self._reconfigure_connections(self.config)
        self.replicas.apply_image(old, new)

    def _reconfigure_connections(self, cfg: BrokerConfig) -> None:
        """The dynamic connection limits; a combination Kafka refuses keeps the last."""
        try:
            resolved = per_ip_overrides(cfg)
        except ConfigError as e:
            self.log.warning("ignoring dynamic connection limits", error=str(e))
            return
        self.connection_quotas.reconfigure(cfg.max_connections, cfg.max_connections_per_ip,
                                           resolved, cfg.max_connection_creation_rate)

    def _dynamic_configs(self, image: ClusterImage) -> dict[str, str]:
        merged = dict(image.broker_configs.get(-1, {}))
        merged.update(image.broker_configs.get(self._static_config.broker_id, {}))
        return merged

    def _apply_dynamic(self, dynamic: dict[str, str]) -> BrokerConfig:
        keys = schema_keys(BrokerConfig)
        changes = {}
        for name, raw in dynamic.items():
            key = keys.get(name)
            if key is None or not key.dynamic:
                continue
            try:
                changes[name] = coerce(key, raw, name)
            except ConfigError as e:
                self.log.warning("ignoring invalid dynamic broker config", error=str(e))
        return replace_settings(self._static_config, changes)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def _metadata_health(metadata: MetadataBackend) -> MetadataHealth:
    """The backend's own report; one without ``metadata_health`` is a lone controller."""
    report = getattr(metadata, "metadata_health", None)
    return report() if report is not None else MetadataHealth()


def per_ip_overrides(cfg: BrokerConfig) -> dict[str, int]:
    """max.connections.per.ip.overrides by address, checked as Kafka checks them."""
    overrides = parse_overrides(cfg.max_connections_per_ip_overrides)
    if cfg.max_connections_per_ip == 0 and not overrides:
        raise ConfigError("max.connections.per.ip can be 0 only if "
                          "max.connections.per.ip.overrides is set")
    return resolve_overrides(overrides)


def connection_quotas(cfg: BrokerConfig, client_room: Callable[[], int | None] | None = None,
                      listener_names: Sequence[str] = (),
                      ip_quotas: QuotaSource | None = None) -> ConnectionQuotas:
    """``listener_names``: the broker's listeners; with more than one, the inter-broker
    listener is protected as Kafka's (other brokers are not held back by client load);
    ``ip_quotas``: the client quotas, whose ip entities rate each address's connections."""
    inter_broker = (cfg.inter_broker_listener_name
                    or cfg.security_inter_broker_protocol).upper()
    protected = inter_broker if len(set(listener_names)) > 1 else None
    listener_limits = {
        name: (values.get("max.connections", INT_MAX),
               values.get("max.connection.creation.rate", INT_MAX))
        for name, values in cfg.listener_overrides.items()}
    return ConnectionQuotas(cfg.max_connections, cfg.max_connections_per_ip,
                            per_ip_overrides(cfg),
                            max_creation_rate=cfg.max_connection_creation_rate,
                            listener_limits=listener_limits, client_room=client_room,
                            protected_listener=protected, ip_quotas=ip_quotas)


def memory_pool(cfg: BrokerConfig) -> MemoryPool:
    size = cfg.queued_max_request_bytes
    if 0 < size < cfg.socket_request_max_bytes:
        raise ConfigError(
            f"queued.max.request.bytes ({size}) must be -1 (unbounded) or at least "
            f"socket.request.max.bytes ({cfg.socket_request_max_bytes})"
        )
    return MemoryPool(size)


def _plugin_module(error: BaseException) -> str:
    """The module of the outermost frame of ``error``'s traceback that is neither the
    kernel's nor pluggy's nor the event loop's: the plugin whose hook raised."""
    for frame, _ in traceback.walk_tb(error.__traceback__):
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(("kernel.", "pluggy", "asyncio", "uvloop")):
            return module
    return "unknown module"
