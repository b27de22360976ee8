"""What a run measures and with which client settings; identical for every broker.

Everything here is recorded in the JSON result, so a figure can be reproduced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Client = Literal["confluent", "kcat", "java"]
Kind = Literal["produce", "consume"]

# librdkafka's mock keeps at most 5 MiB (and 100,000 batches) per partition and drops
# the oldest batches beyond that; a log read from the beginning must stay below it.
MOCK_RETAINED_BYTES = 5 * 1024 * 1024
CONSUME_LOG_BUDGET = 4 * 1024 * 1024
# Bytes a record adds to its value inside a v2 batch (length, attributes, deltas, key
# length, value length, header count), rounded up; batch headers are in the margin.
RECORD_OVERHEAD = 16


@dataclass(frozen=True)
class Scale:
    """How much work: full for figures worth quoting, quick for checking the harness.

    Each throughput workload runs ``repeats`` times; the median run is reported.
    """

    records_by_size: tuple[tuple[int, int], ...]
    latency_seconds: float
    latency_warmup_seconds: float
    run_timeout_s: float
    repeats: int

    def records(self, record_size: int) -> int:
        return dict(self.records_by_size)[record_size]


FULL = Scale(records_by_size=((100, 1_000_000), (1024, 200_000)),
             latency_seconds=10.0, latency_warmup_seconds=1.0, run_timeout_s=180.0,
             repeats=5)
QUICK = Scale(records_by_size=((100, 100_000), (1024, 20_000)),
              latency_seconds=3.0, latency_warmup_seconds=0.5, run_timeout_s=60.0,
              repeats=1)

RECORD_SIZES = (100, 1024)
ACKS = ("1", "all")
# java: Kafka's own perf tools, ProducerPerformance and ConsumerPerformance.
CLIENTS: tuple[Client, ...] = ("confluent", "kcat", "java")
# The many-partition workload: 100 B records from confluent-kafka, sent round-robin
# over this many partitions of one topic (so every produce request carries a batch for
# many partitions), produced with acks=1 and read back whole.
MANY_PARTITIONS = 1000
MANY_PARTITIONS_RECORD_SIZE = 100
# Compressed produce workloads (confluent-kafka, 1 KB records, acks=1): the broker
# inflates and walks every compressed batch, which uncompressed workloads never pay.
COMPRESSED_PRODUCE = ("zstd", "lz4")
COMPRESSED_RECORD_SIZE = 1024
# Idempotent produce workloads (issue 14): 100 B records, acks=all (idempotence needs it),
# with the producer's enable.idempotence on: InitProducerId, then a sequence per batch
# that the leader checks against the producer's last batches.
IDEMPOTENT_PRODUCE_CLIENTS: tuple[Client, ...] = ("confluent", "java")
IDEMPOTENT_RECORD_SIZE = 100
# Transactional produce workloads (issue 14): the idempotent workload's records, each
# TRANSACTION_RECORDS of them one transaction (begin, produce, commit): per transaction
# AddPartitionsToTxn, EndTxn and a commit marker in the log. confluent-kafka alone: the
# Java ProducerPerformance ends transactions by age (--transaction-duration-ms), not
# by a number of records.
TRANSACTIONAL_PRODUCE_CLIENTS: tuple[Client, ...] = ("confluent",)
TRANSACTION_RECORDS = 1000


@dataclass(frozen=True)
class ClientSettings:
    """librdkafka properties given to every client (confluent-kafka and kcat alike).

    Values are librdkafka's defaults unless a comment says otherwise, written out so
    that kcat's older librdkafka and the wheel's newer one agree and the JSON says what
    was used. Idempotence is off (librdkafka's default) so acks=1 and acks=all differ
    only in acks.
    """

    linger_ms: int = 5
    batch_size: int = 1_000_000
    batch_num_messages: int = 10_000
    compression_type: str = "none"
    enable_idempotence: bool = False
    message_timeout_ms: int = 60_000
    fetch_wait_max_ms: int = 500
    fetch_min_bytes: int = 1
    max_partition_fetch_bytes: int = 1_048_576
    # Not the default (1000): librdkafka >= 2.1 stops fetching a partition for this long
    # once its prefetch queue is full, which a Python consumer of many partitions hits
    # on any broker; at 1000 ms a 1M-record read measured mostly that pause.
    fetch_queue_backoff_ms: int = 10
    # Not the default (100,000): librdkafka stops fetching a partition once its consumer
    # holds this many prefetched records (kcat's 2.0 for about a second, until its
    # broker thread wakes). With the default both brokers were slower, the mock most
    # (kcat 100 B: 129 against 245 MB/s), so the reference runs at its best.
    queued_min_messages: int = 1_000_000
    # The latency run measures the broker, so the producer sends almost at once.
    latency_linger_ms: int = 1
    latency_acks: str = "all"
    latency_record_size: int = 1024
    latency_target_bytes_per_s: int = 10_000_000
    # The latency run is made once per fetch.wait.max.ms: librdkafka's mock answers a
    # fetch with nothing to return only when this wait is over, even if records arrive
    # meanwhile, so at the client default (500) its latency is that wait, not its speed;
    # at 1 ms both brokers answer at once. A broker with a fetch purgatory answers on
    # append either way.
    latency_fetch_wait_ms: tuple[int, ...] = (1, 500)

    def producer_properties(self, acks: str, linger_ms: int | None = None,
                            compression: str | None = None,
                            idempotent: bool | None = None) -> dict[str, str]:
        idempotence = self.enable_idempotence if idempotent is None else idempotent
        return {
            "acks": acks,
            "linger.ms": str(self.linger_ms if linger_ms is None else linger_ms),
            "batch.size": str(self.batch_size),
            "batch.num.messages": str(self.batch_num_messages),
            "compression.type": compression or self.compression_type,
            "enable.idempotence": str(idempotence).lower(),
            "message.timeout.ms": str(self.message_timeout_ms),
        }

    def java_producer_properties(self, acks: str,
                                 idempotent: bool | None = None) -> dict[str, str]:
        """The same settings for Kafka's Java producer, in its names. It has no
        batch.num.messages; delivery.timeout.ms stands for message.timeout.ms."""
        idempotence = self.enable_idempotence if idempotent is None else idempotent
        return {
            "acks": acks,
            "linger.ms": str(self.linger_ms),
            "batch.size": str(self.batch_size),
            "compression.type": self.compression_type,
            "enable.idempotence": str(idempotence).lower(),
            "delivery.timeout.ms": str(self.message_timeout_ms),
        }

    def java_consumer_properties(self) -> dict[str, str]:
        """The same settings for Kafka's Java consumer (fetch.max.wait.ms is its name
        for fetch.wait.max.ms); the rest are its defaults (max.poll.records=500,
        fetch.max.bytes=52428800)."""
        return {
            "fetch.max.wait.ms": str(self.fetch_wait_max_ms),
            "fetch.min.bytes": str(self.fetch_min_bytes),
            "max.partition.fetch.bytes": str(self.max_partition_fetch_bytes),
        }

    def consumer_properties(self, fetch_wait_max_ms: int | None = None, *,
                            client: Client = "confluent") -> dict[str, str]:
        wait = self.fetch_wait_max_ms if fetch_wait_max_ms is None else fetch_wait_max_ms
        found = {
            "fetch.wait.max.ms": str(wait),
            "fetch.min.bytes": str(self.fetch_min_bytes),
            "max.partition.fetch.bytes": str(self.max_partition_fetch_bytes),
            "queued.min.messages": str(self.queued_min_messages),
        }
        if client == "confluent":  # kcat's librdkafka 2.0 predates the property
            found["fetch.queue.backoff.ms"] = str(self.fetch_queue_backoff_ms)
        return found


@dataclass(frozen=True)
class Workload:
    """One throughput measurement, run the same way against each broker.

    A consume workload reads one log from the beginning, ``records`` records spread
    evenly over ``partitions`` partitions: as many as it takes to keep each partition
    under the mock's 5 MiB, so that the mock still holds every record (see
    ``consume_partitions``).
    """

    kind: Kind
    client: Client
    record_size: int
    records: int
    acks: str | None = None
    partitions: int = 1
    compression: str = "none"  # the producer's compression.type
    # Records go round-robin over all partitions of a topic of its own (the
    # many-partition workload); otherwise the client's partitioner chooses.
    spread: bool = False
    # The producer's enable.idempotence, on for this workload alone.
    idempotent: bool = False
    # Records per transaction of a transactional producer; 0: no transactions.
    transaction_records: int = 0

    @property
    def _idem(self) -> str:
        if self.transaction_records:
            return f"-txn{self.transaction_records}"
        return "-idempotent" if self.idempotent else ""

    @property
    def _codec(self) -> str:
        return "" if self.compression == "none" else f"-{self.compression}"

    @property
    def _spread(self) -> str:
        return f"-p{self.partitions}" if self.spread else ""

    @property
    def topic(self) -> str:
        if self.kind == "consume":
            return consume_topic(self.record_size, self.partitions if self.spread else None)
        return (f"bench-produce-{self.client}-{self.record_size}b-acks{self.acks}"
                f"{self._codec}{self._spread}{self._idem}")

    @property
    def label(self) -> str:
        size = "1 KB" if self.record_size == 1024 else f"{self.record_size} B"
        acks = f" acks={self.acks}" if self.acks else ""
        codec = "" if self.compression == "none" else f" {self.compression}"
        spread = f" x{self.partitions} parts" if self.spread else ""
        idem = " idempotent" if self.idempotent else ""
        if self.transaction_records:
            idem = f" transactional ({self.transaction_records}/txn)"
        return f"{self.kind} {self.client} {size}{acks}{codec}{spread}{idem}"

    @property
    def key(self) -> str:
        acks = f"-acks{self.acks}" if self.acks else ""
        return (f"{self.kind}-{self.client}-{self.record_size}b{acks}{self._codec}"
                f"{self._spread}{self._idem}")


def consume_topic(record_size: int, spread_over: int | None = None) -> str:
    return f"bench-consume-{record_size}b" + (f"-p{spread_over}" if spread_over else "")


def consume_partitions(records: int, record_size: int, at_least: int) -> int:
    """Partitions for a log of ``records`` that the mock keeps whole (<= 4 MiB each)."""
    per_partition = CONSUME_LOG_BUDGET // (record_size + RECORD_OVERHEAD)
    return max(at_least, math.ceil(records / per_partition))


def workloads(scale: Scale, partitions: int) -> list[Workload]:
    found: list[Workload] = []
    for client in CLIENTS:
        for size in RECORD_SIZES:
            for acks in ACKS:
                found.append(Workload("produce", client, size, scale.records(size), acks,
                                      partitions))
    for codec in COMPRESSED_PRODUCE:
        found.append(Workload("produce", "confluent", COMPRESSED_RECORD_SIZE,
                              scale.records(COMPRESSED_RECORD_SIZE), "1", partitions,
                              compression=codec))
    for client in IDEMPOTENT_PRODUCE_CLIENTS:
        found.append(Workload("produce", client, IDEMPOTENT_RECORD_SIZE,
                              scale.records(IDEMPOTENT_RECORD_SIZE), "all", partitions,
                              idempotent=True))
    for client in TRANSACTIONAL_PRODUCE_CLIENTS:
        found.append(Workload("produce", client, IDEMPOTENT_RECORD_SIZE,
                              scale.records(IDEMPOTENT_RECORD_SIZE), "all", partitions,
                              idempotent=True, transaction_records=TRANSACTION_RECORDS))
    for client in CLIENTS:
        for size in RECORD_SIZES:
            n = scale.records(size)
            found.append(Workload("consume", client, size, n,
                                  partitions=consume_partitions(n, size, partitions)))
    n = scale.records(MANY_PARTITIONS_RECORD_SIZE)
    found.append(Workload("produce", "confluent", MANY_PARTITIONS_RECORD_SIZE, n, "1",
                          MANY_PARTITIONS, spread=True))
    found.append(Workload("consume", "confluent", MANY_PARTITIONS_RECORD_SIZE, n,
                          partitions=MANY_PARTITIONS, spread=True))
    return found
