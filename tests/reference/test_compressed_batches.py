"""A compressed batch against Kafka and Kafkernel with a real producer: Kafka checks the
batch as sent (compressed) against max.message.bytes, not its inflated size, so a 3 MB
record that compresses to about 300 KB is taken by both and reads back whole."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.reference.conformance import unique

INFLATED = 3 * 1024 * 1024


def compressible(size: int) -> bytes:
    """About 10:1 for gzip and zstd: each KiB is 100 random bytes and zeros."""
    return b"".join(os.urandom(100) + bytes(924) for _ in range(size // 1024))


def produce_and_read(bootstrap: str, codec: str, value: bytes) -> tuple[str | None, bytes]:
    """The delivery error (None when taken) and what a consumer then reads."""
    topic = unique(f"inflating-{codec}")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                         "message.max.bytes": 2 * len(value), "linger.ms": 0})
    producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(60) == 0
    if errors[0] is not None:
        return errors[0].name(), b""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        for _ in range(60):
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                return None, msg.value() or b""
    finally:
        consumer.close()
    raise AssertionError("nothing read back")


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_batch_inflating_past_max_message_bytes_is_taken_as_by_kafka(
        codec: str, reference_kafka: ReferenceKafka, broker: EmbeddedBroker) -> None:
    value = compressible(INFLATED)
    kafka = produce_and_read(reference_kafka.bootstrap, codec, value)
    kafkernel = produce_and_read(broker.bootstrap, codec, value)
    assert kafka == (None, value), kafka[0]
    assert kafkernel == (None, value), kafkernel[0]
