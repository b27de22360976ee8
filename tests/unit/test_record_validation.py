"""Record-level validation of a leader append (Kafka's LogValidator): compressed batches
are inflated within socket.request.max.bytes and every record walked; compacted topics need
keys. Batches here carry a valid CRC-32C, so only this validation stands between them
and the log."""

from __future__ import annotations

import gzip
import struct

import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from kernel.log.validator import RecordValidationError, scan_records, validate_and_assign_offsets
from kernel.protocol.compression import Compression, compress
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import (
    BATCH_HEADER,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    SimpleRecord,
    build_batch,
    crc_of,
    iter_records,
    write_varint,
)

COMPRESSED = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
MAX = 1 << 20


def records(n: int = 5, *, keyless: tuple[int, ...] = ()) -> list[SimpleRecord]:
    return [SimpleRecord(value=b"value-%d" % i * 20, key=None if i in keyless else b"k%d" % i,
                         headers=[("h", b"%d" % i)], timestamp=1_000 + i)
            for i in range(n)]


def section_of(batch_records: list[SimpleRecord]) -> bytes:
    """The uncompressed records section our encoder writes for these records."""
    return build_batch(batch_records)[RECORD_BATCH_OVERHEAD:]


def raw_batch(codec: int, payload: bytes, count: int, last_offset_delta: int | None = None,
              ) -> bytes:
    """A client batch around ``payload`` (taken as already compressed) whose header says
    ``count`` records, with a valid CRC: garbage that only record validation can see."""
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    out = bytearray(RECORD_BATCH_OVERHEAD)
    BATCH_HEADER.pack_into(out, 0, 0, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload), -1,
                           2, 0, codec, delta, 1_000, 1_000, -1, -1, -1, count)
    out += payload
    struct.pack_into(">I", out, CRC_OFFSET, crc_of(out))
    return bytes(out)


def append(data: bytes, **kw: object) -> None:
    args: dict[str, object] = dict(next_offset=0, leader_epoch=0, now_ms=0,
                                   max_message_bytes=MAX)
    args.update(kw)
    validate_and_assign_offsets(data, **args)  # type: ignore[arg-type]


def refusal(data: bytes, **kw: object) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        append(data, **kw)
    return caught.value


GARBAGE = {
    Compression.GZIP: b"\x1f\x8b\x08\x00" + b"\xa5" * 200,  # a gzip header, then noise
    Compression.SNAPPY: b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
                        + struct.pack(">i", 200) + b"\xa5" * 200,  # xerial, bad block
    Compression.LZ4: b"\x04\x22\x4d\x18" + b"\xa5" * 200,  # the frame magic, then noise
    Compression.ZSTD: b"\x28\xb5\x2f\xfd" + b"\xa5" * 200,  # the frame magic, then noise
}


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_garbage_behind_a_valid_crc_is_corrupt_message(codec: Compression) -> None:
    for payload in (GARBAGE[codec], b"\xa5" * 200, b""):
        error = refusal(raw_batch(codec, payload, 5))
        # Empty lz4 / zstd input inflates to nothing: five records are then missing.
        expected = (ErrorCode.invalid_record if not payload and codec in
                    (Compression.LZ4, Compression.ZSTD) else ErrorCode.corrupt_message)
        assert error.error_code == expected, (payload[:8], error.message)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_a_compressed_stream_cut_short_is_corrupt_message(codec: Compression) -> None:
    payload = compress(codec, section_of(records(50)))
    error = refusal(raw_batch(codec, payload[:-6], 50))
    assert error.error_code == ErrorCode.corrupt_message, error.message
    assert codec.name in (error.message or "")


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD],
                         ids=lambda c: c.name)
def test_trailing_garbage_after_the_stream_is_corrupt_message(codec: Compression) -> None:
    payload = compress(codec, section_of(records())) + b"\xa5" * 16
    assert refusal(raw_batch(codec, payload, 5)).error_code == ErrorCode.corrupt_message


def test_concatenated_gzip_members_and_raw_snappy_are_read() -> None:
    section = section_of(records(5))  # split mid-record: members are one byte stream
    payload = gzip.compress(section[:40]) + gzip.compress(section[40:])
    append(raw_batch(Compression.GZIP, payload, 5))
    append(raw_batch(Compression.SNAPPY, snappy.compress(section), 5))  # librdkafka's raw


def bomb(codec: Compression, size: int) -> bytes:
    """One record whose value makes the section exactly ``size`` bytes, compressed."""
    for value_size in range(size - 20, size):
        section = section_of([SimpleRecord(value=b"\x00" * value_size, key=b"k")])
        if len(section) == size:
            return compress(codec, section)
    raise AssertionError("no record of that size")


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_max_message_bytes_bounds_the_batch_as_sent_not_inflated(codec: Compression) -> None:
    """As Kafka: a small compressed batch may inflate past max.message.bytes; the
    inflation stops at max_inflated_bytes (socket.request.max.bytes), a bomb's bound."""
    limit = 64 * 1024
    inflated = 256 * 1024
    append(raw_batch(codec, bomb(codec, 3 * limit), 1), max_message_bytes=limit,
           max_inflated_bytes=inflated)
    append(raw_batch(codec, bomb(codec, inflated), 1), max_message_bytes=limit,
           max_inflated_bytes=inflated)
    error = refusal(raw_batch(codec, bomb(codec, inflated + 1), 1),
                    max_message_bytes=limit, max_inflated_bytes=inflated)
    assert error.error_code == ErrorCode.message_too_large
    assert "socket.request.max.bytes" in (error.message or "")


def test_count_that_lies_is_invalid_record() -> None:
    section = section_of(records(5))
    for codec in COMPRESSED:
        payload = compress(codec, section)
        more = refusal(raw_batch(codec, payload, 3))  # 5 records, header says 3
        assert more.error_code == ErrorCode.invalid_record
        assert "records still remaining" in (more.message or "")
        fewer = refusal(raw_batch(codec, payload, 6))
        assert fewer.error_code == ErrorCode.invalid_record
        assert "premature EOF" in (fewer.message or "")


def test_offset_deltas_that_lie_name_each_record() -> None:
    deltas = [0, 1, 4, 3, 2]  # a permutation: count and lastOffsetDelta still agree
    lying = [SimpleRecord(value=b"v%d" % i, key=b"k", offset_delta=d)
             for i, d in enumerate(deltas)]
    for codec in COMPRESSED:
        batch = build_batch(lying, compression=codec, last_offset_delta=4)
        with pytest.raises(RecordValidationError) as caught:
            append(batch)
        assert caught.value.error_code == ErrorCode.invalid_record
        assert [i for i, _ in caught.value.record_errors] == [2, 4]


def test_a_record_whose_length_lies_is_invalid_record() -> None:
    section = bytearray(section_of(records(3)))
    section[0] += 2  # the first record's length varint (zigzag): one byte longer
    error = refusal(raw_batch(Compression.ZSTD, compress(Compression.ZSTD, bytes(section)), 3))
    assert error.error_code == ErrorCode.invalid_record
    assert "record" in (error.message or "")


def test_broken_record_fields_are_invalid_record() -> None:
    body = bytearray(b"\x00\x00\x00")  # attributes, timestamp delta, offset delta
    write_varint(body, -7)  # a key length below -1
    body += b"\x00\x00"
    section = bytearray()
    write_varint(section, len(body))
    section += body
    error = refusal(raw_batch(Compression.LZ4, compress(Compression.LZ4, bytes(section)), 1))
    assert error.error_code == ErrorCode.invalid_record
    assert "invalid key size" in (error.message or "")


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_keyless_records_of_a_compacted_topic_are_named_by_index(codec: Compression) -> None:
    batch = build_batch(records(5, keyless=(2, 4)), compression=codec)
    append(batch)  # any other topic takes them
    with pytest.raises(RecordValidationError) as caught:
        append(batch, compacted=True, topic_partition="t-0")
    error = caught.value
    assert error.error_code == ErrorCode.invalid_record
    assert [i for i, _ in error.record_errors] == [2, 4]
    assert error.record_errors[0][1] == (
        "Compacted topic cannot accept message without key in topic partition t-0")
    assert error.message == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        "showing the first three errors at most: [RecordError(batchIndex=2, message="
        "'Compacted topic cannot accept message without key in topic partition t-0'), "
        "RecordError(batchIndex=4, message='Compacted topic cannot accept message without "
        "key in topic partition t-0')]")


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_valid_compressed_batches_pass_and_decode(codec: Compression) -> None:
    batch = build_batch(records(200), compression=codec)
    append(batch, compacted=True)
    assert [r.key for r in iter_records(batch)] == [b"k%d" % i for i in range(200)]


record_strategy = st.builds(
    SimpleRecord,
    value=st.one_of(st.none(), st.binary(max_size=20_000)),
    key=st.one_of(st.none(), st.binary(max_size=300)),
    headers=st.lists(st.tuples(st.text(max_size=70), st.one_of(st.none(), st.binary(
        max_size=200))), max_size=3),
    timestamp=st.integers(min_value=0, max_value=2**40),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(record_strategy, min_size=1, max_size=8))
def test_the_record_walk_reads_what_encoders_write(batch_records: list[SimpleRecord]) -> None:
    """Every length a varint can take (one, two, three bytes; null key and value;
    headers), through the walk's inline fast paths; any cut of the section fails it."""
    data = section_of(batch_records)
    scan_records(data, len(batch_records), check_offsets=True, compacted=False)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, r in enumerate(batch_records):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    theirs = bytes(builder.build())[RECORD_BATCH_OVERHEAD:]
    scan_records(theirs, len(batch_records), check_offsets=True, compacted=False)
    for cut in {1, len(data) // 2, len(data) - 1}:
        with pytest.raises(KafkaError) as caught:
            scan_records(data[:cut], len(batch_records), check_offsets=True, compacted=False)
        assert caught.value.error_code == ErrorCode.invalid_record
