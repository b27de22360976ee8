"""Group coordinator metrics on the broker's registry.

Counters are bumped by the handlers. Gauges (groups by state, members, consumer lag)
are computed when /metrics is scraped, from the loaded shards: no bookkeeping on the
request path. The scrape runs on the metrics server's thread while the event loop
mutates the shards, so the collector only takes snapshots (``list(...)`` of a dict is
one C call under the GIL) and skips a scrape that still races.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from plugins.coordinator.group import GroupState

if TYPE_CHECKING:
    from kernel.coordination import CoordinatorRuntime
    from kernel.services import PluginServices
    from plugins.coordinator.shard import GroupCoordinatorShard

__all__ = ["GroupMetrics"]


class GroupMetrics:
    def __init__(self, runtime: CoordinatorRuntime[GroupCoordinatorShard],
                 broker: PluginServices) -> None:
        self._registry = broker.metrics.registry
        r = self._registry
        self.rebalances = Counter(
            "kafkernel_group_rebalances", "Rebalances completed (generations formed).",
            registry=r,
        )
        self.offset_commits = Counter(
            "kafkernel_group_offset_commits", "Partition offsets committed.", registry=r
        )
        self.offset_commit_requests = Counter(
            "kafkernel_group_offset_commit_requests", "OffsetCommit requests answered.",
            registry=r,
        )
        self._collector = _GroupCollector(runtime, broker)
        r.register(self._collector)

    def close(self) -> None:
        for metric in (self.rebalances, self.offset_commits, self.offset_commit_requests,
                       self._collector):
            self._registry.unregister(metric)


class _GroupCollector(Collector):
    def __init__(self, runtime: CoordinatorRuntime[GroupCoordinatorShard],
                 broker: PluginServices) -> None:
        self._runtime = runtime
        self._broker = broker

    def describe(self) -> list[Metric]:
        # Without describe() the registry would call collect() at registration.
        return [
            GaugeMetricFamily("kafkernel_groups", "Groups by state.", labels=["state"]),
            GaugeMetricFamily("kafkernel_group_members", "Members of each group.",
                              labels=["group"]),
            GaugeMetricFamily("kafkernel_group_consumer_lag", "High watermark minus committed "
                              "offset, for partitions this broker leads.",
                              labels=["group", "topic", "partition"]),
            GaugeMetricFamily("kafkernel_group_coordinator_partitions",
                              "__consumer_offsets partitions this broker leads, by state.",
                              labels=["state"]),
        ]

    def collect(self) -> Iterator[Metric]:
        for _ in range(3):
            try:
                families = self._snapshot()
            except RuntimeError:  # a dict changed size under us: take another snapshot
                continue
            yield from families
            return

    def _snapshot(self) -> list[Metric]:
        by_state = GaugeMetricFamily("kafkernel_groups", "Groups by state.", labels=["state"])
        members = GaugeMetricFamily("kafkernel_group_members", "Members of each group.",
                                    labels=["group"])
        lag = GaugeMetricFamily(
            "kafkernel_group_consumer_lag",
            "High watermark minus committed offset, for partitions this broker leads.",
            labels=["group", "topic", "partition"],
        )
        partitions = GaugeMetricFamily(
            "kafkernel_group_coordinator_partitions",
            "__consumer_offsets partitions this broker leads, by state.", labels=["state"],
        )
        counts = {s.value: 0 for s in GroupState if s is not GroupState.DEAD}
        replicas: Any = self._broker.replicas
        for shard in list(self._runtime.loaded_shards().values()):
            for group_id in shard.group_ids():
                group = shard.group(group_id)
                if group is None or group.state is GroupState.DEAD:
                    continue
                counts[group.state.value] += 1
                members.add_metric([group_id], len(group.members))
                for (topic, index), committed in list(shard.offsets(group_id).items()):
                    partition = replicas.get_partition(topic, index)
                    if partition is not None and partition.is_leader:
                        lag.add_metric([group_id, topic, str(index)],
                                       max(0, partition.high_watermark - committed.offset))
        for state, count in counts.items():
            by_state.add_metric([state], count)
        states: dict[str, int] = {}
        for state in self._runtime.partition_states().values():
            states[state] = states.get(state, 0) + 1
        for state, count in states.items():
            partitions.add_metric([state], count)
        return [by_state, members, lag, partitions]
