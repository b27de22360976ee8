"""Kafka's LogValidator: the checks of an append before the log takes it, and the
assignment of its offsets.

The leader's path (:func:`validate_and_assign_offsets`, run for every produced batch)
is O(batches) for uncompressed batches: one ``struct.unpack_from`` of the 61-byte header
and one CRC-32C call over the batch. A compressed batch (and any batch of a compacted
topic) also has its records inflated, bounded by max.message.bytes, and walked, as
Kafka's LogValidator does: a batch consumers cannot read must never be acknowledged
(:func:`validate_records`). Records are never copied into the append: the CRC does not
cover ``baseOffset`` or ``partitionLeaderEpoch``, so the append is written as a fresh
16-byte head per batch followed by a view of the client's bytes from ``magic`` on (one
``pwritev``). Only LogAppendTime (attributes and maxTimestamp are covered) copies a
batch and recomputes its CRC. A follower's append, whose offsets the leader assigned, is
checked by :func:`validate_batches`.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import crc32c as _crc32c

from kernel.protocol.compression import Compression, DecompressedTooLarge, decompress
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    CURRENT_MAGIC,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_RECORD_OVERHEAD_V0,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    Chunks,
    RecordStructureError,
    iter_records,
    join_chunks,
    read_batch_header,
    read_zigzag,
    recompress_batch,
)

LONG_MAX = 2**63 - 1
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")

# socket.request.max.bytes' default: what a compressed batch may inflate to.
DEFAULT_MAX_INFLATED_BYTES = 104857600


class AppendOrigin(enum.Enum):
    """Who writes: Kafka applies the client-only checks (one batch, baseOffset 0, count
    matches the offset range, no control batches, sequence set) only to CLIENT."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


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
    # A producer's retried batch already in the log: nothing was appended and the
    # offsets are the original batch's (Kafka answers it as a success).
    duplicate: bool = False

    @property
    def batch_count(self) -> int:
        return len(self.batches)


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, message)


# ---------------------------------------------------------------------------
# batch framing
# ---------------------------------------------------------------------------


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
    # common lengths, are read inline rather than through read_zigzag.
    total = len(data)
    position = 0
    errors: list[tuple[int, str]] = []
    zigzag = read_zigzag
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
                raise RecordStructureError(f"invalid key size {key_size}")
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
                raise RecordStructureError(f"invalid value size {value_size}")
            if data[position] == 0:  # no headers
                position += 1
            else:
                headers, position = zigzag(data, position, 5)
                if headers < 0:
                    raise RecordStructureError(f"invalid number of record headers {headers}")
                for _ in range(headers):
                    header_key, position = zigzag(data, position, 5)
                    if header_key < 0:
                        raise RecordStructureError(f"invalid negative header key size {header_key}")
                    position += header_key
                    header_value, position = zigzag(data, position, 5)
                    if header_value > 0:
                        position += header_value
                    if position > end:
                        break
        except (IndexError, RecordStructureError) as e:
            raise _invalid(f"Found invalid record structure in record {index}: "
                           f"{e if isinstance(e, RecordStructureError) else 'runs past its end'}"
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
    section: memoryview, codec: int, count: int, *, max_inflated_bytes: int,
    compacted: bool, topic_partition: str = "",
) -> None:
    """Kafka's record-level validation of one batch on a leader append: a compressed
    batch's records ``section`` is inflated and every record walked; an uncompressed one
    is walked only for a compacted topic (pass ``compacted`` False for a control batch).

    As Kafka, max.message.bytes bounds the batch as sent (compressed), not inflated:
    Kafka streams the records out, Kafkernel inflates them whole, so the inflation stops
    at ``max_inflated_bytes`` (socket.request.max.bytes: the largest request the broker
    would read, which the same records sent uncompressed could not pass).

    Raises KafkaError: CORRUPT_MESSAGE (data the codec cannot decode), MESSAGE_TOO_LARGE
    (inflates past ``max_inflated_bytes``), INVALID_RECORD (see :func:`scan_records`).
    """
    if codec == Compression.NONE:
        data = bytes(section)
    else:
        try:
            data = decompress(codec, section, max_inflated_bytes)
        except DecompressedTooLarge:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"the {Compression(codec).name} record batch decompresses to more than "
                f"{max_inflated_bytes} bytes, the largest request the broker accepts "
                "(socket.request.max.bytes)",
            ) from None
    scan_records(data, count, check_offsets=codec != Compression.NONE, compacted=compacted,
                 topic_partition=topic_partition)


# ---------------------------------------------------------------------------
# appends: the leader's (offsets assigned here) and a follower's
# ---------------------------------------------------------------------------


def check_timestamps(batch: memoryview, now_ms: int, before_ms: int, after_ms: int) -> None:
    """Kafka's LogValidator.validateTimestamp for a CreateTime topic: every record's
    timestamp within [now - message.timestamp.before.max.ms, now +
    message.timestamp.after.max.ms], else INVALID_TIMESTAMP naming each record. Called
    only when the batch header's first or max timestamp is out of range."""
    low, high = now_ms - before_ms, now_ms + after_ms
    errors = [
        (index, f"Timestamp {record.timestamp} of message with offset {record.offset} is "
                f"out of range. The timestamp should be within [{low}, {high}]")
        for index, record in enumerate(iter_records(batch))
        if record.timestamp != NO_TIMESTAMP and not low <= record.timestamp <= high
    ]
    if errors:
        raise RecordValidationError(ErrorCode.invalid_timestamp, errors)


def validate_and_assign_offsets(
    records: bytes | bytearray | memoryview,
    *,
    next_offset: int,
    leader_epoch: int,
    now_ms: int,
    max_message_bytes: int,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    log_append_time: bool = False,
    origin: AppendOrigin = AppendOrigin.CLIENT,
    log_start_offset: int = 0,
    compacted: bool = False,
    topic_partition: str = "",
    timestamp_before_max_ms: int = LONG_MAX,
    timestamp_after_max_ms: int = LONG_MAX,
) -> tuple[Chunks, LogAppendInfo]:
    """Validate a leader append and assign offsets; the result is the append as chunks
    (see :data:`Chunks`) that still refer to ``records``.

    On a CreateTime topic, a batch whose header's first or max timestamp is outside
    message.timestamp.before.max.ms / after.max.ms of ``now_ms`` has its records checked
    (:func:`check_timestamps`); an uncompressed batch is not walked otherwise, so a
    record outside the header's range goes unchecked where Kafka checks every record.

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
                count, max_inflated_bytes=max_inflated_bytes,
                compacted=compacted and not attributes & CONTROL_FLAG,
                topic_partition=topic_partition,
            )
        if not log_append_time and (
                first_ts < now_ms - timestamp_before_max_ms
                or max_ts > now_ms + timestamp_after_max_ms):
            check_timestamps(view[position:end], now_ms, timestamp_before_max_ms,
                             timestamp_after_max_ms)
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


def convert_compression(
    chunks: Chunks, info: LogAppendInfo, codec: int, level: int | None = None
) -> tuple[Chunks, LogAppendInfo]:
    """Recompress the batches whose codec is not ``codec`` (a topic whose
    compression.type is not ``producer``), at the topic's compression.<codec>.level;
    offsets and producer fields are kept."""
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
            converted = recompress_batch(batch, codec, level)
        headers.append(read_batch_header(converted))
        out += converted
    view.release()
    info.batches = headers
    info.valid_bytes = len(out)
    return [out], info


__all__ = [
    "AppendOrigin",
    "LogAppendInfo",
    "RecordValidationError",
    "convert_compression",
    "scan_records",
    "validate_and_assign_offsets",
    "validate_batches",
    "validate_records",
    "walk_records",
]
