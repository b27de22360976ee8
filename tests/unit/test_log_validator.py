"""The checks of an append (Kafka's LogValidator): the leader's in-place offset
assignment, header, CRC and client rules, a follower's batches, recompression for a
topic's compression.type, and what damaged batches get; against our own encoder and
kafka-python's. Record-level validation is in test_record_validation.py."""

from __future__ import annotations

import struct

import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from kernel.log.validator import (
    AppendOrigin,
    LogAppendInfo,
    convert_compression,
    validate_and_assign_offsets,
    validate_batches,
)
from kernel.protocol.compression import Compression
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    ControlRecordType,
    SimpleRecord,
    TimestampType,
    build_batch,
    build_control_batch,
    crc_of,
    iter_records,
    join_chunks,
    parse_control_record,
    read_batch_header,
)
from tests.unit.log_helpers import sample_records

CODECS = list(Compression)
MAX = 1 << 20




def assign(data: bytes, **kw: object) -> tuple[bytes, LogAppendInfo]:
    """The append as one buffer: what the log writes."""
    args: dict[str, object] = dict(
        next_offset=100, leader_epoch=7, now_ms=999_999, max_message_bytes=MAX
    )
    args.update(kw)
    chunks, info = validate_and_assign_offsets(data, **args)  # type: ignore[arg-type]
    return join_chunks(chunks), info


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_OFFSET, crc_of(batch))
    return bytes(batch)


def error_of(data: bytes, **kw: object) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        assign(data, **kw)
    return e.value.error_code


# -- valid batches ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_our_batches_round_trip_for_every_codec(codec: Compression) -> None:
    batch = build_batch(sample_records(20), compression=codec)
    buf, info = assign(batch)
    assert info.first_offset == 100 and info.last_offset == 119
    assert info.records_count == 20 and info.valid_bytes == len(batch)
    assert info.max_timestamp == 1_019 and info.offset_of_max_timestamp == 119
    decoded = list(iter_records(buf))
    assert [r.offset for r in decoded] == list(range(100, 120))
    assert [r.value for r in decoded] == [r.value for r in sample_records(20)]
    assert decoded[3].key == b"key-3" and decoded[3].headers == (("h", b"3"),)
    assert decoded[3].timestamp == 1_003
    assert read_batch_header(buf).compression == codec


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_batches_validate_and_decode(codec: Compression) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=False, producer_id=42,
        producer_epoch=3, base_sequence=10, batch_size=1 << 20,
    )
    for i in range(30):
        builder.append(i, timestamp=5_000 + i, key=b"k%d" % i, value=b"v" * i,
                       headers=[("a", b"b")])
    batch = bytes(builder.build())
    buf, info = assign(batch)
    assert info.last_offset == 129
    (header,) = info.batches
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 10)
    assert header.last_sequence == 39
    decoded = list(iter_records(buf))
    assert [r.value for r in decoded] == [b"v" * i for i in range(30)]
    assert [r.offset for r in decoded] == list(range(100, 130))
    assert decoded[-1].headers == (("a", b"b"),)


def test_raw_snappy_as_librdkafka_writes_it_decodes() -> None:
    plain = build_batch(sample_records(10))
    payload = snappy.compress(plain[RECORD_BATCH_OVERHEAD:])
    batch = bytearray(plain[:RECORD_BATCH_OVERHEAD] + payload)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, ATTRIBUTES_OFFSET, int(Compression.SNAPPY))
    buf, _ = assign(with_crc(batch))
    assert [r.value for r in iter_records(buf)] == [r.value for r in sample_records(10)]


def test_in_place_assignment_keeps_the_crc_valid_and_sets_the_epoch() -> None:
    batch = build_batch(sample_records(3), partition_leader_epoch=-1)
    buf, info = assign(batch, next_offset=12345, leader_epoch=9)
    header = read_batch_header(buf)
    assert header.base_offset == 12345 and header.partition_leader_epoch == 9
    assert header.crc == crc_of(buf) == read_batch_header(batch).crc
    assert buf[RECORD_BATCH_OVERHEAD:] == batch[RECORD_BATCH_OVERHEAD:]
    validate_batches(buf)  # a follower accepts it unchanged
    assert info.batches[0] == header


def test_log_append_time_sets_the_type_bit_and_max_timestamp_and_fixes_the_crc() -> None:
    buf, info = assign(build_batch(sample_records(4)), log_append_time=True, now_ms=777)
    header = read_batch_header(buf)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 777 and header.crc == crc_of(buf)
    assert info.log_append_time == 777 and info.max_timestamp == 777
    assert {r.timestamp for r in iter_records(buf)} == {777}


def test_create_time_reports_no_log_append_time() -> None:
    _, info = assign(build_batch(sample_records(2)))
    assert info.log_append_time == -1


def test_transactional_and_producer_fields_are_reported() -> None:
    batch = build_batch(sample_records(3), producer_id=5, producer_epoch=1, base_sequence=0,
                        is_transactional=True)
    _, info = assign(batch)
    assert info.has_transactional and not info.has_control
    assert info.batches[0].is_transactional


def test_coordinator_may_write_control_batches_and_several_batches() -> None:
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=5, producer_epoch=1,
                                 coordinator_epoch=3, timestamp=10)
    data = build_batch(sample_records(2)) + marker
    _, info = assign(data, origin=AppendOrigin.COORDINATOR)
    assert info.has_control and info.batch_count == 2
    assert [b.base_offset for b in info.batches] == [100, 102]
    (record,) = iter_records(marker)
    assert parse_control_record(record) == (ControlRecordType.COMMIT, 3)


# -- rejected batches ------------------------------------------------------------------


def test_corrupt_crc_is_corrupt_message() -> None:
    batch = bytearray(build_batch(sample_records()))
    batch[-1] ^= 0xFF
    assert error_of(bytes(batch)) == ErrorCode.corrupt_message


def test_truncated_batch_is_corrupt_message() -> None:
    batch = build_batch(sample_records())
    assert error_of(batch[:-1]) == ErrorCode.corrupt_message
    assert error_of(batch[:10]) == ErrorCode.corrupt_message
    assert error_of(batch[:40]) == ErrorCode.corrupt_message


def test_partial_trailing_batch_is_corrupt_message() -> None:
    batch = build_batch(sample_records())
    assert error_of(batch + batch[:30]) == ErrorCode.corrupt_message
    assert error_of(batch + batch[:5], origin=AppendOrigin.COORDINATOR) == (
        ErrorCode.corrupt_message
    )


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_invalid_record(magic: int) -> None:
    batch = bytearray(build_batch(sample_records()))
    batch[16] = magic
    err = error_of(bytes(batch))
    assert err == ErrorCode.invalid_record


def test_unknown_magic_is_corrupt_message() -> None:
    batch = bytearray(build_batch(sample_records()))
    batch[16] = 3
    assert error_of(bytes(batch)) == ErrorCode.corrupt_message


def test_record_count_mismatch_is_invalid_record() -> None:
    batch = bytearray(build_batch(sample_records(5)))
    struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, 4)
    assert error_of(with_crc(batch)) == ErrorCode.invalid_record
    struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, 0)
    assert error_of(with_crc(batch)) == ErrorCode.invalid_record


def test_batch_larger_than_max_message_bytes_is_message_too_large() -> None:
    batch = build_batch(sample_records(50))
    assert error_of(batch, max_message_bytes=len(batch) - 1) == ErrorCode.message_too_large
    assign(batch, max_message_bytes=len(batch))


def test_client_rules() -> None:
    # a client batch starts at offset 0
    assert error_of(build_batch(sample_records(), base_offset=5)) == ErrorCode.invalid_record
    # clients write no control batches
    marker = build_control_batch(ControlRecordType.ABORT, producer_id=1, producer_epoch=0,
                                 coordinator_epoch=0, timestamp=0)
    assert error_of(marker) == ErrorCode.invalid_record
    # a producer id needs a sequence
    assert error_of(build_batch(sample_records(), producer_id=3, producer_epoch=0)) == (
        ErrorCode.invalid_record
    )
    # exactly one batch per partition, as Kafka's produce v3+
    two = build_batch(sample_records()) + build_batch(sample_records())
    assert error_of(two) == ErrorCode.invalid_record
    assert error_of(b"") == ErrorCode.invalid_record


def test_unknown_codec_is_invalid_record() -> None:
    batch = bytearray(build_batch(sample_records()))
    struct.pack_into(">h", batch, ATTRIBUTES_OFFSET, 5)
    assert error_of(with_crc(batch)) == ErrorCode.invalid_record


def test_follower_validation_drops_a_partial_tail_and_rejects_reordering() -> None:
    a, _ = assign(build_batch(sample_records(3)), next_offset=0)
    b, _ = assign(build_batch(sample_records(3)), next_offset=3)
    headers, valid = validate_batches(bytes(a) + bytes(b) + bytes(b)[:20])
    assert [h.base_offset for h in headers] == [0, 3] and valid == len(a) + len(b)
    with pytest.raises(KafkaError) as e:
        validate_batches(bytes(b) + bytes(a))
    assert e.value.error_code == ErrorCode.invalid_record
    with pytest.raises(KafkaError):
        validate_batches(bytes(a)[:-3], allow_partial_tail=False)


def test_compacted_topics_need_keys() -> None:
    assign(build_batch(sample_records()), compacted=True)
    assert error_of(build_batch([SimpleRecord(value=b"v")]), compacted=True) \
        == ErrorCode.invalid_record


def test_convert_compression_keeps_offsets_and_producer_fields() -> None:
    batch = build_batch(sample_records(10), producer_id=8, producer_epoch=2, base_sequence=4)
    buf, info = assign(batch, next_offset=50)
    chunks, info = convert_compression([buf], info, Compression.ZSTD)
    out = join_chunks(chunks)
    (header,) = info.batches
    assert header.compression == Compression.ZSTD and header.base_offset == 50
    assert (header.producer_id, header.base_sequence, header.last_offset) == (8, 4, 59)
    assert info.valid_bytes == len(out) and header.crc == crc_of(out)
    assert [r.offset for r in iter_records(out)] == list(range(50, 60))


# -- property --------------------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=64))
_record = st.builds(
    SimpleRecord,
    value=_bytes,
    key=_bytes,
    headers=st.lists(st.tuples(st.text(max_size=8), _bytes), max_size=3),
    timestamp=st.integers(min_value=0, max_value=2**41),
)


@settings(max_examples=150, deadline=None)
@given(
    batch_records=st.lists(_record, min_size=1, max_size=25),
    codec=st.sampled_from(CODECS),
    next_offset=st.integers(min_value=0, max_value=2**40),
    epoch=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_build_validate_decode_returns_the_same_records(
    batch_records: list[SimpleRecord], codec: Compression, next_offset: int, epoch: int
) -> None:
    batch = build_batch(batch_records, compression=codec)
    chunks, info = validate_and_assign_offsets(
        batch, next_offset=next_offset, leader_epoch=epoch, now_ms=0, max_message_bytes=MAX
    )
    buf = join_chunks(chunks)
    decoded = list(iter_records(buf))
    assert len(decoded) == len(batch_records) == info.records_count
    for i, (got, sent) in enumerate(zip(decoded, batch_records, strict=True)):
        assert got.offset == next_offset + i
        assert (got.key, got.value, got.timestamp) == (sent.key, sent.value, sent.timestamp)
        assert list(got.headers) == [tuple(h) for h in sent.headers]
    assert info.max_timestamp == max(r.timestamp or 0 for r in batch_records)
    assert read_batch_header(buf).crc == crc_of(buf)


# A valid batch damaged in one place: the produce path's validation either rejects it
# with one of Kafka's codes for the damage or, when only a field outside the CRC was hit
# (baseOffset, partitionLeaderEpoch: both overwritten on append), accepts it unchanged.
# Nothing else: no other exception type, no acceptance of damaged CRC-covered bytes.

BASE_OFFSET_BYTES = range(0, LENGTH_OFFSET)
LENGTH_BYTES = range(LENGTH_OFFSET, PARTITION_LEADER_EPOCH_OFFSET)
EPOCH_BYTES = range(PARTITION_LEADER_EPOCH_OFFSET, MAGIC_OFFSET)
# A bad batchLength: Kafka's CorruptRecordException (too short, past the end), the
# one-batch-per-partition rule (INVALID_RECORD) or RecordBatchTooLargeException.
FRAMING_ERRORS = {ErrorCode.corrupt_message, ErrorCode.invalid_record,
                  ErrorCode.message_too_large}
# magic 0/1 is INVALID_RECORD from Produce v3 on; any other magic is CORRUPT_MESSAGE
MAGIC_ERRORS = {ErrorCode.corrupt_message, ErrorCode.invalid_record}


def _encode(batch_records: list[SimpleRecord], codec: Compression) -> bytes:
    return build_batch(batch_records, compression=codec)


_valid_batch = st.builds(
    _encode, st.lists(_record, min_size=1, max_size=5), st.sampled_from(CODECS)
)
_origin = st.sampled_from([AppendOrigin.CLIENT, AppendOrigin.COORDINATOR])


def validation_outcome(
    data: bytes, origin: AppendOrigin, log_append_time: bool
) -> bytes | ErrorCode:
    """What the log would write, or the Kafka error code; any other exception escapes."""
    try:
        written, _ = assign(data, origin=origin, log_append_time=log_append_time)
    except KafkaError as e:
        return e.error_code
    return written


@settings(max_examples=400, deadline=None)
@given(batch=_valid_batch, data=st.data(), origin=_origin, log_append_time=st.booleans())
def test_one_flipped_byte_is_rejected_unless_outside_the_crc(
    batch: bytes, data: st.DataObject, origin: AppendOrigin, log_append_time: bool
) -> None:
    position = data.draw(st.integers(0, len(batch) - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    damaged = bytearray(batch)
    damaged[position] ^= flip
    outcome = validation_outcome(bytes(damaged), origin, log_append_time)
    intact = validation_outcome(batch, origin, log_append_time)
    assert isinstance(intact, bytes)
    if position in EPOCH_BYTES:
        assert outcome == intact
    elif position in BASE_OFFSET_BYTES:
        # a client batch must start at 0; a coordinator's baseOffset is overwritten
        client = origin is AppendOrigin.CLIENT
        assert outcome == (ErrorCode.invalid_record if client else intact)
    elif position in LENGTH_BYTES:
        assert outcome in FRAMING_ERRORS
    elif position == MAGIC_OFFSET:
        assert outcome in MAGIC_ERRORS
    else:  # the CRC itself or the bytes it covers
        assert outcome == ErrorCode.corrupt_message


@settings(max_examples=200, deadline=None)
@given(batch=_valid_batch, data=st.data(), origin=_origin)
def test_a_truncated_batch_is_corrupt_message(
    batch: bytes, data: st.DataObject, origin: AppendOrigin
) -> None:
    cut = data.draw(st.integers(1, len(batch) - 1), label="cut")
    assert validation_outcome(batch[:cut], origin, False) == ErrorCode.corrupt_message


@settings(max_examples=200, deadline=None)
@given(batch=_valid_batch, length=st.integers(-(2**31), 2**31 - 1), origin=_origin,
       trailing=st.binary(max_size=80))
def test_a_wrong_batch_length_is_rejected(
    batch: bytes, length: int, origin: AppendOrigin, trailing: bytes
) -> None:
    damaged = bytearray(batch + trailing)
    struct.pack_into(">i", damaged, LENGTH_OFFSET, length)
    outcome = validation_outcome(bytes(damaged), origin, False)
    if length == len(batch) - LOG_OVERHEAD and not trailing:
        assert isinstance(outcome, bytes)  # not damaged after all
    else:
        assert outcome in FRAMING_ERRORS
