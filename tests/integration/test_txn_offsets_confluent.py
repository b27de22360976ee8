"""A confluent-kafka consumer (read_committed, librdkafka's default, asks OffsetFetch for
stable offsets) of a group whose offsets a transaction commits: it waits while the
transactional offsets are pending (UNSTABLE_OFFSET_COMMIT, which librdkafka retries) and
starts from them once WriteTxnMarkers commits the transaction."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode

from kernel.testing.embedded import EmbeddedBroker
from plugins.coordinator.records import partition_for
from tests.integration.test_produce_fetch import create_topic
from tests.integration.test_txn_markers_wire import (
    GROUP,
    OFFSETS_PARTITIONS,
    TOPIC,
    offsets_partition,
    txn_commit,
    write_markers,
)


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    # Its producers have no transaction coordinator behind them: not verified.
    b = broker_factory({"transaction.partition.verification.enable": False},
                       plugin_settings={"coordinator": {
                           "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
                           "group.initial.rebalance.delay.ms": 0}})
    create_topic(b.bootstrap, TOPIC)
    return b


def test_a_consumer_waits_for_the_transactional_offsets_then_starts_there(
        broker: EmbeddedBroker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(5):
        producer.produce(TOPIC, value=b"%d" % i, partition=0)
    assert producer.flush(10) == 0
    assert txn_commit(broker, {0: 3}) == {(TOPIC, 0): ErrorCode.none}

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            # Without stable offsets it would start from the earliest record.
            assert message is None or message.error() is not None, message.value()
        tp = ("__consumer_offsets", partition_for(GROUP, OFFSETS_PARTITIONS))
        assert write_markers(broker, offsets_partition(), commit=True) == {tp: ErrorCode.none}
        values = []
        deadline = time.monotonic() + 20
        while len(values) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append((message.partition(), message.offset(), message.value()))
        assert values == [(0, 3, b"3"), (0, 4, b"4")]
    finally:
        consumer.close()
