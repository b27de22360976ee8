"""Idempotent produce over the wire (issue 14): raw Produce requests whose batches carry
a producer id, epoch and sequence set directly (InitProducerId is the txn plugin's). A
retried batch, also after the connection dropped before the answer and across a
restart, is acknowledged with its original offset and not appended twice; wrong epochs
and sequence gaps get Kafka's error codes and append nothing."""

from __future__ import annotations

import datetime
import time
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.handlers import produce
from kernel.protocol.build import request_module
from kernel.protocol.records import SimpleRecord, build_batch
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_log_apis_wire import build, topic_id, topic_ref
from tests.integration.test_poison_batches_wire import log_end, produce_raw, read_partition
from tests.integration.test_produce_fetch import create_topic
from tests.integration.wire import connect, encode_request, recv_frame

TIMEOUT = datetime.timedelta(seconds=5)
PID = 4242


def idempotent(value: bytes, seq: int, epoch: int = 0, pid: int = PID) -> bytes:
    # a producer's state expires producer.id.expiration.ms after its batch's timestamp
    now = int(time.time() * 1000)
    return build_batch([SimpleRecord(key=b"k", value=value, timestamp=now)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def test_a_retried_batch_is_not_appended_twice(broker: EmbeddedBroker) -> None:
    name = "idempotent-retry"
    create_topic(broker.bootstrap, name)
    first = idempotent(b"one", 0)
    assert produce_raw(broker, name, {0: first})[0].base_offset == 0
    assert produce_raw(broker, name, {0: idempotent(b"two", 1)})[0].base_offset == 1
    retry = produce_raw(broker, name, {0: first})[0]
    assert retry.error_code == ErrorCode.none and retry.base_offset == 0
    assert log_end(broker, name) == 2
    assert read_partition(broker, name, 0, 2) == [b"one", b"two"]


def test_a_batch_resent_after_the_connection_dropped_is_not_appended_twice(
        broker: EmbeddedBroker) -> None:
    """The broker appends, the client never hears back and resends on a new connection."""
    name = "idempotent-dropped"
    create_topic(broker.bootstrap, name)
    batch = idempotent(b"once", 0)
    m = request_module(produce.API_KEY, produce.MAX_VERSION)
    body = build(m.ProduceRequest, acks=-1, timeout=TIMEOUT, topic_data=(
        topic_ref(m.TopicProduceData, name, topic_id(broker, name), partition_data=(
            build(m.PartitionProduceData, index=0, records=batch),)),))
    sock = connect(broker.bootstrap)
    sock.sendall(encode_request(body))
    assert recv_frame(sock) is not None  # appended; the answer is then lost
    sock.close()
    again = produce_raw(broker, name, {0: batch})[0]
    assert again.error_code == ErrorCode.none and again.base_offset == 0
    assert produce_raw(broker, name, {0: idempotent(b"next", 1)})[0].base_offset == 1
    assert read_partition(broker, name, 0, 2) == [b"once", b"next"]


def refused(answer: Any, code: ErrorCode) -> None:
    assert answer.error_code == code, (answer.error_code, answer.error_message)
    assert answer.base_offset == -1
    assert answer.log_start_offset == 0  # as Kafka answers these
    assert answer.error_message


def test_wrong_epochs_and_sequence_gaps_get_kafkas_errors(broker: EmbeddedBroker) -> None:
    name = "idempotent-errors"
    create_topic(broker.bootstrap, name)
    assert produce_raw(broker, name, {0: idempotent(b"a", 0, epoch=1)})[0].base_offset == 0
    refused(produce_raw(broker, name, {0: idempotent(b"gap", 5, epoch=1)})[0],
            ErrorCode.out_of_order_sequence_number)
    refused(produce_raw(broker, name, {0: idempotent(b"old", 1, epoch=0)})[0],
            ErrorCode.invalid_producer_epoch)
    refused(produce_raw(broker, name, {0: idempotent(b"new", 3, epoch=2)})[0],
            ErrorCode.out_of_order_sequence_number)
    # an unknown producer id may start at any sequence (Kafka since KIP-360)
    assert produce_raw(broker, name, {0: idempotent(b"x", 7, pid=PID + 1)})[0].base_offset == 1
    assert produce_raw(broker, name, {0: idempotent(b"b", 1, epoch=1)})[0].base_offset == 2
    assert log_end(broker, name) == 3
    assert read_partition(broker, name, 0, 3) == [b"a", b"x", b"b"]


def test_the_state_survives_a_restart(broker: EmbeddedBroker) -> None:
    name = "idempotent-restart"
    create_topic(broker.bootstrap, name)
    last = idempotent(b"two", 1)
    produce_raw(broker, name, {0: idempotent(b"one", 0)})
    produce_raw(broker, name, {0: last})
    broker.restart()
    again = produce_raw(broker, name, {0: last})[0]
    assert again.error_code == ErrorCode.none and again.base_offset == 1
    refused(produce_raw(broker, name, {0: idempotent(b"gap", 3)})[0],
            ErrorCode.out_of_order_sequence_number)
    assert log_end(broker, name) == 2
