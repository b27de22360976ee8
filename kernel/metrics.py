"""Prometheus metrics: one CollectorRegistry per broker (two brokers in one process
must not share counters) and the /metrics HTTP endpoint."""

from __future__ import annotations

import asyncio
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIServer

from kio.index import UnknownAPIKey
from kio.schema.index import api_key_map
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.utils import floatToGoString

import kernel

LOOP_LAG_INTERVAL_S = 0.1
LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0)
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
)


def api_name(api_key: int) -> str:
    try:
        return api_key_map[api_key]
    except KeyError:
        raise UnknownAPIKey(api_key) from None


@dataclass(frozen=True, slots=True)
class PartitionSample:
    topic: str
    partition: int
    size: int
    segments: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset_lag: int
    under_replicated: bool = False  # led here, ISR smaller than the replicas
    under_min_isr: bool = False  # led here, ISR below min.insync.replicas


@dataclass(frozen=True, slots=True)
class FetchSessionSample:
    sessions: int
    partitions: int
    evictions: int


@dataclass(frozen=True, slots=True)
class LogDirSample:
    """A log directory's file system; a volume that cannot be read has no sample."""

    path: str
    total_bytes: int
    usable_bytes: int


@dataclass(frozen=True, slots=True)
class MetadataHealth:
    """What a metadata backend reports about itself for the metrics and alerts (its
    ``metadata_health()``; a backend without one counts as a lone, always-connected
    controller)."""

    connected: bool = True  # the ZooKeeper session, or the controller quorum, is reachable
    active_controller: bool = True  # this broker is the cluster's active controller
    fenced_brokers: int = 0  # registered brokers fenced (KRaft); ZooKeeper has none
    disconnects: int = 0  # times the metadata connection was lost
    session_expirations: int = 0  # times the broker's session (registration) expired


@dataclass(frozen=True, slots=True)
class StateSample:
    partitions: list[PartitionSample]
    purgatory_delayed: dict[str, int]
    fetch_sessions: FetchSessionSample
    log_dirs: list[LogDirSample] = field(default_factory=list)
    offline_partitions: int | None = None  # None: no cluster image yet
    # The log's open segment files (kernel/log/open_segments.py): segments open now, the
    # cap (None: unbounded), and how many the cap closed so far.
    open_segments: int = 0
    open_segments_capacity: int | None = None
    open_segment_evictions: int = 0
    # The metadata backend's own state and the image's leader imbalance (None: no
    # metadata backend yet).
    metadata: MetadataHealth | None = None
    preferred_replica_imbalance: int = 0


@dataclass(frozen=True, slots=True)
class CleanerSample:
    """The log cleaner's state at scrape time (Kafka's LogCleanerManager gauges)."""

    dirty_ratios: dict[tuple[str, int], float]  # compacted partitions, at the last run
    last_run_ms: int | None  # a cleaner thread last looked for a log to clean
    last_clean_ms: int | None  # the last clean that completed
    now_ms: int


class _CleanerCollector:
    def __init__(self, sample: Callable[[], CleanerSample],
                 last_cleans: dict[str, tuple[float, float, float]]) -> None:
        self._sample = sample
        self._last_cleans = last_cleans

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        state = self._sample()
        ratios = GaugeMetricFamily(
            "kafkernel_log_cleaner_dirty_ratio", "Cleanable bytes over clean plus "
            "cleanable bytes of a compacted partition, when the cleaner last looked "
            "(cleaned above min.cleanable.dirty.ratio).", labels=["topic", "partition"])
        for (topic, partition), ratio in list(state.dirty_ratios.items()):
            ratios.add_metric([topic, str(partition)], ratio)
        yield ratios
        yield GaugeMetricFamily(
            "kafkernel_log_cleaner_max_dirty_percent", "The dirtiest compacted "
            "partition's dirty ratio, in percent (Kafka's max-dirty-percent).",
            value=100 * max(state.dirty_ratios.values(), default=0.0))
        # Kafka's per-thread gauges take the worst of each thread's last clean.
        last = list(self._last_cleans.values())
        yield GaugeMetricFamily(
            "kafkernel_log_cleaner_recopy_percent", "Bytes written over bytes recopied "
            "by the last clean, in percent, worst thread (Kafka's cleaner-recopy-percent).",
            value=max((r for r, _, _ in last), default=0.0))
        yield GaugeMetricFamily(
            "kafkernel_log_cleaner_max_clean_time_seconds", "Duration of the last clean, "
            "longest thread (Kafka's max-clean-time-secs).",
            value=max((t for _, t, _ in last), default=0.0))
        yield GaugeMetricFamily(
            "kafkernel_log_cleaner_max_buffer_utilization_percent", "Share of the offset "
            "map the last clean filled, fullest thread (Kafka's "
            "max-buffer-utilization-percent).", value=max((u for _, _, u in last), default=0.0))
        # Absent until it happened once: no made-up age.
        if state.last_run_ms is not None:
            yield GaugeMetricFamily(
                "kafkernel_log_cleaner_time_since_last_run_seconds", "Time since a cleaner "
                "thread last looked for a log to clean (Kafka's time-since-last-run-ms).",
                value=max(state.now_ms - state.last_run_ms, 0) / 1000)
        if state.last_clean_ms is not None:
            yield GaugeMetricFamily(
                "kafkernel_log_cleaner_time_since_last_clean_seconds", "Time since a clean "
                "last completed.", value=max(state.now_ms - state.last_clean_ms, 0) / 1000)


class _ApiStats:
    """One API's request count and latency histogram, as plain numbers."""

    __slots__ = ("buckets", "name", "sum")

    def __init__(self, name: str) -> None:
        self.name = name
        self.sum = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf


class _RequestCollector:
    """Requests, their latency and network bytes: counted once per request on the
    event loop, so kept in plain numbers (a prometheus_client child takes a lock per
    increment, four per request) and turned into families at scrape time."""

    def __init__(self) -> None:
        self.per_api: dict[int, _ApiStats] = {}
        self.bytes_in = 0
        self.bytes_out = 0

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        requests = CounterMetricFamily("kafkernel_requests", "Requests handled, by API.",
                                       labels=["api"])
        latency = HistogramMetricFamily(
            "kafkernel_request_latency_seconds", "Time from decoded request to encoded "
            "response, by API.", labels=["api"])
        bounds = [*map(floatToGoString, LATENCY_BUCKETS), "+Inf"]
        for stats in list(self.per_api.values()):
            counts = list(stats.buckets)  # the event loop goes on counting meanwhile
            cumulative, running = [], 0
            for bound, n in zip(bounds, counts, strict=True):
                running += n
                cumulative.append((bound, running))
            requests.add_metric([stats.name], running)
            latency.add_metric([stats.name], cumulative, stats.sum)
        yield requests
        yield latency
        yield CounterMetricFamily("kafkernel_network_bytes_in", "Request bytes received.",
                                  value=self.bytes_in)
        yield CounterMetricFamily("kafkernel_network_bytes_out", "Response bytes sent.",
                                  value=self.bytes_out)


class _StateCollector:
    def __init__(self, sample: Callable[[], StateSample]) -> None:
        self._sample = sample

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        state = self._sample()
        labels = ["topic", "partition"]
        families = {
            "size": GaugeMetricFamily("kafkernel_log_size_bytes", "Bytes in a partition's "
                                      "segments.", labels=labels),
            "segments": GaugeMetricFamily("kafkernel_log_segments", "Segments of a partition.",
                                          labels=labels),
            "log_start_offset": GaugeMetricFamily("kafkernel_log_start_offset",
                                                  "Log start offset.", labels=labels),
            "log_end_offset": GaugeMetricFamily("kafkernel_log_end_offset",
                                                "Log end offset.", labels=labels),
            "high_watermark": GaugeMetricFamily("kafkernel_high_watermark",
                                                "High watermark.", labels=labels),
            "last_stable_offset_lag": GaugeMetricFamily(
                "kafkernel_last_stable_offset_lag", "High watermark minus last stable "
                "offset: records open transactions hold back from READ_COMMITTED readers "
                "(Kafka's LastStableOffsetLag).", labels=labels),
        }
        for p in state.partitions:
            values = [p.topic, str(p.partition)]
            for field_name, family in families.items():
                family.add_metric(values, getattr(p, field_name))
        yield from families.values()
        purgatory = GaugeMetricFamily("kafkernel_purgatory_delayed_operations",
                                      "Operations waiting in a purgatory.", labels=["purgatory"])
        for name, size in state.purgatory_delayed.items():
            purgatory.add_metric([name], size)
        yield purgatory
        # Kafka's FetchSessionCache metrics: NumIncrementalFetchSessions,
        # NumIncrementalFetchPartitionsCached, IncrementalFetchSessionEvictionsPerSec.
        sessions = state.fetch_sessions
        yield GaugeMetricFamily("kafkernel_incremental_fetch_sessions",
                                "KIP-227 incremental fetch sessions cached.",
                                value=sessions.sessions)
        yield GaugeMetricFamily("kafkernel_incremental_fetch_partitions_cached",
                                "Partitions in all incremental fetch sessions.",
                                value=sessions.partitions)
        yield CounterMetricFamily("kafkernel_incremental_fetch_session_evictions",
                                  "Incremental fetch sessions evicted to make room for "
                                  "new ones.", value=sessions.evictions)
        yield GaugeMetricFamily(
            "kafkernel_log_open_segments", "Segments whose files are open now, active ones "
            "included: a partition at rest holds none.", value=state.open_segments)
        yield GaugeMetricFamily(
            "kafkernel_log_open_segments_capacity", "Segments that may keep their files "
            "open at once (-1: no bound), from the open files limit.",
            value=-1 if state.open_segments_capacity is None
            else state.open_segments_capacity)
        yield CounterMetricFamily(
            "kafkernel_log_open_segment_evictions", "Segments whose files were closed to "
            "stay within the capacity; they open again on their next use.",
            value=state.open_segment_evictions)
        # Kafka's ReplicaManager gauges UnderReplicatedPartitions and
        # UnderMinIsrPartitionCount: partitions led here, so a cluster sums them.
        yield GaugeMetricFamily(
            "kafkernel_under_replicated_partitions", "Partitions led here whose ISR is "
            "smaller than their replica set.",
            value=sum(p.under_replicated for p in state.partitions))
        yield GaugeMetricFamily(
            "kafkernel_under_min_isr_partitions", "Partitions led here whose ISR is "
            "below min.insync.replicas: acks=all produces to them are refused.",
            value=sum(p.under_min_isr for p in state.partitions))
        if state.offline_partitions is not None:
            # Every broker sees the same image: a cluster takes the max, not the sum.
            yield GaugeMetricFamily(
                "kafkernel_offline_partitions", "Partitions of the cluster without a "
                "reachable leader, as this broker's cluster image has them (Kafka's "
                "OfflinePartitionsCount).", value=state.offline_partitions)
        if state.metadata is not None:
            yield from _metadata_families(state.metadata, state.preferred_replica_imbalance)
        total = GaugeMetricFamily("kafkernel_log_dir_total_bytes", "Size of the file "
                                  "system a log directory is on.", labels=["log_dir"])
        usable = GaugeMetricFamily("kafkernel_log_dir_usable_bytes", "Bytes an "
                                   "unprivileged writer can still use on a log "
                                   "directory's file system.", labels=["log_dir"])
        for d in state.log_dirs:
            total.add_metric([d.path], d.total_bytes)
            usable.add_metric([d.path], d.usable_bytes)
        yield total
        yield usable


def _metadata_families(health: MetadataHealth, imbalance: int) -> Iterator[Any]:
    """The controller's gauges (Kafka's kafka.controller:type=KafkaController) and the
    metadata connection's (Kafka's ZooKeeper-era SessionExpireListener)."""
    yield GaugeMetricFamily(
        "kafkernel_metadata_connected", "1 while the broker's metadata connection (its "
        "ZooKeeper session, or the controller quorum) is up, 0 while it is lost: metadata "
        "changes wait, admin requests that need one answer REQUEST_TIMED_OUT.",
        value=int(health.connected))
    yield CounterMetricFamily(
        "kafkernel_metadata_disconnects", "Times the metadata connection was lost "
        "(Kafka's ZooKeeperDisconnectsPerSec).", value=health.disconnects)
    yield CounterMetricFamily(
        "kafkernel_metadata_session_expirations", "Times the broker's metadata session "
        "expired, its registration with it (Kafka's ZooKeeperExpiresPerSec).",
        value=health.session_expirations)
    yield GaugeMetricFamily(
        "kafkernel_active_controller_count", "1 on the cluster's active controller, 0 "
        "elsewhere: a cluster sums to 1 (Kafka's ActiveControllerCount).",
        value=int(health.active_controller))
    yield GaugeMetricFamily(
        "kafkernel_fenced_brokers", "Registered brokers the controller fenced, as this "
        "broker knows them (Kafka's FencedBrokerCount); always 0 on ZooKeeper, where a "
        "broker without a session is not registered.", value=health.fenced_brokers)
    # Every broker sees the same image: a cluster takes the max, not the sum.
    yield GaugeMetricFamily(
        "kafkernel_preferred_replica_imbalance", "Partitions of the cluster led by a "
        "replica other than their preferred (first) one, as this broker's cluster image "
        "has them (Kafka's PreferredReplicaImbalanceCount).", value=imbalance)


class BrokerMetrics:
    """The kernel's metrics; plugins register theirs on ``registry``."""

    def __init__(self, broker_id: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests = _RequestCollector()
        r.register(self._requests)
        self.connections = Gauge(
            "kafkernel_active_connections", "Open client connections.", ["listener"], registry=r
        )
        self.connections_rejected = Counter(
            "kafkernel_connections_rejected", "Connections closed as soon as accepted or "
            "read from, by reason: max_connections_per_ip, file_descriptors (the open files "
            "limit leaves no room beside the broker's own work), tls_on_plaintext (a TLS "
            "client on a PLAINTEXT listener), tls_handshake_failed; before SASL "
            "authentication: sasl_max_receive_size, preauth_memory, authentication_timeout.",
            ["listener", "reason"], registry=r,
        )
        self.client_connection_room = Gauge(
            "kafkernel_client_connection_room", "Client connections the open files limit "
            "(RLIMIT_NOFILE) leaves room for beside the descriptors the broker keeps for "
            "its own work (-1 when unlimited).", registry=r,
        )
        # Kafka's connection-accept-throttle-time, as a count and a total.
        self.connections_throttled = Counter(
            "kafkernel_connections_throttled", "Accepted connections held over "
            "max.connection.creation.rate (KIP-612).", ["listener"], registry=r,
        )
        # KIP-612's per-IP quota, per quota entity: the ip entity's address, or
        # "<default>" for the ip default entity (a bounded set of labels).
        self.ip_connections_throttled = Counter(
            "kafkernel_ip_connections_throttled", "Connections accepted over their "
            "address's connection_creation_rate quota and closed after the throttle time "
            "(KIP-612).", ["listener", "ip"], registry=r,
        )
        self.ip_connection_throttle_seconds = Counter(
            "kafkernel_ip_connection_throttle_seconds", "Throttle time of the connections "
            "over their address's connection_creation_rate quota (Kafka's "
            "ip-connection-accept-throttle-time).", ["listener", "ip"], registry=r,
        )
        self.connection_throttle_seconds = Counter(
            "kafkernel_connection_throttle_seconds", "Time the acceptor held connections "
            "over max.connection.creation.rate.", ["listener"], registry=r,
        )
        # Per quota entity (Kafka's user/client-id sensor tags; "" where the quota is
        # not per that part), for the clients a byte-rate quota applies to.
        self.client_quota_bytes = Counter(
            "kafkernel_client_quota_bytes", "Bytes recorded against a client byte-rate "
            "quota (produce: request sizes; fetch: record bytes answered).",
            ["quota", "user", "client_id"], registry=r,
        )
        self.client_quota_throttled = Counter(
            "kafkernel_client_quota_throttled", "Answers throttled over a client quota "
            "(produce, fetch, request, controller_mutation): throttle_time_ms set, the "
            "connection muted that long.",
            ["quota", "user", "client_id"], registry=r,
        )
        self.client_quota_mutations = Counter(
            "kafkernel_client_quota_mutations", "Partitions created or deleted "
            "(CreateTopics, CreatePartitions, DeleteTopics) recorded against a client's "
            "controller_mutation_rate (KIP-599).", ["user", "client_id"], registry=r,
        )
        self.client_quota_throttle_seconds = Counter(
            "kafkernel_client_quota_throttle_seconds", "Throttle time given over a client "
            "quota.", ["quota", "user", "client_id"], registry=r,
        )
        # Kafka's LeaderReplication / FollowerReplication byte-rate sensors (KIP-73),
        # by type, and the partitions their quotas held back.
        self.replication_quota_bytes = Counter(
            "kafkernel_replication_quota_bytes", "Bytes of throttled replicas recorded "
            "against a replication quota: a leader's answers to followers "
            "(LeaderReplication), a follower's fetched records (FollowerReplication).",
            ["type"], registry=r,
        )
        self.replication_byte_rate = Gauge(
            "kafkernel_replication_byte_rate", "Those bytes per second, as the quota "
            "measures them (Kafka's byte-rate).", ["type"], registry=r,
        )
        self.replication_quota_throttled = Counter(
            "kafkernel_replication_quota_throttled", "Throttled partitions held back over a "
            "replication quota: answered without records (LeaderReplication), left out of "
            "a fetch (FollowerReplication).", ["type"], registry=r,
        )
        self.request_pool_used = Gauge(
            "kafkernel_request_pool_used_bytes", "Request bytes arrived and not yet "
            "handled, across connections (bounded by queued.max.request.bytes).", registry=r,
        )
        self.preauth_pool_used = Gauge(
            "kafkernel_preauth_pool_used_bytes", "Request bytes held by connections that "
            "have not authenticated (SASL listeners), bounded by their own share.",
            registry=r,
        )
        # Kafka's expired-connections-killed-count (KIP-368).
        self.expired_connections_killed = Counter(
            "kafkernel_expired_connections_killed",
            "Connections closed because their SASL session expired without "
            "re-authentication (KIP-368).", registry=r)
        self.errors = Counter(
            "kafkernel_errors", "Error codes returned, by error name.", ["error"], registry=r
        )
        self.errors_logged = Counter(
            "kafkernel_log_errors", "Error-level events the broker logged (failures that "
            "were handled by logging them).", registry=r,
        )
        self.build_info = Gauge(
            "kafkernel_build_info", "Build of this broker (value is always 1).",
            ["version", "broker_id"], registry=r,
        )
        self.build_info.labels(kernel.__version__, str(broker_id)).set(1)
        self.topic_messages_in = Counter(
            "kafkernel_topic_messages_in", "Records appended, by topic.", ["topic"], registry=r
        )
        self.topic_bytes_in = Counter(
            "kafkernel_topic_bytes_in", "Record bytes appended, by topic.", ["topic"], registry=r
        )
        self.topic_messages_out = Counter(
            "kafkernel_topic_messages_out", "Records sent to fetchers, by topic.", ["topic"],
            registry=r,
        )
        self.topic_bytes_out = Counter(
            "kafkernel_topic_bytes_out", "Record bytes sent to fetchers, by topic.", ["topic"],
            registry=r,
        )
        self.flush_latency = Histogram(
            "kafkernel_log_flush_seconds", "Time of one log fsync.", buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.event_loop_lag = Histogram(
            "kafkernel_event_loop_lag_seconds", "How late a timer due every "
            f"{LOOP_LAG_INTERVAL_S} s fired on the event loop: the wait a request had "
            "before the loop could read it.", buckets=LOOP_LAG_BUCKETS, registry=r,
        )
        self._loop_lag_timer: asyncio.TimerHandle | None = None
        self._error_children: dict[Any, Any] = {}
        # Kafka's LogCleaner counters; the cleaner threads count, the scrape reads.
        self.cleaner_runs = Counter(
            "kafkernel_log_cleaner_runs", "Cleans of a compacted partition that completed.",
            registry=r)
        self.cleaner_bytes_read = Counter(
            "kafkernel_log_cleaner_bytes_read", "Segment bytes the cleaner read, by phase: "
            "map (building the key -> offset map), recopy (copying what is kept).",
            ["phase"], registry=r)
        for phase in ("map", "recopy"):
            self.cleaner_bytes_read.labels(phase)  # 0 from the start, not absent
        self.cleaner_bytes_written = Counter(
            "kafkernel_log_cleaner_bytes_written", "Bytes of cleaned segments written.",
            registry=r)
        # cleaner thread -> its last clean's (recopy percent, seconds, map utilization %)
        self._last_cleans: dict[str, tuple[float, float, float]] = {}
        self._per_topic: dict[str, tuple[Any, Any, Any, Any]] = {}
        self._http: WSGIServer | None = None
        self._http_thread: threading.Thread | None = None

    def request_done(self, api_key: int, seconds: float, bytes_in: int, bytes_out: int) -> None:
        """Called on the event loop only."""
        requests = self._requests
        stats = requests.per_api.get(api_key)
        if stats is None:
            stats = requests.per_api[api_key] = _ApiStats(api_name(api_key))
        stats.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        stats.sum += seconds
        requests.bytes_in += bytes_in + 4
        requests.bytes_out += bytes_out

    def connection_rejected(self, listener: str) -> Callable[[str], None]:
        """A counter of rejected connections for one listener, by reason."""
        return lambda reason: self.connections_rejected.labels(listener, reason).inc()

    def connection_throttled(self, listener: str) -> Callable[[int], None]:
        """Counts one throttled accept of ``listener`` and its throttle time (ms)."""
        count = self.connections_throttled.labels(listener)
        seconds = self.connection_throttle_seconds.labels(listener)

        def throttled(ms: int) -> None:
            count.inc()
            seconds.inc(ms / 1000)

        return throttled

    def ip_connection_throttled(self, listener: str) -> Callable[[str, int], None]:
        """Counts one connection of ``listener`` throttled over an ip quota entity's
        connection_creation_rate, and its throttle time (ms)."""

        def throttled(entity: str, ms: int) -> None:
            self.ip_connections_throttled.labels(listener, entity).inc()
            self.ip_connection_throttle_seconds.labels(listener, entity).inc(ms / 1000)

        return throttled

    def client_mutations_recorded(self, tags: tuple[str, str], partitions: int,
                                  throttle_ms: int) -> None:
        self.client_quota_mutations.labels(*tags).inc(partitions)
        if throttle_ms > 0:
            self.client_quota_throttled.labels("controller_mutation", *tags).inc()
            self.client_quota_throttle_seconds.labels("controller_mutation", *tags).inc(
                throttle_ms / 1000)

    def client_quota_recorded(self, quota: str, tags: tuple[str, str], size: int,
                              throttle_ms: int) -> None:
        self.client_quota_bytes.labels(quota, *tags).inc(size)
        if throttle_ms > 0:
            self.client_quota_throttled.labels(quota, *tags).inc()
            self.client_quota_throttle_seconds.labels(quota, *tags).inc(throttle_ms / 1000)

    def _topic(self, topic: str) -> tuple[Any, Any, Any, Any]:
        children = self._per_topic.get(topic)
        if children is None:
            children = (self.topic_messages_in.labels(topic), self.topic_bytes_in.labels(topic),
                        self.topic_messages_out.labels(topic), self.topic_bytes_out.labels(topic))
            self._per_topic[topic] = children
        return children

    def records_in(self, topic: str, records: int, size: int) -> None:
        children = self._topic(topic)
        children[0].inc(records)
        children[1].inc(size)

    def records_out(self, topic: str, records: int, size: int) -> None:
        children = self._topic(topic)
        children[2].inc(records)
        children[3].inc(size)

    def forget_topic(self, topic: str) -> None:
        if self._per_topic.pop(topic, None) is not None:
            for metric in (self.topic_messages_in, self.topic_bytes_in,
                           self.topic_messages_out, self.topic_bytes_out):
                metric.remove(topic)

    def error(self, code: Any) -> None:
        # The labelled child kept per code: a request answering 100,000 partitions with
        # an error counts each, and labels() is most of that cost.
        child = self._error_children.get(code)
        if child is None:
            child = self._error_children[code] = self.errors.labels(
                getattr(code, "name", str(code)))
        child.inc()

    def watch_state(self, sample: Callable[[], StateSample]) -> None:
        """Gauges read from the broker's state at scrape time (log size and segments
        per partition, purgatory sizes) instead of being updated on the hot path."""
        self.registry.register(_StateCollector(sample))

    def log_cleaned(self, map_bytes_read: int, bytes_read: int, bytes_written: int,
                    seconds: float, buffer_utilization: float) -> None:
        """One completed clean; called from the cleaner thread that did it."""
        self.cleaner_runs.inc()
        self.cleaner_bytes_read.labels("map").inc(map_bytes_read)
        self.cleaner_bytes_read.labels("recopy").inc(bytes_read)
        self.cleaner_bytes_written.inc(bytes_written)
        recopy = 100 * bytes_written / bytes_read if bytes_read else 0.0
        self._last_cleans[threading.current_thread().name] = (
            recopy, seconds, 100 * buffer_utilization)

    def watch_cleaner(self, sample: Callable[[], CleanerSample]) -> None:
        """The log cleaner's gauges, read at scrape time."""
        self.registry.register(_CleanerCollector(sample, self._last_cleans))

    def watch_event_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Sample the loop's lag (as Kafka's request-handler idle ratio tells how busy its
        threads are): a timer due every LOOP_LAG_INTERVAL_S seconds records how late it
        fired. Ten callbacks a second; one that blocks the loop shows as one late one."""
        observe = self.event_loop_lag.observe

        def tick(due: float) -> None:
            now = loop.time()
            observe(max(0.0, now - due))
            self._loop_lag_timer = loop.call_at(now + LOOP_LAG_INTERVAL_S, tick,
                                                now + LOOP_LAG_INTERVAL_S)

        due = loop.time() + LOOP_LAG_INTERVAL_S
        self._loop_lag_timer = loop.call_at(due, tick, due)

    def stop_watching_event_loop(self) -> None:
        if self._loop_lag_timer is not None:
            self._loop_lag_timer.cancel()
            self._loop_lag_timer = None

    def serve(self, host: str, port: int) -> int:
        """Start the /metrics endpoint in a daemon thread; returns the bound port."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._http, self._http_thread = server, thread
        return int(server.server_address[1])

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
