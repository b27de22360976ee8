"""Transaction coordinator metrics on the broker's registry: counters bumped by the
service, and transactions by state computed from the loaded shards at scrape time (the
scrape runs on the metrics server's thread, so it only takes snapshots and skips a
scrape that still races)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from plugins.txn.metadata import TxnState

if TYPE_CHECKING:
    from kernel.api.coordination import CoordinatorRuntime
    from kernel.api.services import PluginServices
    from plugins.txn.shard import TxnShard

__all__ = ["TxnMetrics"]

_BY_STATE = ("kafkernel_transactions", "Transactional ids by state (Ongoing: active "
             "transactions).")


class TxnMetrics:
    def __init__(self, runtime: CoordinatorRuntime[TxnShard], broker: PluginServices) -> None:
        self._registry = r = broker.metrics.registry
        self.commits = Counter("kafkernel_transaction_commits",
                               "Transactions a producer asked to commit.", registry=r)
        self.aborts = Counter("kafkernel_transaction_aborts",
                              "Transactions aborted (by their producer, a fencing "
                              "InitProducerId or their timeout).", registry=r)
        self.fenced_producers = Counter(
            "kafkernel_transaction_fenced_producers",
            "Producers fenced by a new instance while their transaction was ongoing.",
            registry=r)
        self._collector = _TxnCollector(runtime)
        r.register(self._collector)

    def close(self) -> None:
        for metric in (self.commits, self.aborts, self.fenced_producers, self._collector):
            self._registry.unregister(metric)


class _TxnCollector(Collector):
    def __init__(self, runtime: CoordinatorRuntime[TxnShard]) -> None:
        self._runtime = runtime

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily(*_BY_STATE, labels=["state"])]

    def collect(self) -> Iterator[Metric]:
        for _ in range(3):
            try:
                counts = dict.fromkeys((s.state_name for s in TxnState), 0)
                for shard in list(self._runtime.loaded_shards().values()):
                    for txn in list(shard.transactions()):
                        counts[txn.state.state_name] += 1
            except RuntimeError:  # a dict changed size under us
                continue
            family = GaugeMetricFamily(*_BY_STATE, labels=["state"])
            for state, count in counts.items():
                family.add_metric([state], count)
            yield family
            return
