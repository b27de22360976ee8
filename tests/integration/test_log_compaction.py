"""Log compaction on a running broker, seen by confluent-kafka clients: a compacted
topic keeps the latest value of each key at its original offset, tombstones go after
delete.retention.ms, __consumer_offsets and __transaction_state stay bounded under a
long load of commits and of transactions, and the cleaner's metrics. Timings are
shortened through topic configs (segment.bytes, segment.ms, min.cleanable.dirty.ratio,
delete.retention.ms) and log.cleaner.backoff.ms; with log.cleaner.enable=false each of
these tests fails."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.groups import wait_for
from tests.integration.test_observability_and_embedding import sample, scrape
from tests.integration.wire import request

CLEANER = {"log.cleaner.backoff.ms": 50, "metrics.port": 0}
CLEAN_TIMEOUT_S = 30.0
SEGMENT_MS = 300

Entry = tuple[int, bytes | None, bytes | None]  # offset, key, value


def create_compacted(bootstrap: str, name: str, **config: str) -> None:
    topic_config = {"cleanup.policy": "compact", "internal.segment.bytes": "1024",
                    "segment.ms": str(SEGMENT_MS), "min.cleanable.dirty.ratio": "0.01",
                    **config}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=topic_config)])[name].result(10)


def produce(bootstrap: str, topic: str,
            records: list[tuple[bytes, bytes | None]]) -> dict[bytes, Entry]:
    """One flush per few records, so the log holds many small batches; returns key ->
    its last (offset, key, value) as acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    latest: dict[bytes, Entry] = {}
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
            return
        key = msg.key()
        assert isinstance(key, bytes)
        offset = msg.offset()
        assert offset is not None
        if key not in latest or latest[key][0] < offset:
            latest[key] = (offset, key, msg.value())

    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
        if i % 5 == 4:
            producer.flush(10)
    assert producer.flush(10) == 0
    assert not errors, errors
    return latest


def roll(bootstrap: str, topic: str, latest: dict[bytes, Entry]) -> None:
    """Past segment.ms, one more record rolls the segment: everything before it can be
    cleaned (the active segment never is). Its key is new: nothing in the active
    segment may supersede a record the test expects gone."""
    time.sleep(SEGMENT_MS / 1000 + 0.1)
    latest.update(produce(bootstrap, topic, [(b"roll-%d" % len(latest), b"r")]))


def read_from(bootstrap: str, topic: str, offset: int) -> list[Entry]:
    """Every record from ``offset`` to the end, as a consumer assigned there sees it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                         "enable.auto.commit": False})
    try:
        _, end = consumer.get_watermark_offsets(KafkaTopicPartition(topic, 0), 10)
        consumer.assign([KafkaTopicPartition(topic, 0, offset)])
        out: list[Entry] = []
        deadline = time.monotonic() + 10
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                position = msg.offset()
                assert position is not None
                out.append((position, msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def updates(keys: int, rounds: int, deleted: set[int]) -> list[tuple[bytes, bytes | None]]:
    """``rounds`` updates of each key, the ``deleted`` ones ending with a tombstone."""
    records: list[tuple[bytes, bytes | None]] = []
    for r in range(rounds):
        for k in range(keys):
            value = None if k in deleted and r == rounds - 1 else b"value-%d-%d" % (k, r)
            records.append((b"key-%d" % k, value))
    return records


def test_a_compacted_topic_keeps_the_latest_value_of_each_key_at_its_offset(
    broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    broker = broker_factory(CLEANER)
    bootstrap = broker.bootstrap
    create_compacted(bootstrap, "table", **{"delete.retention.ms": "3600000"})
    latest = produce(bootstrap, "table", updates(8, 40, deleted={1, 5}))
    roll(bootstrap, "table", latest)
    expected = sorted(latest.values())
    assert len(expected) == 9 and sum(v is None for _, _, v in expected) == 2
    # the latest record of each key, tombstones still within delete.retention.ms
    wait_for(lambda: read_from(bootstrap, "table", 0) == expected, CLEAN_TIMEOUT_S,
             "the cleaner to leave the latest record of each key")
    kept = [offset for offset, _, _ in expected]
    removed = next(o for o in range(kept[-1]) if o not in kept and o + 1 not in kept)
    # a consumer positioned inside a removed range continues at the next offset kept
    assert read_from(bootstrap, "table", removed)[0][0] == min(o for o in kept if o > removed)

    assert broker.broker is not None and broker.broker.metrics_port
    metrics = scrape(broker.broker.metrics_port)
    assert (sample(metrics, "kafkernel_log_cleaner_runs_total") or 0) >= 1
    recopied = sample(metrics, "kafkernel_log_cleaner_bytes_read_total", phase="recopy") or 0
    written = sample(metrics, "kafkernel_log_cleaner_bytes_written_total") or 0
    assert 0 < written < recopied
    assert (sample(metrics, "kafkernel_log_cleaner_bytes_read_total", phase="map") or 0) > 0
    assert sample(metrics, "kafkernel_log_cleaner_dirty_ratio", topic="table",
                  partition="0") is not None
    assert 0 < (sample(metrics, "kafkernel_log_cleaner_recopy_percent") or 0) <= 100
    for age in ("time_since_last_clean_seconds", "time_since_last_run_seconds"):
        seconds = sample(metrics, f"kafkernel_log_cleaner_{age}")
        assert seconds is not None and 0 <= seconds < CLEAN_TIMEOUT_S, age
    assert sample(metrics, "kafkernel_log_cleaner_max_dirty_percent") is not None


def test_tombstones_disappear_after_delete_retention_ms(
    broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    retention_ms = 2000
    broker = broker_factory(CLEANER)
    bootstrap = broker.bootstrap
    create_compacted(bootstrap, "deletes", **{"delete.retention.ms": str(retention_ms)})
    latest = produce(bootstrap, "deletes", updates(4, 10, deleted={0, 2}))
    roll(bootstrap, "deletes", latest)
    # the first clean keeps the tombstones, stamping their horizon (KIP-534)
    wait_for(lambda: read_from(bootstrap, "deletes", 0) == sorted(latest.values()),
             CLEAN_TIMEOUT_S, "the first clean")
    time.sleep(retention_ms / 1000)
    # a clean needs dirty data: an update, as a live table has
    latest.update(produce(bootstrap, "deletes", [(b"key-3", b"again")]))
    roll(bootstrap, "deletes", latest)
    live = sorted(e for e in latest.values() if e[2] is not None)
    assert [k for _, k, _ in live] == [b"key-1", b"roll-4", b"key-3", b"roll-5"]
    wait_for(lambda: read_from(bootstrap, "deletes", 0) == live, CLEAN_TIMEOUT_S,
             "the tombstones to be removed")


def internal_topic_broker(broker_factory: Callable[..., EmbeddedBroker], plugin: str,
                          settings: dict[str, int], topic: str,
                          partitions: int) -> tuple[EmbeddedBroker, Callable[[], float]]:
    """A broker whose ``plugin`` keeps its internal topic in small segments, a topic of
    ``partitions`` to load it through, and the internal partition 0's size on disk."""
    broker = broker_factory(CLEANER, plugin_settings={plugin: settings})
    assert broker.broker is not None and broker.broker.metrics_port
    port = broker.broker.metrics_port
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    internal = "__consumer_offsets" if plugin == "coordinator" else "__transaction_state"

    def size() -> float:
        got = sample(scrape(port), "kafkernel_log_size_bytes", topic=internal, partition="0")
        assert got is not None
        return got

    return broker, size


def test_consumer_offsets_stays_bounded_under_a_long_commit_load(
    broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    segment_bytes = 4096
    broker, offsets_size = internal_topic_broker(
        broker_factory, "coordinator", {"offsets.topic.num.partitions": 1,
                                        "offsets.topic.segment.bytes": segment_bytes},
        "work", 3)

    def commit_load(bootstrap: str, first: int, commits: int) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "busy",
                             "enable.auto.commit": False})
        try:
            for i in range(first, first + commits):
                consumer.commit(offsets=[KafkaTopicPartition("work", p, i) for p in range(3)],
                                asynchronous=False)
        finally:
            consumer.close()

    commit_load(broker.bootstrap, 0, 1500)
    # ~1500 records of 3 offsets each were written: far more than a few segments
    bound = 8 * segment_bytes
    wait_for(lambda: offsets_size() < bound, CLEAN_TIMEOUT_S,
             "__consumer_offsets to be cleaned")
    commit_load(broker.bootstrap, 1500, 1500)
    wait_for(lambda: offsets_size() < bound, CLEAN_TIMEOUT_S,
             "__consumer_offsets to stay bounded")
    # what the cleaner kept is the latest commit of each partition
    broker.restart()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "busy"})
    try:
        committed = wait_for(lambda: _committed(consumer), CLEAN_TIMEOUT_S,
                             "the group's offsets after a restart")
    finally:
        consumer.close()
    assert committed == [2999, 2999, 2999]


def test_transaction_state_stays_bounded_under_a_long_transactional_load(
    broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    segment_bytes = 4096
    broker, state_size = internal_topic_broker(
        broker_factory, "txn", {"transaction.state.log.num.partitions": 1,
                                "transaction.state.log.segment.bytes": segment_bytes},
        "ledger", 1)

    def transactions(count: int) -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                             "transactional.id": "long-running"})
        producer.init_transactions(30)
        for i in range(count):
            producer.begin_transaction()
            producer.produce("ledger", key=b"k", value=b"%d" % i)
            producer.commit_transaction(30)

    # each transaction writes its state three times (Ongoing, PrepareCommit, CompleteCommit)
    transactions(300)
    bound = 8 * segment_bytes
    wait_for(lambda: state_size() < bound, CLEAN_TIMEOUT_S,
             "__transaction_state to be cleaned")
    transactions(300)
    wait_for(lambda: state_size() < bound, CLEAN_TIMEOUT_S,
             "__transaction_state to stay bounded")
    # what the cleaner kept is the id's latest state: after a restart the coordinator
    # loads it and bumps the same producer id's epoch
    first = _init_producer_id(broker.bootstrap)
    broker.restart()
    second = wait_for(lambda: _init_producer_id(broker.bootstrap, retriable=True),
                      CLEAN_TIMEOUT_S, "InitProducerId after a restart")
    assert second == (first[0], first[1] + 1)


def _init_producer_id(bootstrap: str, *, retriable: bool = False) -> tuple[int, int] | None:
    answer = request(bootstrap, InitProducerIdRequest(
        transactional_id="long-running", transaction_timeout=datetime.timedelta(minutes=1),
        producer_id=-1, producer_epoch=-1))
    if retriable and answer.error_code in (ErrorCode.coordinator_load_in_progress,
                                           ErrorCode.concurrent_transactions):
        return None
    assert answer.error_code == ErrorCode.none, answer
    return int(answer.producer_id), int(answer.producer_epoch)


def _committed(consumer: Consumer) -> list[int] | None:
    try:
        got = consumer.committed([KafkaTopicPartition("work", p) for p in range(3)], 5)
    except KafkaException:
        return None  # the coordinator is loading
    return [tp.offset for tp in got]


def test_a_keyless_record_on_a_compacted_topic_is_refused(
    broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    broker = broker_factory()
    create_compacted(broker.bootstrap, "keys-only")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    results: list[Any] = []
    producer.produce("keys-only", value=b"no key",
                     on_delivery=lambda err, _msg: results.append(err))
    producer.flush(10)
    assert [e.code() if e is not None else None for e in results] == [
        KafkaError.INVALID_RECORD]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "keys-only"})
    try:  # and nothing was appended
        assert consumer.get_watermark_offsets(KafkaTopicPartition("keys-only", 0), 10) == (0, 0)
    finally:
        consumer.close()
