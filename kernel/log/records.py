"""Record batch v2: header validation and in-place offset assignment for the hot path,
plus full decoding and an encoder for everything off it.

The hot path (:func:`validate_and_assign_offsets`) is O(batches) for uncompressed
batches: one ``struct.unpack_from`` of the 61-byte header and one CRC-32C call over the
batch. A compressed batch (and any batch of a compacted topic) also has its records
inflated, bounded by max.message.bytes, and walked, as Kafka's LogValidator does: a
batch consumers cannot read must never be acknowledged (:func:`validate_records`).
Records are never copied into the append: the CRC does not cover ``baseOffset`` or
``partitionLeaderEpoch``, so the append is written as a fresh 16-byte head per batch
followed by a view of the client's bytes from ``magic`` on (one ``pwritev``). Only
LogAppendTime (attributes and maxTimestamp are covered) copies a batch and recomputes
its CRC.

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
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c as _crc32c

from kernel.log.codecs import DecompressedTooLarge, compress, decompress
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
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_INT16 = struct.Struct(">h")
_INT16_PAIR = struct.Struct(">hh")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")
_CONTROL_VALUE = struct.Struct(">hi")

assert BATCH_HEADER.size == RECORD_BATCH_OVERHEAD


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_config(cls, name: str) -> Compression | None:
        """``compression.type`` -> codec; None for ``producer`` (keep the client's)."""
        if name == "producer":
            return None
        return _CODEC_BY_NAME[name]


_CODEC_BY_NAME = {
    "uncompressed": Compression.NONE, "none": Compression.NONE, "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD,
}


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class AppendOrigin(enum.Enum):
    """Who writes: Kafka applies the client-only checks (one batch, baseOffset 0, count
    matches the offset range, no control batches, sequence set) only to CLIENT."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


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


# ---------------------------------------------------------------------------
# hot path: validation and offset assignment
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class LogAppendInfo:
    """What an append did; the produce response and the idempotence code read this.

    ``offset_of_max_timestamp`` is the last offset of the batch that holds the max
    timestamp (Kafka 3.8's "shallow" offset); ListOffsets(-3) resolves the exact record.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records_count: int
    valid_bytes: int
    has_transactional: bool
    has_control: bool
    batches: list[BatchHeader] = field(default_factory=list)  # as written (offsets assigned)

    @property
    def batch_count(self) -> int:
        return len(self.batches)


# An append as the buffers to write back to back (``os.pwritev``): the batches with their
# offsets assigned, without copying the client's bytes into one buffer.
Chunks = list[bytes | bytearray | memoryview]


def chunks_size(chunks: Chunks) -> int:
    return sum(memoryview(c).nbytes for c in chunks)


def join_chunks(chunks: Chunks) -> bytes:
    return b"".join(chunks)


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, message)


def _check_framing(
    view: memoryview, position: int, total: int, max_batch_size: int | None
) -> int:
    """Size of the v2 batch at ``position``; raises on framing, magic and size errors."""
    remaining = total - position
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        raise _corrupt(
            f"truncated record batch at byte {position}: {remaining} bytes left, "
            f"a batch header needs at least {HEADER_SIZE_UP_TO_MAGIC}"
        )
    batch_length = _INT32.unpack_from(view, position + LENGTH_OFFSET)[0]
    if batch_length < LEGACY_RECORD_OVERHEAD_V0:
        raise _corrupt(
            f"record batch at byte {position} has batchLength {batch_length}, less than "
            f"the minimum record overhead ({LEGACY_RECORD_OVERHEAD_V0})"
        )
    magic = view[position + MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        if magic in (0, 1):
            raise _invalid(
                f"record batch at byte {position} has magic {magic}: produce requests of "
                "version 3 and above may only contain magic v2 record batches"
            )
        raise _corrupt(f"invalid magic {magic} in record batch at byte {position}")
    size = batch_length + LOG_OVERHEAD
    if size > remaining:
        raise _corrupt(
            f"truncated record batch at byte {position}: batchLength says {size} bytes, "
            f"{remaining} remain"
        )
    if size < RECORD_BATCH_OVERHEAD:
        raise _corrupt(
            f"record batch at byte {position} is {size} bytes, smaller than the minimum "
            f"batch overhead ({RECORD_BATCH_OVERHEAD})"
        )
    if max_batch_size is not None and size > max_batch_size:
        raise KafkaError(
            ErrorCode.message_too_large,
            f"the record batch size is {size} bytes which exceeds the maximum configured "
            f"value of {max_batch_size} (max.message.bytes)",
        )
    return size


# ---------------------------------------------------------------------------
# record-level validation: compressed batches and compacted topics only
# ---------------------------------------------------------------------------


class RecordValidationError(KafkaError):
    """Kafka's RecordValidationException: records of a batch that break a record-level
    rule (a compacted topic's key, an offset delta), each named by its index in the
    batch. Produce v8+ answers them as ``record_errors`` (KIP-467)."""

    def __init__(self, error_code: ErrorCode, record_errors: Sequence[tuple[int, str]]) -> None:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')"
                          for i, m in record_errors[:3])
        super().__init__(
            error_code,
            f"One or more records have been rejected due to {len(record_errors)} record "
            f"errors in total, and only showing the first three errors at most: [{shown}]",
        )
        self.record_errors = tuple(record_errors)


class _BadStructure(Exception):
    """A record's fields do not parse within its length."""


def _zigzag(data: bytes | bytearray | memoryview, position: int,
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
    raise _BadStructure("varint too long")


try:  # the same walk in C, answering only "valid or not" (kernel/log/_scan.c)
    from kernel.log._scan import records_valid as _records_valid
except ImportError:  # installed without a C compiler: the Python walk alone
    _records_valid = None


def scan_records(
    data: bytes, count: int, *, check_offsets: bool, compacted: bool,
    topic_partition: str = "",
) -> None:
    """:func:`walk_records`, through the C walk first where it is built: only a section
    that the C walk refuses is walked again in Python, to name the problem."""
    if _records_valid is not None and _records_valid(data, count, check_offsets, compacted):
        return
    walk_records(data, count, check_offsets=check_offsets, compacted=compacted,
                 topic_partition=topic_partition)


def walk_records(
    data: bytes, count: int, *, check_offsets: bool, compacted: bool,
    topic_partition: str = "",
) -> None:
    """Walk the ``count`` records of a decompressed records section as Kafka's
    DefaultRecord.readFrom does: each record's fields must fill exactly its length and
    the records exactly the section. With ``check_offsets`` the offset deltas must be
    0, 1, 2, ...; with ``compacted`` every record needs a key.

    Raises KafkaError: INVALID_RECORD for framing and count (Kafka's texts), and
    :class:`RecordValidationError` (INVALID_RECORD) naming each record that breaks the
    offset or key rule.
    """
    # Hot for compressed appends (a few us per record): one- and two-byte varints, the
    # common lengths, are read inline rather than through _zigzag.
    total = len(data)
    position = 0
    errors: list[tuple[int, str]] = []
    zigzag = _zigzag
    for index in range(count):  # every record takes a byte at least: <= total rounds
        if position >= total:
            raise _invalid("Incorrect declared batch size, premature EOF reached")
        try:
            b = data[position]
            if b < 0x80:
                size, position = (b >> 1) ^ -(b & 1), position + 1
            elif data[position + 1] < 0x80:
                raw = (b & 0x7F) | data[position + 1] << 7
                size, position = (raw >> 1) ^ -(raw & 1), position + 2
            else:
                size, position = zigzag(data, position, 5)
            end = position + size
            if size < 1 or end > total:
                raise _invalid(
                    f"Invalid record size: expected {size} bytes in record payload, but "
                    f"the records section has only {total - position} remaining bytes"
                )
            if data[position + 1] < 0x80:  # attributes (unused in v2), timestamp delta
                position += 2
            else:
                _, position = zigzag(data, position + 1, 10)
            b = data[position]
            if b < 0x80:
                delta, position = (b >> 1) ^ -(b & 1), position + 1
            else:
                delta, position = zigzag(data, position, 5)
            b = data[position]
            if b < 0x80:
                key_size, position = (b >> 1) ^ -(b & 1), position + 1
            else:
                key_size, position = zigzag(data, position, 5)
            if key_size > 0:
                position += key_size
            elif key_size < -1:
                raise _BadStructure(f"invalid key size {key_size}")
            b = data[position]
            if b < 0x80:
                value_size, position = (b >> 1) ^ -(b & 1), position + 1
            elif data[position + 1] < 0x80:
                raw = (b & 0x7F) | data[position + 1] << 7
                value_size, position = (raw >> 1) ^ -(raw & 1), position + 2
            else:
                value_size, position = zigzag(data, position, 5)
            if value_size > 0:
                position += value_size
            elif value_size < -1:
                raise _BadStructure(f"invalid value size {value_size}")
            if data[position] == 0:  # no headers
                position += 1
            else:
                headers, position = zigzag(data, position, 5)
                if headers < 0:
                    raise _BadStructure(f"invalid number of record headers {headers}")
                for _ in range(headers):
                    header_key, position = zigzag(data, position, 5)
                    if header_key < 0:
                        raise _BadStructure(f"invalid negative header key size {header_key}")
                    position += header_key
                    header_value, position = zigzag(data, position, 5)
                    if header_value > 0:
                        position += header_value
                    if position > end:
                        break
        except (IndexError, _BadStructure) as e:
            raise _invalid(f"Found invalid record structure in record {index}: "
                           f"{e if isinstance(e, _BadStructure) else 'runs past its end'}"
                           ) from None
        if position != end:
            raise _invalid(
                f"Invalid record size: expected to read {size} bytes in record payload, "
                f"but instead read {size + position - end}"
            )
        if check_offsets and delta != index:
            errors.append((index, f"Record at index {index} has offset delta {delta}, "
                                  f"expected {index}: the offsets of a batch are consecutive"))
        if compacted and key_size < 0:
            errors.append((index, "Compacted topic cannot accept message without key in "
                                  f"topic partition {topic_partition}"))
    if position != total:
        raise _invalid("Incorrect declared batch size, records still remaining in file")
    if errors:
        raise RecordValidationError(ErrorCode.invalid_record, errors)


def validate_records(
    section: memoryview, codec: int, count: int, *, max_message_bytes: int,
    compacted: bool, topic_partition: str = "",
) -> None:
    """Kafka's record-level validation of one batch on a leader append: a compressed
    batch's records ``section`` is inflated (bounded: as an uncompressed batch, at most
    max.message.bytes) and every record walked; an uncompressed one is walked only for
    a compacted topic (pass ``compacted`` False for a control batch).

    Raises KafkaError: CORRUPT_MESSAGE (data the codec cannot decode), MESSAGE_TOO_LARGE
    (inflates past max.message.bytes), INVALID_RECORD (see :func:`scan_records`).
    """
    if codec == Compression.NONE:
        data = bytes(section)
    else:
        limit = max(0, max_message_bytes - RECORD_BATCH_OVERHEAD)
        try:
            data = decompress(codec, section, limit)
        except DecompressedTooLarge:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"the {Compression(codec).name} record batch decompresses to more than "
                f"{max_message_bytes} bytes, the maximum configured value "
                "(max.message.bytes)",
            ) from None
    scan_records(data, count, check_offsets=codec != Compression.NONE, compacted=compacted,
                 topic_partition=topic_partition)


def validate_and_assign_offsets(
    records: bytes | bytearray | memoryview,
    *,
    next_offset: int,
    leader_epoch: int,
    now_ms: int,
    max_message_bytes: int,
    log_append_time: bool = False,
    origin: AppendOrigin = AppendOrigin.CLIENT,
    log_start_offset: int = 0,
    compacted: bool = False,
    topic_partition: str = "",
) -> tuple[Chunks, LogAppendInfo]:
    """Validate a leader append and assign offsets; the result is the append as chunks
    (see :data:`Chunks`) that still refer to ``records``.

    A compressed batch, and every batch of a ``compacted`` topic, has its records
    walked (:func:`validate_records`); an uncompressed batch of any other topic is
    checked by its header and CRC alone.

    Raises KafkaError: CORRUPT_MESSAGE (framing, partial trailing batch, CRC, bad magic,
    undecodable compressed records), INVALID_RECORD (magic 0/1, offset/count mismatch,
    control batch or baseOffset != 0 from a client, unknown codec, more or fewer than
    one batch from a client, record framing; :class:`RecordValidationError` for the
    records breaking the offset or key rules), MESSAGE_TOO_LARGE (a batch larger than
    max.message.bytes, compressed or once decompressed).
    """
    view = memoryview(records)
    total = view.nbytes
    client = origin is AppendOrigin.CLIENT
    if total == 0:
        raise _invalid("the append contains no record batch")
    chunks: Chunks = []
    crc32c = _crc32c.crc32c
    unpack = BATCH_HEADER.unpack_from
    pack_head = _OFFSET_LENGTH_EPOCH.pack
    append_time = now_ms if log_append_time else NO_TIMESTAMP
    batches: list[BatchHeader] = []
    position = 0
    offset = next_offset
    max_timestamp = NO_TIMESTAMP
    offset_of_max = -1
    records_count = 0
    has_txn = False
    has_control = False
    while position < total:
        size = _check_framing(view, position, total, max_message_bytes)
        if client and position + size < total:
            # Kafka validates the whole request before appending: one batch per partition.
            _check_framing(view, position + size, total, None)
            raise _invalid(
                "produce requests of version 3 and above must contain exactly one record "
                "batch per partition"
            )
        (base, batch_length, _ple, magic, crc, attributes, last_delta, first_ts, max_ts,
         producer_id, producer_epoch, base_sequence, count) = unpack(view, position)
        end = position + size
        if crc32c(view[position + ATTRIBUTES_OFFSET:end]) != crc:
            raise _corrupt(
                f"record batch at byte {position} is corrupt (stored crc = {crc}, "
                f"computed crc = {crc32c(view[position + ATTRIBUTES_OFFSET:end])})"
            )
        if attributes & COMPRESSION_MASK > Compression.ZSTD:
            raise _invalid(f"unknown compression codec {attributes & COMPRESSION_MASK}")
        if last_delta < 0:
            raise _invalid(f"record batch has a negative lastOffsetDelta {last_delta}")
        if client:
            if base != 0:
                raise _invalid(
                    f"the baseOffset of the record batch in the append should be 0, "
                    f"but it is {base}"
                )
            if count <= 0:
                raise _invalid(f"invalid reported count for record batch: {count}")
            if count != last_delta + 1:
                raise _invalid(
                    f"inconsistent batch offset range [0, {last_delta}] and count of "
                    f"records {count}"
                )
            if attributes & CONTROL_FLAG:
                raise _invalid("clients are not allowed to write control records")
            if producer_id >= 0 and base_sequence < 0:
                raise _invalid(
                    f"invalid sequence number {base_sequence} in record batch with "
                    f"producerId {producer_id}"
                )
        if attributes & COMPRESSION_MASK or compacted:
            validate_records(
                view[position + RECORD_BATCH_OVERHEAD:end], attributes & COMPRESSION_MASK,
                count, max_message_bytes=max_message_bytes,
                compacted=compacted and not attributes & CONTROL_FLAG,
                topic_partition=topic_partition,
            )
        if log_append_time:
            attributes |= TIMESTAMP_TYPE_MASK
            max_ts = now_ms
            copy = bytearray(view[position:end])
            _INT16.pack_into(copy, ATTRIBUTES_OFFSET, attributes)
            _INT64.pack_into(copy, MAX_TIMESTAMP_OFFSET, now_ms)
            crc = crc32c(memoryview(copy)[ATTRIBUTES_OFFSET:])
            _UINT32.pack_into(copy, CRC_OFFSET, crc)
            _OFFSET_LENGTH_EPOCH.pack_into(copy, 0, offset, batch_length, leader_epoch)
            chunks.append(copy)
        else:
            chunks.append(pack_head(offset, batch_length, leader_epoch))
            chunks.append(view[position + MAGIC_OFFSET:end])
        if max_ts > max_timestamp:
            max_timestamp = max_ts
            offset_of_max = offset + last_delta
        batches.append(BatchHeader(
            offset, batch_length, leader_epoch, magic, crc, attributes, last_delta,
            first_ts, max_ts, producer_id, producer_epoch, base_sequence, count,
        ))
        records_count += count
        has_txn = has_txn or bool(attributes & TRANSACTIONAL_FLAG)
        has_control = has_control or bool(attributes & CONTROL_FLAG)
        offset += last_delta + 1
        position = end
    if offset_of_max < 0:
        offset_of_max = offset - 1
    info = LogAppendInfo(
        first_offset=next_offset, last_offset=offset - 1, max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max, log_append_time=append_time,
        log_start_offset=log_start_offset, records_count=records_count, valid_bytes=total,
        has_transactional=has_txn, has_control=has_control, batches=batches,
    )
    return chunks, info


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


def validate_batches(
    records: bytes | bytearray | memoryview,
    *,
    allow_partial_tail: bool = True,
    max_batch_size: int | None = None,
) -> tuple[list[BatchHeader], int]:
    """Validate batches whose offsets are already assigned (follower append, recovery of
    fetched data): framing, magic, CRC and increasing offsets. Returns the headers and
    the number of valid bytes; a partial trailing batch is dropped when allowed (a fetch
    response may end mid-batch), else CORRUPT_MESSAGE."""
    view = memoryview(records)
    total = view.nbytes
    crc32c = _crc32c.crc32c
    unpack = BATCH_HEADER.unpack_from
    batches: list[BatchHeader] = []
    position = 0
    next_expected = -1
    while position < total:
        remaining = total - position
        if allow_partial_tail:
            if remaining < LOG_OVERHEAD:
                break
            length = _INT32.unpack_from(view, position + LENGTH_OFFSET)[0]
            if length + LOG_OVERHEAD > remaining and length >= LEGACY_RECORD_OVERHEAD_V0:
                break
        size = _check_framing(view, position, total, max_batch_size)
        header = BatchHeader._make(unpack(view, position))
        end = position + size
        if crc32c(view[position + ATTRIBUTES_OFFSET:end]) != header.crc:
            raise _corrupt(f"record batch at offset {header.base_offset} is corrupt (crc)")
        if header.compression > Compression.ZSTD:
            raise _invalid(f"unknown compression codec {header.compression}")
        if header.last_offset_delta < 0 or header.base_offset < next_expected:
            raise _invalid(
                f"offsets out of order: batch [{header.base_offset}, {header.last_offset}] "
                f"follows offset {next_expected - 1}"
            )
        next_expected = header.next_offset
        batches.append(header)
        position = end
    return batches, position


# ---------------------------------------------------------------------------
# varints (protobuf zigzag encoding)
# ---------------------------------------------------------------------------


def read_varint(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """Zigzag varint/varlong at ``position`` -> (value, next position)."""
    try:
        return _zigzag(buf, position, 10)
    except IndexError:
        raise _corrupt("varint runs past the end of the record") from None
    except _BadStructure:
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
    check CRCs (see :func:`validate_batches`)."""
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


def iter_records(batch: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Decode every record of one batch (decompressing as needed). LogAppendTime batches
    report the batch's maxTimestamp for every record, as Kafka does."""
    header = read_batch_header(batch)
    data = batch_records_bytes(header, batch)
    log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    position = 0
    for _ in range(header.records_count):
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
            headers.append((hkey.decode("utf-8"), hvalue))
        if position != end:
            raise _corrupt("record length does not match its fields")
        timestamp = header.max_timestamp if log_append else header.first_timestamp + ts_delta
        yield Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers))
    if position != len(data):
        raise _corrupt("records section is longer than recordsCount records")


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


def _encode_record(
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
        encoded = hkey.encode("utf-8")
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
) -> bytes:
    """Encode one v2 batch. Offsets deltas default to 0..n-1; pass explicit deltas and
    ``last_offset_delta`` to keep a compacted batch's original offset range."""
    items = list(records)
    if not items and last_offset_delta is None:
        raise ValueError("a record batch needs at least one record")
    timestamps = [r.timestamp for r in items if r.timestamp is not None]
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
        _encode_record(body, record, delta, ts - base_timestamp)
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
    payload = compress(compression, bytes(body))
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload)
    out = bytearray(RECORD_BATCH_OVERHEAD)
    BATCH_HEADER.pack_into(
        out, 0, base_offset, batch_length, partition_leader_epoch, CURRENT_MAGIC, 0,
        attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, len(items),
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


def recompress_batch(batch: bytes | memoryview, codec: int) -> bytes:
    """Re-encode a batch with another codec, keeping offsets, timestamps and producer
    fields (compression.type set on the topic)."""
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
        last_offset_delta=header.last_offset_delta,
    )


def convert_compression(
    chunks: Chunks, info: LogAppendInfo, codec: int
) -> tuple[Chunks, LogAppendInfo]:
    """Recompress the batches whose codec is not ``codec`` (a topic whose
    compression.type is not ``producer``); offsets and producer fields are kept."""
    if all(h.compression == codec or h.is_control for h in info.batches):
        return chunks, info
    out = bytearray()
    headers: list[BatchHeader] = []
    view = memoryview(join_chunks(chunks))
    position = 0
    for header in info.batches:
        batch = view[position:position + header.size]
        position += header.size
        if header.compression == codec or header.is_control:
            converted = bytes(batch)
        else:
            converted = recompress_batch(batch, codec)
        headers.append(read_batch_header(converted))
        out += converted
    view.release()
    info.batches = headers
    info.valid_bytes = len(out)
    return [out], info


def crc_of(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C a batch should carry (attributes to end)."""
    return int(_crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))


__all__ = [
    "BATCH_HEADER",
    "LOG_OVERHEAD",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "AppendOrigin",
    "BatchHeader",
    "Chunks",
    "Compression",
    "ControlRecordType",
    "DecodedBatch",
    "LogAppendInfo",
    "Record",
    "RecordValidationError",
    "SimpleRecord",
    "TimestampType",
    "build_batch",
    "build_control_batch",
    "chunks_size",
    "compress",
    "convert_compression",
    "crc_of",
    "decode_batches",
    "decompress",
    "iter_batches",
    "iter_records",
    "join_chunks",
    "parse_control_record",
    "read_batch_header",
    "read_varint",
    "recompress_batch",
    "scan_records",
    "validate_and_assign_offsets",
    "validate_batches",
    "validate_records",
    "walk_records",
    "whole_batches",
    "write_varint",
]
