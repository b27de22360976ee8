"""Log compaction against Apache Kafka: the same compacted workload, written the same way
to both brokers, cleaned by each broker's own cleaner, leaves the same records at the
same offsets on both (what a consumer from offset 0 reads, read_uncommitted and
read_committed).

No model of the result is assumed: a log counts as cleaned once no key appears twice
before its active segment (every workload writes each key more than once there, so that
takes a clean), and the two cleaned logs are then compared. Which records survive
(the latest of each key, tombstones within delete.retention.ms, no aborted records) is
whatever Kafka's cleaner leaves. Both brokers run the workload at once; Kafka is the
session's transactional reference (tests/conftest.py: its cleaner looks for work every
100 ms, as Kafkernel's here).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.reference.conformance import unique

CLEANER = {"log.cleaner.backoff.ms": 100}
SEGMENT_MS = 400
CLEAN_TIMEOUT_S = 60.0

Entry = tuple[int, bytes | None, bytes | None]  # offset, key, value
Workload = Callable[[str, str], dict[str, list[Entry]]]


def create_compacted(bootstrap: str, topic: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.01", **config})])[topic].result(30)


def produce(producer: Producer, topic: str, records: list[tuple[bytes, bytes | None]],
            *, flush: bool = True) -> list[int]:
    """The records' offsets, in order; a flush every few records makes small batches."""
    offsets: list[int] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset() or 0)

    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
        if flush and i % 5 == 4:
            producer.flush(10)
    assert producer.flush(30) == 0
    assert not errors, errors
    return offsets


def updates(keys: range, rounds: int, tag: str,
            deleted: frozenset[int] = frozenset()) -> list[tuple[bytes, bytes | None]]:
    """``rounds`` updates of each key; the ``deleted`` keys' last update a tombstone."""
    return [(b"key-%d" % k, None if k in deleted and r == rounds - 1
             else b"%s-%d-%d" % (tag.encode(), k, r))
            for r in range(rounds) for k in keys]


def roll(producer: Producer, topic: str, n: int) -> int:
    """Past segment.ms one more record rolls the log, so everything before it can be
    cleaned; its key is new, so it supersedes nothing. Its offset."""
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    (offset,) = produce(producer, topic, [(b"roll-%d" % n, b"r")])
    return offset


def read_all(bootstrap: str, topic: str, isolation: str) -> list[Entry]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("read"),
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        out: list[Entry] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    return out
                if error is not None:
                    raise KafkaException(error)
                out.append((msg.offset() or 0, msg.key(), msg.value()))
        raise AssertionError(f"{topic}: not read to its end within 20 s")
    finally:
        consumer.close()


def wait_cleaned(bootstrap: str, topic: str, active_from: int) -> list[Entry]:
    """The log once no key occurs twice below ``active_from`` (read_uncommitted)."""
    deadline = time.monotonic() + CLEAN_TIMEOUT_S
    while True:
        entries = read_all(bootstrap, topic, "read_uncommitted")
        keys = [key for offset, key, _ in entries if offset < active_from]
        if len(keys) == len(set(keys)):
            return entries
        assert time.monotonic() < deadline, f"{bootstrap}: {topic} not cleaned: {entries}"
        time.sleep(0.2)


def both(kafka: ReferenceKafka, kafkernel: EmbeddedBroker,
         workload: Workload) -> dict[str, dict[str, list[Entry]]]:
    """The workload on both brokers at once, on a topic of the same name."""
    topic = unique("compacted")
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(workload, bootstrap, topic)
                   for name, bootstrap in (("kafka", kafka.bootstrap),
                                           ("kafkernel", kafkernel.bootstrap))}
        return {name: future.result() for name, future in futures.items()}


def assert_same(results: dict[str, dict[str, list[Entry]]]) -> None:
    kafka, kafkernel = results["kafka"], results["kafkernel"]
    for view in kafka:
        assert kafkernel[view] == kafka[view], view


# -- the workloads ------------------------------------------------------------------------

def updates_and_tombstones(bootstrap: str, topic: str) -> dict[str, list[Entry]]:
    """Two segments of updates to eight keys, two of them deleted; tombstones kept
    (delete.retention.ms one hour)."""
    create_compacted(bootstrap, topic, **{"delete.retention.ms": "3600000"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    produce(producer, topic, updates(range(8), 10, "first"))
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    produce(producer, topic, updates(range(8), 10, "second", deleted=frozenset({1, 5})))
    active_from = roll(producer, topic, 0)
    return {"cleaned": wait_cleaned(bootstrap, topic, active_from)}


def tombstones_past_delete_retention(bootstrap: str, topic: str) -> dict[str, list[Entry]]:
    """A clean that keeps the tombstones, then delete.retention.ms, an update and a
    clean that may drop them."""
    retention_ms = 2000
    create_compacted(bootstrap, topic, **{"delete.retention.ms": str(retention_ms)})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    produce(producer, topic, updates(range(4), 10, "v", deleted=frozenset({0, 2})))
    first = wait_cleaned(bootstrap, topic, roll(producer, topic, 0))
    time.sleep(retention_ms / 1000 + 0.5)
    produce(producer, topic, [(b"key-3", b"again")])
    second = wait_cleaned(bootstrap, topic, roll(producer, topic, 1))
    return {"first clean": first, "second clean": second}


def aborted_transaction(bootstrap: str, topic: str) -> dict[str, list[Entry]]:
    """Committed updates, an aborted transaction over some of the same keys, and more
    committed updates: the aborted records, and the markers, are the cleaner's to
    remove."""
    create_compacted(bootstrap, topic, **{"delete.retention.ms": "3600000"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "transactional.id": unique("compacting")})
    producer.init_transactions(30)

    def transaction(records: list[tuple[bytes, bytes | None]], *, commit: bool) -> None:
        producer.begin_transaction()
        produce(producer, topic, records, flush=False)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    transaction(updates(range(6), 3, "committed"), commit=True)
    transaction(updates(range(3), 2, "aborted"), commit=False)
    transaction(updates(range(3, 6), 2, "later"), commit=True)
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    producer.begin_transaction()
    produce(producer, topic, [(b"roll-0", b"r")], flush=False)
    producer.commit_transaction(30)
    # the roll record's offset: the last record before its commit marker
    entries = read_all(bootstrap, topic, "read_uncommitted")
    active_from = max(offset for offset, key, _ in entries if key == b"roll-0")
    return {"read_uncommitted": wait_cleaned(bootstrap, topic, active_from),
            "read_committed": read_all(bootstrap, topic, "read_committed")}


# -- the tests ----------------------------------------------------------------------------

def test_the_latest_value_of_each_key_and_tombstones_survive_as_on_kafka(
    transactional_kafka: ReferenceKafka, broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    results = both(transactional_kafka, broker_factory(CLEANER), updates_and_tombstones)
    assert_same(results)
    cleaned: Any = results["kafka"]["cleaned"]
    # a real clean happened: 160 updates of 8 keys became one record per key and the roll
    assert len(cleaned) == 9 and sum(value is None for _, _, value in cleaned) == 2


def test_tombstones_go_after_delete_retention_as_on_kafka(
    transactional_kafka: ReferenceKafka, broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    results = both(transactional_kafka, broker_factory(CLEANER),
                   tombstones_past_delete_retention)
    assert_same(results)
    first, second = results["kafka"]["first clean"], results["kafka"]["second clean"]
    assert sum(value is None for _, _, value in first) == 2
    assert sum(value is None for _, _, value in second) == 0


def test_aborted_transactional_records_are_removed_as_on_kafka(
    transactional_kafka: ReferenceKafka, broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    results = both(transactional_kafka, broker_factory(CLEANER), aborted_transaction)
    assert_same(results)
    survivors = results["kafka"]["read_uncommitted"]
    assert not any(value is not None and value.startswith(b"aborted")
                   for _, _, value in survivors)
