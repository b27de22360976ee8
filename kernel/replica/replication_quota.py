"""Replication quotas (KIP-73), as Kafka's ReplicationQuotaManager: what reassignments
use to move replicas without starving clients (``kafka-reassign-partitions --throttle``).

A topic's ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas`` list ``partition:broker`` pairs (or ``*``);
a broker throttles, on each side, the partitions whose pair names itself. The leader
records the bytes it answers followers for its throttled partitions and, while its rate
is over ``leader.replication.throttled.rate``, answers the followers of those partitions
that are not in the ISR without records (Kafka's ``shouldLeaderThrottle``). The follower
records the bytes it fetches for its throttled partitions and, while over
``follower.replication.throttled.rate``, leaves out of its fetches those whose replica
has not caught up (``shouldFollowerThrottle``). Rates are Kafka's SimpleRate over
``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kernel.config import LONG_MAX, THROTTLED_REPLICAS_KEYS, BrokerConfig
from kernel.metrics import BrokerMetrics

LEADER_REPLICATION = "LeaderReplication"
FOLLOWER_REPLICATION = "FollowerReplication"
ALL_REPLICAS = None  # the parsed form of "*"
_PARSED_CACHE_MAX = 1024


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions of ``broker_id`` a valid throttled-replicas value names (None:
    ``*``, every one), as Kafka's ConfigHandler.parseThrottledPartitions."""
    items = [item.strip() for item in value.split(",")]
    if "".join(items) == "*":
        return ALL_REPLICAS
    partitions = set()
    for item in items:
        partition, sep, broker = item.partition(":")
        if sep and partition.isdigit() and broker.isdigit() and int(broker) == broker_id:
            partitions.add(int(partition))
    return frozenset(partitions)


class SimpleRate:
    """Kafka's SimpleRate over a SampledStat: values summed in up to ``samples`` windows
    of ``window_ms``, each starting at its first value; the rate is their total over the
    time since the oldest window began, never taken as less than one window."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._windows: list[list[float]] = []  # [start ms, total], oldest first

    def record(self, now_ms: float, value: float) -> None:
        self._windows = self._current(now_ms)
        if self._windows and now_ms - self._windows[-1][0] < self.window_ms:
            self._windows[-1][1] += value
        else:
            self._windows.append([now_ms, value])
            del self._windows[:-self.samples]

    def measure(self, now_ms: float) -> float:
        """Per second. Reads without changing state (the metrics thread calls it too)."""
        windows = self._current(now_ms)
        if not windows:
            return 0.0
        elapsed = max(now_ms - windows[0][0], self.window_ms)
        return sum(w[1] for w in windows) / (elapsed / 1000)

    def _current(self, now_ms: float) -> list[list[float]]:
        expire = self.samples * self.window_ms
        return [w for w in self._windows if now_ms - w[0] < expire]


class ReplicationQuotaManager:
    """One side's quota (leader or follower) of one broker."""

    def __init__(self, replication_type: str, broker_id: int,
                 metrics: BrokerMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.replication_type = replication_type
        self.broker_id = broker_id
        self._config_key = THROTTLED_REPLICAS_KEYS[
            0 if replication_type == LEADER_REPLICATION else 1]
        self._clock = clock
        self.quota = LONG_MAX
        self._rate = SimpleRate(11, 1000)
        self._topics: Mapping[str, Any] = {}
        self._parsed: dict[str, frozenset[int] | None] = {}
        self._bytes: Any = None
        self._throttled: Any = None
        if metrics is not None:
            self._bytes = metrics.replication_quota_bytes.labels(replication_type)
            self._throttled = metrics.replication_quota_throttled.labels(replication_type)
            metrics.replication_byte_rate.labels(replication_type).set_function(self.rate)

    def configure(self, quota: int, samples: int, window_s: int) -> None:
        """Kafka's updateQuota; a new window shape starts the measurement over."""
        self.quota = quota
        if (samples, window_s * 1000) != (self._rate.samples, self._rate.window_ms):
            self._rate = SimpleRate(samples, window_s * 1000)

    def follow_topics(self, topics: Mapping[str, Any]) -> None:
        """The cluster image's topics (name -> TopicImage), whose configs name the
        throttled replicas."""
        self._topics = topics

    def is_throttled(self, topic: str, partition: int) -> bool:
        image = self._topics.get(topic)
        value = image.configs.get(self._config_key) if image is not None else None
        if not value:
            return False
        if value not in self._parsed:
            if len(self._parsed) >= _PARSED_CACHE_MAX:
                self._parsed.clear()
            self._parsed[value] = throttled_partitions(value, self.broker_id)
        partitions = self._parsed[value]
        return partitions is ALL_REPLICAS or partition in partitions

    def is_quota_exceeded(self) -> bool:
        """Kafka's checkQuotas on the sensor: the measured rate above the bound."""
        return self.quota < LONG_MAX and self.rate() > self.quota

    def record(self, size: int) -> None:
        """Count bytes of throttled partitions, over the quota or not (Kafka's record)."""
        if size <= 0:
            return
        self._rate.record(self._now_ms(), size)
        if self._bytes is not None:
            self._bytes.inc(size)

    def held_back(self, partitions: int = 1) -> None:
        """Partitions answered without records, or left out of a fetch, over the quota."""
        if self._throttled is not None:
            self._throttled.inc(partitions)

    def rate(self) -> float:
        return self._rate.measure(self._now_ms())

    def _now_ms(self) -> float:
        return self._clock() * 1000


class ReplicationQuotas:
    """Both sides' quotas of one broker (Kafka's QuotaManagers.leader and .follower)."""

    def __init__(self, broker_id: int, metrics: BrokerMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.leader = ReplicationQuotaManager(LEADER_REPLICATION, broker_id, metrics, clock)
        self.follower = ReplicationQuotaManager(FOLLOWER_REPLICATION, broker_id, metrics, clock)

    def reconfigure(self, config: BrokerConfig) -> None:
        samples, window_s = (config.replication_quota_window_num,
                             config.replication_quota_window_size_seconds)
        self.leader.configure(config.leader_replication_throttled_rate, samples, window_s)
        self.follower.configure(config.follower_replication_throttled_rate, samples, window_s)

    def follow_topics(self, topics: Mapping[str, Any]) -> None:
        self.leader.follow_topics(topics)
        self.follower.follow_topics(topics)

    def should_leader_throttle(self, topic: str, partition: int, isr: tuple[int, ...],
                               replica_id: int) -> bool:
        """Kafka's ReplicaManager.shouldLeaderThrottle: a follower out of the ISR, a
        throttled partition, the leader's quota exceeded."""
        return (replica_id not in isr and self.leader.is_throttled(topic, partition)
                and self.leader.is_quota_exceeded())
