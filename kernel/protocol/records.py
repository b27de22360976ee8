"""Record batch v2, the format every log and every coordinator reads and writes: the
header and its fields, records and headers, varints, CRC-32C, attributes (codec,
timestamp type, transactional and control flags); walking and decoding batches, and an
encoder. Kafka keeps this in ``org.apache.kafka.common.record``; the log's checks of an
append are :mod:`kernel.log.validator`, the codecs :mod:`kernel.protocol.compression`.

Batch layout (big-endian)::

    0 baseOffset int64        8 batchLength int32     12 partitionLeaderEpoch int32
    16 magic int8             17 crc uint32           21 attributes int16
    23 lastOffsetDelta int32  27 firstTimestamp int64 35 maxTimestamp int64
    43 producerId int64       51 producerEpoch int16  53 baseSequence int32
    57 recordsCount int32     61 records...
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c as _crc32c

from kernel.protocol.compression import Compression, compress, decompress
from kernel.protocol.errors import ErrorCode, KafkaError

# ---------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
FIRST_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
RECORDS_COUNT_OFFSET = 57

LOG_OVERHEAD = 12  # baseOffset + batchLength: the framing shared by every magic
HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_BATCH_OVERHEAD = 61
LEGACY_RECORD_OVERHEAD_V0 = 14  # smallest legal batchLength of any magic (Kafka's check)

CURRENT_MAGIC = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40  # KIP-534: firstTimestamp holds the delete horizon

INT32_MAX = 2**31 - 1

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT16_PAIR = struct.Struct(">hh")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_CONTROL_VALUE = struct.Struct(">hi")

assert BATCH_HEADER.size == RECORD_BATCH_OVERHEAD


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


# ---------------------------------------------------------------------------
# batch header
# ---------------------------------------------------------------------------


class BatchHeader(NamedTuple):
    """The 61-byte header of one v2 batch, as stored (field order is the wire order)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the batch occupies in a log, framing included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap at Int32.MAX as in Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def read_batch_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    return BatchHeader._make(BATCH_HEADER.unpack_from(buf, position))


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, message)


# ---------------------------------------------------------------------------
# an append as buffers, and whole batches
# ---------------------------------------------------------------------------

# An append as the buffers to write back to back (``os.pwritev``): the batches with their
# offsets assigned, without copying the client's bytes into one buffer.
Chunks = list[bytes | bytearray | memoryview]


def chunks_size(chunks: Chunks) -> int:
    return sum(memoryview(c).nbytes for c in chunks)


def join_chunks(chunks: Chunks) -> bytes:
    return b"".join(chunks)


def whole_batches(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(bytes, records) of the whole batches at the start of ``data``, from the framing
    and record counts only: for bytes read back from our own log."""
    position = count = 0
    end = len(data)
    unpack = _INT32.unpack_from
    while position + RECORD_BATCH_OVERHEAD <= end:
        batch_end = position + LOG_OVERHEAD + unpack(data, position + LENGTH_OFFSET)[0]
        if batch_end > end:
            break
        count += unpack(data, position + RECORDS_COUNT_OFFSET)[0]
        position = batch_end
    return position, count


# ---------------------------------------------------------------------------
# varints (protobuf zigzag encoding)
# ---------------------------------------------------------------------------


class RecordStructureError(Exception):
    """A record's fields do not parse within its length."""


def read_zigzag(data: bytes | bytearray | memoryview, position: int,
                max_bytes: int) -> tuple[int, int]:
    """A zigzag varint of at most ``max_bytes`` bytes (5: varint, 10: varlong)."""
    raw = shift = 0
    for _ in range(max_bytes):
        b = data[position]  # IndexError past the end: the caller's framing error
        position += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7
    raise RecordStructureError("varint too long")


def read_varint(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """Zigzag varint/varlong at ``position`` -> (value, next position)."""
    try:
        return read_zigzag(buf, position, 10)
    except IndexError:
        raise _corrupt("varint runs past the end of the record") from None
    except RecordStructureError:
        raise _corrupt("varint is longer than 10 bytes") from None


def write_varint(out: bytearray, value: int) -> None:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


# ---------------------------------------------------------------------------
# decoding (off the hot path: compaction, ListOffsets by time, tests, Spark)
# ---------------------------------------------------------------------------


Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def _read_bytes(buf: bytes, position: int) -> tuple[bytes | None, int]:
    length, position = read_varint(buf, position)
    if length < 0:
        return None, position
    end = position + length
    if end > len(buf):
        raise _corrupt("record field runs past the end of the record")
    return buf[position:end], end


def iter_batches(
    data: bytes | bytearray | memoryview, *, allow_partial_tail: bool = True
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Walk the batches of a log or fetch range: (header, whole batch bytes). Does not
    check CRCs (the log's validator does)."""
    view = memoryview(data)
    total = view.nbytes
    position = 0
    while position + LOG_OVERHEAD <= total:
        length = _INT32.unpack_from(view, position + LENGTH_OFFSET)[0]
        size = length + LOG_OVERHEAD
        if position + size > total or position + RECORD_BATCH_OVERHEAD > total:
            if allow_partial_tail:
                return
            raise _corrupt(f"truncated record batch at byte {position}")
        if view[position + MAGIC_OFFSET] != CURRENT_MAGIC:
            raise _invalid(f"record batch at byte {position} is not magic v2")
        yield read_batch_header(view, position), view[position:position + size]
        position += size
    if position != total and not allow_partial_tail:
        raise _corrupt(f"truncated record batch at byte {position}")


def batch_records_bytes(header: BatchHeader, batch: memoryview | bytes) -> bytes:
    """The records section of a batch, decompressed."""
    return decompress(header.compression, memoryview(batch)[RECORD_BATCH_OVERHEAD:])


RawRecord = tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]


def walk_section(data: bytes | bytearray | memoryview, count: int) -> Iterator[RawRecord]:
    """The ``count`` records of a decompressed records section as encoded: (offset
    delta, timestamp delta, key, value, headers)."""
    position = 0
    for _ in range(count):
        length, position = read_varint(data, position)
        end = position + length
        if length < 1 or end > len(data):
            raise _corrupt(f"record of length {length} runs past the end of its batch")
        position += 1  # attributes: unused
        ts_delta, position = read_varint(data, position)
        offset_delta, position = read_varint(data, position)
        key, position = _read_bytes(data, position)
        value, position = _read_bytes(data, position)
        n_headers, position = read_varint(data, position)
        headers: list[Header] = []
        for _ in range(n_headers):
            hkey, position = _read_bytes(data, position)
            hvalue, position = _read_bytes(data, position)
            if hkey is None:
                raise _corrupt("record header key is null")
            # as bytes that are not UTF-8 came (Kafka decodes them with replacement; a
            # record the cleaner re-encodes keeps its bytes)
            headers.append((hkey.decode("utf-8", "surrogateescape"), hvalue))
        if position != end:
            raise _corrupt("record length does not match its fields")
        yield offset_delta, ts_delta, key, value, tuple(headers)
    if position != len(data):
        raise _corrupt("records section is longer than recordsCount records")


def iter_records(batch: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Decode every record of one batch (decompressing as needed). LogAppendTime batches
    report the batch's maxTimestamp for every record, as Kafka does."""
    header = read_batch_header(batch)
    data = batch_records_bytes(header, batch)
    log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    for offset_delta, ts_delta, key, value, headers in walk_section(
            data, header.records_count):
        timestamp = header.max_timestamp if log_append else header.first_timestamp + ts_delta
        yield Record(header.base_offset + offset_delta, timestamp, key, value, headers)


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    header: BatchHeader
    records: tuple[Record, ...]


def decode_batches(data: bytes | bytearray | memoryview) -> list[DecodedBatch]:
    """Every batch of a byte range with its records (partial trailing batch dropped)."""
    return [DecodedBatch(h, tuple(iter_records(b))) for h, b in iter_batches(data)]


def parse_control_record(record: Record) -> tuple[ControlRecordType, int]:
    """A control record's (type, coordinator epoch) from its key and value."""
    if record.key is None or len(record.key) < 4:
        raise _corrupt("control record without a valid key")
    _version, kind = _INT16_PAIR.unpack_from(record.key)
    coordinator_epoch = -1
    if record.value is not None and len(record.value) >= _CONTROL_VALUE.size:
        _v, coordinator_epoch = _CONTROL_VALUE.unpack_from(record.value)
    return ControlRecordType(kind), coordinator_epoch


# ---------------------------------------------------------------------------
# encoding (coordinator internal records, control markers, recompression, tests)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to encode; ``timestamp`` None means the batch's base timestamp and
    ``offset_delta`` None means its position in the batch."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp: int | None = None
    offset_delta: int | None = None


def encode_record(
    out: bytearray, record: SimpleRecord, offset_delta: int, timestamp_delta: int
) -> None:
    body = bytearray(b"\x00")  # attributes
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    for part in (record.key, record.value):
        if part is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(part))
            body += part
    write_varint(body, len(record.headers))
    for hkey, hvalue in record.headers:
        encoded = hkey.encode("utf-8", "surrogateescape")
        write_varint(body, len(encoded))
        body += encoded
        if hvalue is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(hvalue))
            body += hvalue
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Iterable[SimpleRecord],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    compression: int = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode one v2 batch. Offsets deltas default to 0..n-1; pass explicit deltas and
    ``last_offset_delta`` to keep a compacted batch's original offset range. With
    ``delete_horizon_ms`` (the cleaner, KIP-534) firstTimestamp holds the horizon and
    the record timestamps are deltas from it."""
    items = list(records)
    if not items and last_offset_delta is None:
        raise ValueError("a record batch needs at least one record")
    timestamps = [r.timestamp for r in items if r.timestamp is not None]
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    if base_timestamp is None:
        base_timestamp = min(timestamps) if timestamps else NO_TIMESTAMP
    body = bytearray()
    max_timestamp = NO_TIMESTAMP
    max_delta = -1
    for i, record in enumerate(items):
        delta = i if record.offset_delta is None else record.offset_delta
        ts = base_timestamp if record.timestamp is None else record.timestamp
        max_timestamp = max(max_timestamp, ts)
        max_delta = max(max_delta, delta)
        encode_record(body, record, delta, ts - base_timestamp)
    if last_offset_delta is None:
        last_offset_delta = max_delta
    attributes = int(compression) & COMPRESSION_MASK
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
        if log_append_time is not None:
            max_timestamp = log_append_time
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG
    return frame_batch(body, len(items), attributes=attributes, base_offset=base_offset,
                       last_offset_delta=last_offset_delta, base_timestamp=base_timestamp,
                       max_timestamp=max_timestamp, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence,
                       partition_leader_epoch=partition_leader_epoch,
                       compression_level=compression_level)


def frame_batch(
    records: bytes | bytearray, count: int, *, attributes: int, base_offset: int,
    last_offset_delta: int, base_timestamp: int, max_timestamp: int, producer_id: int,
    producer_epoch: int, base_sequence: int, partition_leader_epoch: int,
    compression_level: int | None = None,
) -> bytes:
    """A v2 batch around ``count`` encoded records, compressed by the attributes' codec
    (at ``compression_level``, None for the codec's default), its CRC computed."""
    payload = compress(attributes & COMPRESSION_MASK, bytes(records), compression_level)
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload)
    out = bytearray(RECORD_BATCH_OVERHEAD)
    BATCH_HEADER.pack_into(
        out, 0, base_offset, batch_length, partition_leader_epoch, CURRENT_MAGIC, 0,
        attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, count,
    )
    out += payload
    _UINT32.pack_into(out, CRC_OFFSET, _crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_control_batch(
    kind: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker (commit/abort) as the coordinator writes it."""
    record = SimpleRecord(
        key=_INT16_PAIR.pack(0, int(kind)),
        value=_CONTROL_VALUE.pack(0, coordinator_epoch),
        timestamp=timestamp,
    )
    return build_batch(
        [record], base_offset=base_offset, producer_id=producer_id,
        producer_epoch=producer_epoch, is_transactional=True, is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def recompress_batch(batch: bytes | memoryview, codec: int, level: int | None = None) -> bytes:
    """Re-encode a batch with another codec (at ``level``), keeping offsets, timestamps
    and producer fields (compression.type set on the topic)."""
    header = read_batch_header(batch)
    simple = [
        SimpleRecord(
            value=r.value, key=r.key, headers=r.headers, timestamp=r.timestamp,
            offset_delta=r.offset - header.base_offset,
        )
        for r in iter_records(batch)
    ]
    log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    return build_batch(
        simple, base_offset=header.base_offset,
        base_timestamp=header.first_timestamp if not log_append else None,
        compression=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=header.max_timestamp if log_append else None,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, is_transactional=header.is_transactional,
        is_control=header.is_control, partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta, compression_level=level,
    )


def crc_of(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C a batch should carry (attributes to end)."""
    return int(_crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))

__all__ = [
    "BATCH_HEADER",
    "LOG_OVERHEAD",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "BatchHeader",
    "Chunks",
    "ControlRecordType",
    "DecodedBatch",
    "Record",
    "RecordStructureError",
    "SimpleRecord",
    "TimestampType",
    "build_batch",
    "build_control_batch",
    "chunks_size",
    "crc_of",
    "decode_batches",
    "increment_sequence",
    "iter_batches",
    "iter_records",
    "join_chunks",
    "parse_control_record",
    "read_batch_header",
    "read_varint",
    "read_zigzag",
    "recompress_batch",
    "whole_batches",
    "write_varint",
]
