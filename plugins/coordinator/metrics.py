"""Group coordinator metrics on the broker's registry.

Counters are bumped by the handlers. Gauges (groups by state, members, consumer lag)
are computed when /metrics is scraped, from the loaded shards: no bookkeeping on the
request path. Consumer lag needs no client: a group's committed offsets are the shard's
and a partition's high watermark is the replica manager's, so it is known for every
partition with a replica here (Kafka has no broker-side lag metric; tools compute it
from ListOffsets and OffsetFetch). The scrape runs on the metrics server's thread while
the event loop mutates the shards, so the collector only takes snapshots (``list(...)``
of a dict is one C call under the GIL) and skips a scrape that still races.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from plugins.coordinator.group import GroupState

if TYPE_CHECKING:
    from kernel.api.coordination import CoordinatorRuntime
    from kernel.api.services import PluginServices
    from plugins.coordinator.shard import GroupCoordinatorShard

__all__ = ["GroupMetrics"]

_LAG = ("kafkernel_group_consumer_lag", "High watermark minus the group's committed "
        "offset, for partitions with a replica on this broker (a follower's high "
        "watermark trails the leader's by a fetch).")
_LAG_SUM = ("kafkernel_group_consumer_lag_sum", "The group's consumer lag summed over "
            "its partitions with a replica on this broker.")


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
            GaugeMetricFamily(*_LAG, labels=["group", "topic", "partition"]),
            GaugeMetricFamily(*_LAG_SUM, labels=["group"]),
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
        lag = GaugeMetricFamily(*_LAG, labels=["group", "topic", "partition"])
        lag_sum = GaugeMetricFamily(*_LAG_SUM, labels=["group"])
        partitions = GaugeMetricFamily(
            "kafkernel_group_coordinator_partitions",
            "__consumer_offsets partitions this broker leads, by state.", labels=["state"],
        )
        counts = {s.value: 0 for s in GroupState if s is not GroupState.DEAD}
        for shard in list(self._runtime.loaded_shards().values()):
            for group_id in shard.group_ids():
                group = shard.group(group_id)
                if group is None or group.state is GroupState.DEAD:
                    continue
                counts[group.state.value] += 1
                members.add_metric([group_id], len(group.members))
                total, known = 0, False
                for (topic, index), committed in list(shard.offsets(group_id).items()):
                    # A follower's high watermark trails its leader's by one fetch: close
                    # enough, and the only one this broker has for a partition led
                    # elsewhere. No replica here: no lag rather than a guessed one.
                    partition = self._broker.partition(topic, index)
                    if partition is None:
                        continue
                    behind = max(0, partition.high_watermark - committed.offset)
                    lag.add_metric([group_id, topic, str(index)], behind)
                    total, known = total + behind, True
                if known:
                    lag_sum.add_metric([group_id], total)
        for state, count in counts.items():
            by_state.add_metric([state], count)
        states: dict[str, int] = {}
        for state in self._runtime.partition_states().values():
            states[state] = states.get(state, 0) + 1
        for state, count in states.items():
            partitions.add_metric([state], count)
        return [by_state, members, lag, lag_sum, partitions]
