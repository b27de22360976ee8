"""Record batch v2, the format the log and the coordinators share: our encoder read by
kafka-python, varints, producer sequences, walking a range of batches."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from kernel.protocol.compression import Compression
from kernel.protocol.records import (
    BATCH_HEADER,
    RECORD_BATCH_OVERHEAD,
    build_batch,
    decode_batches,
    increment_sequence,
    iter_batches,
    read_varint,
    write_varint,
)
from tests.unit.log_helpers import sample_records

CODECS = list(Compression)




@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    """What consumers see: the Java-style framing we write decodes in another client."""
    batch = build_batch(sample_records(50), compression=codec, base_offset=100)
    parsed = DefaultRecordBatch(bytes(batch))
    assert parsed.validate_crc()
    values = [r.value for r in parsed]
    assert values == [r.value for r in sample_records(50)]
    assert parsed.base_offset == 100


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31),
                                   2**63 - 1, -(2**63)])
def test_varint_round_trip(value: int) -> None:
    out = bytearray()
    write_varint(out, value)
    assert read_varint(out, 0) == (value, len(out))


def test_sequence_wraps_like_kafka() -> None:
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 3) == 1
    assert increment_sequence(5, 3) == 8


def test_iter_batches_walks_a_log_range() -> None:
    a = build_batch(sample_records(2), base_offset=0)
    b = build_batch(sample_records(3), compression=Compression.LZ4, base_offset=2)
    decoded = decode_batches(bytes(a) + bytes(b) + bytes(a)[:17])
    assert [len(d.records) for d in decoded] == [2, 3]
    assert [h.base_offset for h, _ in iter_batches(bytes(a) + bytes(b))] == [0, 2]
    assert BATCH_HEADER.size == RECORD_BATCH_OVERHEAD
