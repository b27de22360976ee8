"""The records the Spark tests produce with confluent-kafka, and what Spark must read
back of them: rows in the shape of Spark's Kafka source."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BASE_TS_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@dataclass(frozen=True)
class Sent:
    """One record as produced, with the partition and offset the broker gave it."""

    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...]

    def row(self, topic: str) -> tuple[Any, ...]:
        """The record as a row of Spark's Kafka source (includeHeaders=true)."""
        return (self.key, self.value, topic, self.partition, self.offset,
                datetime.datetime.fromtimestamp(self.timestamp_ms / 1000, datetime.UTC)
                .replace(tzinfo=None), 0, self.headers)


def create_topic(bootstrap: str, topic: str, partitions: int,
                 conf: dict[str, Any] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **(conf or {})})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)


def produce(bootstrap: str, topic: str, n: int, partitions: int, *, first: int = 0,
            conf: dict[str, Any] | None = None) -> list[Sent]:
    """``n`` records over ``partitions``, round robin, each with a key, two headers (one
    null) and its own create time; records whose index is a multiple of 7 have no key."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(conf or {})})
    sent: list[Sent] = []

    def delivered(headers: tuple[tuple[str, bytes | None], ...]) -> Any:
        # A delivery report carries no headers: keep the ones sent.
        def report(err: Any, msg: Any) -> None:
            assert err is None, err
            sent.append(Sent(msg.key(), msg.value(), msg.partition(), msg.offset(),
                             msg.timestamp()[1], headers))
        return report

    for i in range(first, first + n):
        headers = (("index", str(i).encode()), ("empty", None))
        producer.produce(
            topic, value=f"value-{i}".encode(),
            key=None if i % 7 == 0 else f"key-{i}".encode(),
            partition=i % partitions, timestamp=BASE_TS_MS + i * 1000,
            headers=list(headers), on_delivery=delivered(headers))
    assert producer.flush(30) == 0
    assert len(sent) == n
    return sent


def rows(df: Any) -> list[tuple[Any, ...]]:
    """A DataFrame of Spark's Kafka schema as sorted plain tuples (binary as bytes)."""
    def plain(v: Any) -> Any:
        return bytes(v) if isinstance(v, bytearray) else v

    out = []
    for r in df.collect():
        headers = tuple((h["key"], plain(h["value"])) for h in r["headers"] or ())
        out.append((plain(r["key"]), plain(r["value"]), r["topic"], r["partition"],
                    r["offset"], r["timestamp"], r["timestampType"], headers))
    return sorted(out, key=lambda t: (t[2], t[3], t[4]))


def expected(topic: str, sent: list[Sent]) -> list[tuple[Any, ...]]:
    return sorted((s.row(topic) for s in sent), key=lambda t: (t[2], t[3], t[4]))


def consume_all(bootstrap: str, topic: str, n: int, timeout: float = 30.0,
                conf: dict[str, Any] | None = None) -> list[Any]:
    """``n`` messages of every partition of ``topic`` from the start (no group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, **(conf or {})})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    got: list[Any] = []

    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got
