"""Load for the cluster tests and scripts: an acks=all idempotent confluent-kafka
producer in a thread of its own that numbers its records and counts what the brokers
acknowledged (delivery reports), and a read of the whole topic that says which
acknowledged records were lost and which records came twice. Pytest-free, like the
harness."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

# A record in flight across a failover is retried, not failed: the delivery timeout
# outlasts a ZooKeeper session timeout, a controller election and a leader election.
PRODUCER_SETTINGS: dict[str, str | int | bool] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "message.timeout.ms": 120_000,
    "request.timeout.ms": 10_000,
    # A paused broker keeps its connections open: librdkafka gives up on a request
    # there (metadata included) only after socket.timeout.ms, 60 s by default, which
    # would stall the producer past every window these tests allow for a failover.
    "socket.timeout.ms": 10_000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 500,
    "topic.metadata.refresh.interval.ms": 1_000,
    "reconnect.backoff.max.ms": 500,
}


@dataclass
class Acks:
    """What the producer's delivery reports said, with when (time.monotonic)."""

    acked: list[tuple[float, bytes]] = field(default_factory=list)
    failed: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def values(self) -> list[bytes]:
        with self.lock:
            return [v for _, v in self.acked]

    def first_after(self, moment: float) -> float | None:
        """When the first record acknowledged after ``moment`` was acknowledged."""
        with self.lock:
            for t, _ in self.acked:
                if t > moment:
                    return t
        return None


class LoadProducer:
    """Produces numbered records (``<prefix>-<n>``) at about ``rate`` per second until
    ``stop``; at most ``max_records``, so that a forgotten producer ends by itself."""

    def __init__(self, bootstrap: str, topic: str, *, partitions: int = 1,
                 rate: float = 200.0, max_records: int = 1_000_000, prefix: str = "r",
                 settings: Mapping[str, str | int | bool] | None = None) -> None:
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.max_records = max_records
        self.prefix = prefix
        self.acks = Acks()
        self.sent = 0
        self.sent_at: list[float] = []  # when record n was handed to the producer
        self.unflushed = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._producer: Producer | None = Producer(
            {"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS, **(settings or {})})
        self._thread = threading.Thread(target=self._run, name=f"load-{topic}", daemon=True)

    def start(self) -> LoadProducer:
        self._thread.start()
        return self

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        now = time.monotonic()
        with self.acks.lock:
            if err is None:
                self.acks.acked.append((now, msg.value()))
            else:
                self.acks.failed[err.name()] += 1

    def _run(self) -> None:
        producer = self._producer
        assert producer is not None
        began = time.monotonic()
        try:
            while not self._stop.is_set() and self.sent < self.max_records:
                wait = began + self.sent / self.rate - time.monotonic()
                if wait > 0:
                    producer.poll(min(0.05, wait))  # a negative timeout waits for ever
                    continue
                value = f"{self.prefix}-{self.sent}".encode()
                try:
                    producer.produce(self.topic, value, partition=self.sent % self.partitions,
                                     on_delivery=self._on_delivery)
                except BufferError:
                    producer.poll(0.05)
                    continue
                self.sent_at.append(time.monotonic())
                self.sent += 1
                producer.poll(0)
        except BaseException as e:  # handed to the caller by stop()
            self.error = e

    def first_ack_of_sent_after(self, moment: float) -> float | None:
        """When the first record handed to the producer after ``moment`` was
        acknowledged: after a kill, an acknowledgement no dead broker can have sent."""
        sent_at = self.sent_at
        with self.acks.lock:
            for t, value in self.acks.acked:
                n = int(value.rsplit(b"-", 1)[1])
                if n < len(sent_at) and sent_at[n] > moment:
                    return t
        return None

    def wait_acked(self, count: int, timeout: float) -> bool:
        """Until ``count`` records in all are acknowledged; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.acks.count() < count:
            if time.monotonic() > deadline or not self._thread.is_alive():
                return False
            time.sleep(0.05)
        return True

    def wait_more_acked(self, more: int, timeout: float) -> bool:
        return self.wait_acked(self.acks.count() + more, timeout)

    def stop(self, flush_timeout: float = 60.0) -> Acks:
        """Stop producing, wait up to ``flush_timeout`` for the records in flight; the
        ones still undelivered then are purged (``unflushed``)."""
        self._stop.set()
        self._thread.join(30)
        producer = self._producer
        if producer is not None:
            self.unflushed = producer.flush(flush_timeout)
            if self.unflushed:
                producer.purge()
                producer.flush(5)
            # Dropped here: a failed test's traceback keeps this object, and a live
            # librdkafka client would go on reconnecting to the stopped brokers.
            self._producer = None
        if self.error is not None:
            raise self.error
        return self.acks


@dataclass
class Verdict:
    acked: int
    consumed: int
    lost: list[bytes]
    duplicates: dict[bytes, int]
    unacked_present: int  # in the log though not acknowledged (failed or purged): allowed

    @property
    def ok(self) -> bool:
        return not self.lost and not self.duplicates

    def __str__(self) -> str:
        return (f"{self.acked} acknowledged, {self.consumed} consumed, {len(self.lost)} lost "
                f"(first {self.lost[:5]}), {len(self.duplicates)} duplicated (first "
                f"{list(self.duplicates.items())[:5]}), {self.unacked_present} present "
                "without an acknowledgement")


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0,
             ) -> list[bytes]:
    """Every record of the topic, from the log start to the high watermark each
    partition has when the read begins (asked again until a leader answers)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cluster-verify",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 100})
    deadline = time.monotonic() + timeout
    try:
        ends: dict[int, int] = {}
        for p in range(partitions):
            while p not in ends:
                try:
                    ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                             timeout=5)[1]
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        values: list[bytes] = []
        positions = dict.fromkeys(range(partitions), 0)
        while any(positions[p] < ends[p] for p in positions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {topic} up to {positions} of {ends} in {timeout} s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    positions[msg.partition()] = max(positions[msg.partition()], msg.offset())
                continue
            positions[msg.partition()] = msg.offset() + 1
            values.append(msg.value())
        return values
    finally:
        consumer.close()


def verify(acks: Acks, values: list[bytes]) -> Verdict:
    acked = acks.values()
    seen = Counter(values)
    lost = [v for v in acked if v not in seen]
    duplicates = {v: n for v, n in seen.items() if n > 1}
    acked_set = set(acked)
    return Verdict(len(acked), len(values), lost, duplicates,
                   sum(1 for v in seen if v not in acked_set))


__all__ = ["PRODUCER_SETTINGS", "Acks", "LoadProducer", "Verdict", "read_all", "verify"]
