"""InitProducerId for idempotent producers (the txn plugin): raw frames at every version,
ids unique across a broker restart, the request checks Kafka makes, and confluent-kafka
with ``enable.idempotence=true`` producing and consuming. Duplicate detection is the
log's and is tested there."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kernel.protocol.build import make
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import request

INIT_PRODUCER_ID = 22
VERSIONS = range(0, 6)


def init_producer_id(bootstrap: str, version: int, *, transactional_id: str | None = None,
                     timeout_ms: int = 60000, producer_id: int = -1,
                     producer_epoch: int = -1) -> Any:
    body = make(load_request_schema(INIT_PRODUCER_ID, version),
                transactional_id=transactional_id,
                transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                producer_id=producer_id, producer_epoch=producer_epoch)
    return request(bootstrap, body)


def ids_of(answers: list[Any]) -> list[int]:
    assert all(a.error_code == ErrorCode.none and a.producer_epoch == 0 for a in answers), \
        answers
    return [a.producer_id for a in answers]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_idempotent_producer_gets_a_new_id_and_epoch_0(broker: EmbeddedBroker,
                                                           version: int) -> None:
    ids = ids_of([init_producer_id(broker.bootstrap, version) for _ in range(3)])
    assert len(set(ids)) == 3 and all(i >= 0 for i in ids)


def test_producer_ids_are_unique_across_a_restart(broker: EmbeddedBroker) -> None:
    before = ids_of([init_producer_id(broker.bootstrap, 4) for _ in range(3)])
    broker.restart()
    after = ids_of([init_producer_id(broker.bootstrap, 4) for _ in range(3)])
    assert not set(before) & set(after)
    # The restarted broker took the next block: the ids before it were not handed out
    # again, however few of the first block were used.
    assert min(after) > max(before)


def test_a_block_used_up_is_followed_by_the_next(broker: EmbeddedBroker) -> None:
    ids = ids_of([init_producer_id(broker.bootstrap, 4) for _ in range(1001)])
    assert ids == list(range(ids[0], ids[0] + 1001))


@pytest.mark.parametrize("version", [3, 4, 5])
def test_an_existing_idempotent_producer_gets_a_new_id(broker: EmbeddedBroker,
                                                       version: int) -> None:
    """KIP-360 without a transactional id: Kafka hands out a new id, epoch 0."""
    (first,) = ids_of([init_producer_id(broker.bootstrap, version)])
    (second,) = ids_of([init_producer_id(broker.bootstrap, version, producer_id=first,
                                         producer_epoch=0)])
    assert second != first


@pytest.mark.parametrize(("producer_id", "producer_epoch"), [(5, -1), (-1, 0)])
def test_a_producer_id_without_an_epoch_is_invalid(broker: EmbeddedBroker, producer_id: int,
                                                   producer_epoch: int) -> None:
    answer = init_producer_id(broker.bootstrap, 4, producer_id=producer_id,
                              producer_epoch=producer_epoch)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (
        ErrorCode.invalid_request, -1, -1)


@pytest.mark.parametrize(("transactional_id", "timeout_ms", "error"), [
    ("", 60000, ErrorCode.invalid_request),
    ("t", 0, ErrorCode.invalid_transaction_timeout),
    ("t", 900001, ErrorCode.invalid_transaction_timeout),
])
def test_a_transactional_id_is_checked(
        broker: EmbeddedBroker, transactional_id: str, timeout_ms: int,
        error: ErrorCode) -> None:
    answer = init_producer_id(broker.bootstrap, 4, transactional_id=transactional_id,
                              timeout_ms=timeout_ms)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (error, -1, -1)


def test_transaction_max_timeout_ms_is_the_plugins_setting(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    broker = broker_factory(plugin_settings={"txn": {"transaction.max.timeout.ms": 1000}})
    answer = init_producer_id(broker.bootstrap, 4, transactional_id="t", timeout_ms=1001)
    assert answer.error_code == ErrorCode.invalid_transaction_timeout
    assert ids_of([init_producer_id(broker.bootstrap, 4, timeout_ms=1001)])


def test_confluent_kafka_idempotent_producer_produces_and_its_records_arrive(
        broker: EmbeddedBroker) -> None:
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "error_cb": errors.append})
    delivered: list[Any] = []
    for i in range(200):
        producer.produce(topic, key=b"k%d" % (i % 7), value=b"v%d" % i,
                         on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0
    assert not errors, errors
    assert [err for err, _ in delivered if err is not None] == []
    assert len(delivered) == 200

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(300):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) >= 200:
                break
    finally:
        consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(200))
