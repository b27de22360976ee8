"""Real consumers read many partitions while a producer writes to them: every record
exactly once, in order per partition. kafka-python (Fetch v12, by topic names) does it
through an incremental fetch session (KIP-227), seen in the broker's cache while it
reads; librdkafka (confluent-kafka) never asks for one (its fetches carry epoch -1), and
is served without. The Java client's session use is checked in tests/java."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.fetch_sessions import SessionWatch
from tests.integration.test_produce_fetch import create_topic

PARTITIONS = 24
RECORDS = 6_000

Read = Callable[[EmbeddedBroker, str], Iterator[tuple[int, int, bytes]]]


def produce_slowly(bootstrap: str, topic: str) -> threading.Thread:
    """RECORDS values ``i``, to partition i % PARTITIONS, over about two seconds."""
    def run() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(RECORDS):
            producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
            if i % 300 == 299:
                producer.poll(0)
                time.sleep(0.1)
        assert producer.flush(30) == 0
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def read_all(broker: EmbeddedBroker, topic: str, read: Read) -> None:
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    producer = produce_slowly(broker.bootstrap, topic)
    got: list[tuple[int, int, bytes]] = []
    try:
        for record in read(broker, topic):
            got.append(record)
            if len(got) >= RECORDS:
                break
    finally:
        producer.join()
    assert len(got) == RECORDS
    for p in range(PARTITIONS):
        mine = [(offset, value) for partition, offset, value in got if partition == p]
        assert [offset for offset, _ in mine] == list(range(len(mine))), p
        assert [int(value) for _, value in mine] == list(range(p, RECORDS, PARTITIONS)), p


def kafka_python(broker: EmbeddedBroker, topic: str) -> Iterator[tuple[int, int, bytes]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=100)
    try:
        consumer.assign([KTP(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    yield r.partition, r.offset, r.value
    finally:
        consumer.close()


def confluent(broker: EmbeddedBroker, topic: str) -> Iterator[tuple[int, int, bytes]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            yield msg.partition(), msg.offset(), msg.value()
    finally:
        consumer.close()


def test_kafka_python_reads_through_an_incremental_session(broker: EmbeddedBroker) -> None:
    with SessionWatch(broker) as watch:
        read_all(broker, "sessions-kafka-python", kafka_python)
    # One session with every partition, continued by many incremental fetches.
    assert watch.most_sessions >= 1
    assert watch.most_partitions == PARTITIONS
    assert watch.highest_epoch > 10


@pytest.mark.parametrize("slots", [1000, 0])
def test_confluent_kafka_reads_without_a_session(broker_factory: Callable[..., EmbeddedBroker],
                                                 slots: int) -> None:
    """Also with the cache turned off (no slots): sessionless full fetches throughout."""
    broker = broker_factory({"max.incremental.fetch.session.cache.slots": slots})
    with SessionWatch(broker) as watch:
        read_all(broker, f"sessions-confluent-{slots}", confluent)
    assert watch.most_sessions == 0  # librdkafka 2.16 sends session epoch -1


def test_kafka_python_goes_on_without_a_session_when_the_cache_has_no_slots(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    broker = broker_factory({"max.incremental.fetch.session.cache.slots": 0})
    with SessionWatch(broker) as watch:
        read_all(broker, "sessions-none", kafka_python)
    assert watch.most_sessions == 0
