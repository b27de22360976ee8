"""A confluent-kafka producer and consumer round trip over a client configuration (the
security tests' check that a login works end to end)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer


def produce_and_consume(conf: dict[str, Any], n: int = 10) -> list[bytes]:
    """``n`` records to a new topic, then read back with a consumer group."""
    topic = "roundtrip-" + uuid.uuid4().hex[:8]
    producer = Producer(conf)
    for i in range(n):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(20) == 0
    return consume_values({**conf, "group.id": "g-" + topic}, topic, n)


def consume_values(conf: dict[str, Any], topic: str, n: int,
                   timeout: float = 30.0) -> list[bytes]:
    """Up to ``n`` values of ``topic`` from the earliest offset, by a group consumer
    (``conf`` names the group), within ``timeout`` seconds."""
    consumer = Consumer({"auto.offset.reset": "earliest", **conf})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
    finally:
        consumer.close()
    return seen
