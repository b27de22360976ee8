"""Transactions with real clients, each test run against Apache Kafka (which proves the
test) and against Kafkernel: confluent-kafka's transactional producer committing and
aborting across partitions of two topics with a consumer group's offsets,
read_committed and read_uncommitted consumers, fencing by a second producer with the
same transactional.id, a transaction the broker aborts at its timeout; and
kafka-python's transactional producer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka

PARTITIONS = 3
# Both brokers check for timed-out transactions often, so the timeout test is quick
# (tests/conftest.py's TRANSACTIONAL_KAFKA for Kafka).
KAFKERNEL_SETTINGS = {
    "txn": {"transaction.state.log.num.partitions": 3,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200},
    "coordinator": {"offsets.topic.num.partitions": 3,
                    "group.initial.rebalance.delay.ms": 0},
}


@pytest.fixture(params=["kafka", "kafkernel"])
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """The broker under test: the session's transactional Kafka or a fresh Kafkernel."""
    if request.param == "kafka":
        kafka: ReferenceKafka = request.getfixturevalue("transactional_kafka")
        yield kafka.bootstrap
    else:
        factory: Callable[..., EmbeddedBroker] = request.getfixturevalue("broker_factory")
        yield factory(plugin_settings=KAFKERNEL_SETTINGS).bootstrap


def create_topics(bootstrap: str, *names: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names],
                                  operation_timeout=30)
    for f in futures.values():
        f.result(30)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def transactional_producer(bootstrap: str, transactional_id: str,
                           **config: Any) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 5, **config})
    producer.init_transactions(30)
    return producer


def consume_all(bootstrap: str, topics: list[str], isolation: str, *,
                partitions: int = PARTITIONS, until: Callable[[list[Any]], bool] | None = None,
                seconds: float = 15) -> list[Any]:
    """Every record of ``topics`` from the start, read with ``isolation``: read until
    the end of each partition (the high watermark, or the last stable offset under
    read_committed) is reached, or until ``until`` holds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    consumer.subscribe(topics)
    records: list[Any] = []
    at_eof: set[tuple[str, int]] = set()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add((msg.topic(), msg.partition()))
                    if until is None and len(at_eof) == partitions * len(topics):
                        break
                    continue
                raise KafkaException(msg.error())
            at_eof.discard((msg.topic(), msg.partition()))
            records.append(msg)
            if until is not None and until(records):
                break
    finally:
        consumer.close()
    return records


def values(records: list[Any]) -> list[bytes]:
    return sorted(m.value() for m in records)


def test_commit_and_abort_across_partitions_of_two_topics_with_group_offsets(
        bootstrap: str) -> None:
    source, out_a, out_b = unique("tx-in"), unique("tx-a"), unique("tx-b")
    group = unique("tx-group")
    create_topics(bootstrap, source, out_a, out_b)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        plain.produce(source, value=b"in-%d" % i, partition=i % PARTITIONS)
    plain.flush(30)

    # The input is read by a member of ``group``; its positions go into the transaction.
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False,
                       "isolation.level": "read_committed"})
    reader.subscribe([source])
    producer = transactional_producer(bootstrap, unique("tx-id"))
    inputs: list[Any] = []
    deadline = time.monotonic() + 20
    while len(inputs) < 30 and time.monotonic() < deadline:
        msg = reader.poll(0.2)
        if msg is not None and not msg.error():
            inputs.append(msg)
    assert len(inputs) == 30
    producer.begin_transaction()
    for i, msg in enumerate(inputs):
        producer.produce(out_a if i % 2 else out_b, key=b"%d" % i,
                         value=b"committed-" + msg.value(), partition=i % PARTITIONS)
    positions = reader.position(reader.assignment())
    producer.send_offsets_to_transaction(positions, reader.consumer_group_metadata(), 30)
    producer.commit_transaction(30)

    producer.begin_transaction()
    for i in range(12):
        producer.produce(out_a if i % 2 else out_b, value=b"aborted-%d" % i,
                         partition=i % PARTITIONS)
    producer.flush(30)
    producer.abort_transaction(30)
    reader.close()

    committed = sorted(b"committed-in-%d" % i for i in range(30))
    aborted = sorted(b"aborted-%d" % i for i in range(12))
    assert values(consume_all(bootstrap, [out_a, out_b], "read_committed")) == committed
    # read_uncommitted sees both transactions' records, and no control record (a
    # client never hands a marker to the application).
    assert values(consume_all(bootstrap, [out_a, out_b], "read_uncommitted")) == sorted(
        committed + aborted)

    # The group's offsets were committed with the transaction.
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        stored = check.committed([TopicPartition(source, p) for p in range(PARTITIONS)], 30)
    finally:
        check.close()
    assert sum(tp.offset for tp in stored) == 30
    assert {(tp.partition, tp.offset) for tp in stored} == {
        (tp.partition, tp.offset) for tp in positions}


def test_an_open_transaction_holds_back_read_committed_until_it_commits(
        bootstrap: str) -> None:
    topic = unique("tx-lso")
    create_topics(bootstrap, topic, partitions=1)
    producer = transactional_producer(bootstrap, unique("tx-id"))
    producer.begin_transaction()
    producer.produce(topic, value=b"pending")
    producer.flush(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"after")
    plain.flush(30)
    # The plain record after the open transaction is held back under read_committed.
    held = consume_all(bootstrap, [topic], "read_committed", seconds=3,
                       until=lambda r: len(r) >= 1)
    assert held == []
    assert values(consume_all(bootstrap, [topic], "read_uncommitted", partitions=1)) == [
        b"after", b"pending"]
    producer.commit_transaction(30)
    assert values(consume_all(bootstrap, [topic], "read_committed", partitions=1)) == [
        b"after", b"pending"]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
        bootstrap: str) -> None:
    topic, txn_id = unique("tx-fence"), unique("tx-id")
    create_topics(bootstrap, topic)
    first = transactional_producer(bootstrap, txn_id)
    first.begin_transaction()
    first.produce(topic, value=b"from-the-first", partition=0)
    first.flush(30)
    # The second producer's init aborts the first's open transaction and fences it.
    second = transactional_producer(bootstrap, txn_id)
    with pytest.raises(KafkaException) as fenced:
        first.produce(topic, value=b"late", partition=1)
        first.commit_transaction(30)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    assert fenced.value.args[0].fatal()
    second.begin_transaction()
    second.produce(topic, value=b"from-the-second", partition=0)
    second.commit_transaction(30)
    assert values(consume_all(bootstrap, [topic], "read_committed")) == [b"from-the-second"]


def test_a_transaction_past_its_timeout_is_aborted_by_the_broker(bootstrap: str) -> None:
    topic = unique("tx-timeout")
    create_topics(bootstrap, topic, partitions=1)
    stalled = transactional_producer(bootstrap, unique("tx-id"),
                                     **{"transaction.timeout.ms": 1000})
    stalled.begin_transaction()
    stalled.produce(topic, value=b"abandoned")
    stalled.flush(30)
    later = transactional_producer(bootstrap, unique("tx-id"))
    later.begin_transaction()
    later.produce(topic, value=b"later")
    later.commit_transaction(30)
    # The broker aborts the abandoned transaction at its timeout; then the committed
    # record behind it becomes readable.
    seen = consume_all(bootstrap, [topic], "read_committed", seconds=15,
                       until=lambda r: len(r) >= 1)
    assert values(seen) == [b"later"]
    # The abandoned producer learns on its next call that its transaction is gone.
    with pytest.raises(KafkaException):
        stalled.commit_transaction(30)


def test_kafka_python_transactional_producer_commits_and_aborts(bootstrap: str) -> None:
    from kafka import KafkaProducer

    topic = unique("tx-kp")
    create_topics(bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique("tx-id"),
                             enable_idempotence=True)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(9):
            producer.send(topic, value=b"committed-%d" % i, partition=i % PARTITIONS)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic, value=b"aborted-%d" % i, partition=i % PARTITIONS)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close(timeout=10)
    committed = sorted(b"committed-%d" % i for i in range(9))
    assert values(consume_all(bootstrap, [topic], "read_committed")) == committed
    assert values(consume_all(bootstrap, [topic], "read_uncommitted")) == sorted(
        committed + [b"aborted-%d" % i for i in range(6)])
