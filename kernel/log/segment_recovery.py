"""Re-validating a segment's batches after an unclean shutdown: the chunked walk that
is a recovery's whole cost. :meth:`LogSegment.recover` decides where to start and owns
the segment's state; this module only reads the file and fills the indexes."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import crc32c as _crc32c

from kernel.log.index import OffsetIndex, TimeIndex
from kernel.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    CURRENT_MAGIC,
    INT32_MAX,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
)

if TYPE_CHECKING:
    from kernel.log.segment import LogSegment

RECOVERY_CHUNK_BYTES = 1024 * 1024


@dataclass(slots=True)
class RecoveryScan:
    """Where the walk stands: ``position`` is the end of the last valid batch."""

    position: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    since: int = 0  # bytes since the last index entry


def revalidate(
    fd: int,
    file_size: int,
    base_offset: int,
    scan: RecoveryScan,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    index_interval_bytes: int,
    on_batch: Callable[[BatchHeader], None] | None,
    on_progress: Callable[[int], None] | None,
) -> None:
    """Walk batches from ``scan.position`` while their framing, magic, CRC and offsets
    hold, adding index entries every ``index_interval_bytes``; ``scan`` ends at the
    first invalid or partial batch. ``on_progress`` is told the bytes walked at each
    chunk read (not per batch: this loop is the recovery's cost)."""
    crc32c = _crc32c.crc32c
    position, next_offset = scan.position, scan.next_offset
    max_timestamp, offset_of_max = scan.max_timestamp, scan.offset_of_max_timestamp
    since = 0
    chunk = b""
    chunk_start = reported = position
    while position + RECORD_BATCH_OVERHEAD <= file_size:
        rel = position - chunk_start
        if rel + RECORD_BATCH_OVERHEAD > len(chunk):
            if on_progress is not None:
                on_progress(position - reported)
                reported = position
            chunk = os.pread(fd, RECOVERY_CHUNK_BYTES, position)
            chunk_start, rel = position, 0
        header = BatchHeader._make(BATCH_HEADER.unpack_from(chunk, rel))
        size = header.batch_length + LOG_OVERHEAD
        if (
            size < RECORD_BATCH_OVERHEAD
            or position + size > file_size
            or chunk[rel + MAGIC_OFFSET] != CURRENT_MAGIC
            or header.base_offset < next_offset
            or header.last_offset_delta < 0
            or header.last_offset - base_offset > INT32_MAX
        ):
            break
        if rel + size > len(chunk):
            if size > RECOVERY_CHUNK_BYTES:
                batch = os.pread(fd, size, position)
                view = memoryview(batch)[ATTRIBUTES_OFFSET:]
            else:
                if on_progress is not None:
                    on_progress(position - reported)
                    reported = position
                chunk = os.pread(fd, RECOVERY_CHUNK_BYTES, position)
                chunk_start, rel = position, 0
                view = memoryview(chunk)[ATTRIBUTES_OFFSET:size]
        else:
            view = memoryview(chunk)[rel + ATTRIBUTES_OFFSET:rel + size]
        if len(view) != size - ATTRIBUTES_OFFSET or crc32c(view) != header.crc:
            break
        if header.max_timestamp > max_timestamp:
            max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
        if since > index_interval_bytes:
            if not offset_index.is_full():
                offset_index.append(header.last_offset, position)
            if not time_index.is_full():
                time_index.maybe_append(max_timestamp, offset_of_max)
            since = 0
        if on_batch is not None:
            on_batch(header)
        next_offset = header.last_offset + 1
        position += size
        since += size
    if on_progress is not None:
        on_progress(position - reported)
    scan.position, scan.next_offset, scan.since = position, next_offset, since
    scan.max_timestamp, scan.offset_of_max_timestamp = max_timestamp, offset_of_max


def recovery_start(segment: LogSegment, start_offset: int, file_size: int) -> tuple[int, int]:
    """(position, offset) to re-validate from: the indexed batch just below
    ``start_offset`` (the recovery point), whose bytes and index entry were fsynced
    before the recovery point moved past them. (0, base offset) when anything about
    it looks wrong, so recovery falls back to the whole segment."""
    entry = segment.offset_index.lookup(start_offset - 1)
    position = entry.position
    if position <= 0 or position + RECORD_BATCH_OVERHEAD > file_size:
        return 0, segment.base_offset
    header = segment._read_header(position)
    if (
        header is None
        or header.magic != CURRENT_MAGIC
        or header.last_offset != entry.offset
        or header.batch_length + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD
        or position + header.batch_length + LOG_OVERHEAD > file_size
    ):
        return 0, segment.base_offset
    batch = segment.read_batch(position, header)
    if _crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]) != header.crc:
        return 0, segment.base_offset
    segment.offset_index.truncate_to(header.last_offset + 1)
    segment.time_index.truncate_to(header.last_offset + 1)
    return position, header.base_offset
