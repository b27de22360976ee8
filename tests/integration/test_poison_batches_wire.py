"""Poison-pill batches (issue 11, item 3): hand-built batches with a valid CRC-32C over
garbage compressed data, a compression bomb, lying counts and offset deltas, keyless
records for a compacted topic. Each goes over a socket in a raw Produce; the answer must
refuse it, nothing may be appended, and a real consumer must then read the partition's
good records without stalling at the refused batch."""

from __future__ import annotations

import datetime
import struct
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from kernel.handlers import produce
from kernel.protocol.build import request_module
from kernel.protocol.compression import Compression, compress
from kernel.protocol.records import (
    BATCH_HEADER,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    SimpleRecord,
    build_batch,
    crc_of,
)
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_log_apis_wire import build, topic_id, topic_ref
from tests.integration.test_produce_fetch import consume_all, create_topic
from tests.integration.wire import request

COMPRESSED = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
TIMEOUT = datetime.timedelta(seconds=5)

# Noise behind each codec's own magic, so the decoder gets past its first check.
GARBAGE = {
    Compression.GZIP: b"\x1f\x8b\x08\x00" + b"\xa5" * 300,
    Compression.SNAPPY: b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
                        + struct.pack(">i", 300) + b"\xa5" * 300,
    Compression.LZ4: b"\x04\x22\x4d\x18" + b"\xa5" * 300,
    Compression.ZSTD: b"\x28\xb5\x2f\xfd" + b"\xa5" * 300,
}


def raw_batch(codec: int, payload: bytes, count: int) -> bytes:
    """A client batch around ``payload`` (as if compressed) that says ``count`` records,
    with a valid CRC-32C."""
    out = bytearray(RECORD_BATCH_OVERHEAD)
    BATCH_HEADER.pack_into(out, 0, 0, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload), -1,
                           2, 0, codec, count - 1, 1_000, 1_000, -1, -1, -1, count)
    out += payload
    struct.pack_into(">I", out, CRC_OFFSET, crc_of(out))
    return bytes(out)


def good(value: bytes, codec: int = Compression.NONE) -> bytes:
    return build_batch([SimpleRecord(key=b"k", value=value)], compression=codec)


def section(batch_records: list[SimpleRecord]) -> bytes:
    return build_batch(batch_records)[RECORD_BATCH_OVERHEAD:]


def produce_raw(broker: EmbeddedBroker, name: str, batches: dict[int, bytes],
                version: int = produce.MAX_VERSION) -> dict[int, Any]:
    """One Produce (acks=-1) of a batch per partition; the answer per partition."""
    m = request_module(produce.API_KEY, version)
    parts = tuple(build(m.PartitionProduceData, index=p, records=b)
                  for p, b in batches.items())
    body = build(m.ProduceRequest, acks=-1, timeout=TIMEOUT, topic_data=(
        topic_ref(m.TopicProduceData, name, topic_id(broker, name), partition_data=parts),))
    (topic,) = request(broker.bootstrap, body).responses
    return {p.index: p for p in topic.partition_responses}


def log_end(broker: EmbeddedBroker, name: str, partition: int = 0) -> int:
    """The partition's high watermark through a real client's ListOffsets."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(name, partition),
                                                    timeout=10)
    finally:
        consumer.close()
    return int(high)


def read_partition(broker: EmbeddedBroker, name: str, partition: int,
                   expected: int) -> list[bytes | None]:
    """A confluent-kafka consumer reads the partition from 0; any error it meets (such
    as _BAD_COMPRESSION at a poison batch) fails the test."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(name, partition, 0)])
    values: list[bytes | None] = []
    try:
        while len(values) < expected:
            msg = consumer.poll(10)
            assert msg is not None, f"stalled after {len(values)} of {expected} records"
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def refused(answer: Any, code: ErrorCode) -> None:
    assert answer.error_code == code, (answer.error_code, answer.error_message)
    assert answer.base_offset == -1
    assert answer.error_message


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_garbage_behind_a_valid_crc_is_refused_and_consumers_read_on(
        broker: EmbeddedBroker, codec: Compression) -> None:
    name = f"poison-{codec.name.lower()}"
    create_topic(broker.bootstrap, name)
    assert produce_raw(broker, name, {0: good(b"before", codec)})[0].base_offset == 0
    answer = produce_raw(broker, name, {0: raw_batch(codec, GARBAGE[codec], 3)})[0]
    refused(answer, ErrorCode.corrupt_message)
    assert codec.name in answer.error_message
    assert log_end(broker, name) == 1
    assert produce_raw(broker, name, {0: good(b"after", codec)})[0].base_offset == 1
    assert read_partition(broker, name, 0, 2) == [b"before", b"after"]


def test_one_bad_partition_fails_alone_and_kcat_reads_it(broker: EmbeddedBroker) -> None:
    name = "poison-one-of-three"
    create_topic(broker.bootstrap, name, partitions=3)
    answers = produce_raw(broker, name, {
        0: good(b"p0", Compression.ZSTD),
        1: raw_batch(Compression.ZSTD, GARBAGE[Compression.ZSTD], 2),
        2: good(b"p2", Compression.LZ4),
    })
    assert answers[0].error_code == ErrorCode.none and answers[0].base_offset == 0
    assert answers[2].error_code == ErrorCode.none and answers[2].base_offset == 0
    refused(answers[1], ErrorCode.corrupt_message)
    assert [log_end(broker, name, p) for p in range(3)] == [1, 0, 1]
    assert produce_raw(broker, name, {1: good(b"p1", Compression.ZSTD)})[1].base_offset == 0
    out = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", name, "-p", "1",
                          "-o", "beginning", "-e", "-q"],
                         check=True, timeout=60, capture_output=True, text=True)
    assert out.stdout.splitlines() == ["p1"]
    assert "Invalid compressed data" not in out.stderr


def test_a_zstd_bomb_just_over_socket_request_max_bytes_is_refused(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    """max.message.bytes bounds a batch as sent (Kafka's check); inflated, it may be
    larger, up to socket.request.max.bytes, where a bomb stops."""
    limit = 100_000
    broker = broker_factory({"socket.request.max.bytes": limit})
    name = "poison-bomb"
    create_topic(broker.bootstrap, name, config={"max.message.bytes": str(limit // 10)})

    def batch_inflating_to(size: int) -> bytes:
        """One record of zeros: as an uncompressed batch it would be ``size`` bytes."""
        for value_size in range(size - RECORD_BATCH_OVERHEAD - 20, size):
            records = section([SimpleRecord(key=b"k", value=b"\x00" * value_size)])
            if RECORD_BATCH_OVERHEAD + len(records) == size:
                return raw_batch(Compression.ZSTD, compress(Compression.ZSTD, records), 1)
        raise AssertionError("no record of that size")

    bomb = batch_inflating_to(RECORD_BATCH_OVERHEAD + limit + 1)  # records: limit + 1
    assert len(bomb) < 200  # a few bytes on the wire, over the limit once inflated
    answer = produce_raw(broker, name, {0: bomb})[0]
    refused(answer, ErrorCode.message_too_large)
    assert "socket.request.max.bytes" in answer.error_message
    assert log_end(broker, name) == 0
    accepted = batch_inflating_to(RECORD_BATCH_OVERHEAD + limit)
    assert produce_raw(broker, name, {0: accepted})[0].base_offset == 0
    (value,) = read_partition(broker, name, 0, 1)
    assert value is not None and limit - 100 < len(value) < limit


def test_counts_and_offset_deltas_that_lie_are_invalid_record(broker: EmbeddedBroker) -> None:
    name = "poison-lies"
    create_topic(broker.bootstrap, name)
    five = section([SimpleRecord(key=b"k", value=b"v%d" % i) for i in range(5)])
    for codec in COMPRESSED:
        for count, text in ((3, "records still remaining"), (7, "premature EOF")):
            answer = produce_raw(broker, name, {0: raw_batch(codec, compress(codec, five),
                                                             count)})[0]
            refused(answer, ErrorCode.invalid_record)
            assert text in answer.error_message
    lying = [SimpleRecord(key=b"k", value=b"v%d" % i, offset_delta=d)
             for i, d in enumerate([0, 1, 3, 2])]
    answer = produce_raw(broker, name, {0: build_batch(lying, compression=Compression.GZIP,
                                                       last_offset_delta=3)})[0]
    refused(answer, ErrorCode.invalid_record)
    assert [e.batch_index for e in answer.record_errors] == [2, 3]
    assert log_end(broker, name) == 0
    assert produce_raw(broker, name, {0: good(b"fine", Compression.GZIP)})[0].base_offset == 0
    assert read_partition(broker, name, 0, 1) == [b"fine"]


def test_a_keyless_record_of_a_compacted_topic_is_named_by_its_index(
        broker: EmbeddedBroker) -> None:
    name = "poison-compacted"
    create_topic(broker.bootstrap, name, config={"cleanup.policy": "compact"})
    batch = build_batch([SimpleRecord(key=None if i == 2 else b"k%d" % i, value=b"v%d" % i)
                         for i in range(4)], compression=Compression.SNAPPY)
    answer = produce_raw(broker, name, {0: batch})[0]
    refused(answer, ErrorCode.invalid_record)
    message = f"Compacted topic cannot accept message without key in topic partition {name}-0"
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (2, message)]
    assert answer.error_message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=2, message="
        f"'{message}')]")
    # Before v8 the answer has no record_errors; the code is the same.
    old = produce_raw(broker, name, {0: batch}, version=7)[0]
    assert old.error_code == ErrorCode.invalid_record
    assert not hasattr(old, "record_errors")
    assert log_end(broker, name) == 0
    keyed = build_batch([SimpleRecord(key=b"k", value=b"kept")], compression=Compression.SNAPPY)
    assert produce_raw(broker, name, {0: keyed})[0].base_offset == 0
    assert [m.value() for m in consume_all(broker.bootstrap, name, 1, 1)] == [b"kept"]


def test_a_client_repeating_a_refused_batch_is_logged_once(
    broker_factory: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """The client chooses how often it sends a poison batch: the warning that names it
    comes once per client address per period, not once per request."""
    broker = broker_factory()  # created here, so that it logs to the captured stderr
    create_topic(broker.bootstrap, "refused-often", 1)
    garbage = raw_batch(Compression.ZSTD, GARBAGE[Compression.ZSTD], 3)
    for _ in range(5):
        assert produce_raw(broker, "refused-often", {0: garbage})[0].error_code == \
            ErrorCode.corrupt_message
    assert capfd.readouterr().err.count("produce refused") == 1
