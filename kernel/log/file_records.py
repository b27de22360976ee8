"""Fetched records that stay in the segment file until the socket takes them.

Kafka's FetchResponse refers to its records as FileRecords slices and sends them with
``sendfile`` as the socket drains, so an answer nobody reads costs the broker no copy of
its records. ``FileRecords`` is that slice here: a position and a size in one segment's
log file. The connection sends it with ``os.sendfile`` on plaintext sockets, or reads it
a bounded piece at a time for TLS (kernel/network/response_sender.py).

A segment closes its file when it is deleted, cleaned away or no longer among the few a
log keeps open. The descriptor must stay valid (and never be reused for another file)
while a slice of it waits to be sent, so the file is reference counted: ``LogFile`` is
closed when the segment and every slice have let go.
"""

from __future__ import annotations

import os
import threading

from kernel.log.index import OffsetIndex
from kernel.protocol.records import (
    BATCH_HEADER,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    read_batch_header,
)

# Header reads of the walk to the last whole batch: small batches after the last index
# entry fit in one read, and a large batch costs one read for its header.
_TAIL_READ_BYTES = 4096


class LogFile:
    """An open segment log file, closed when its last holder releases it."""

    __slots__ = ("_lock", "_refs", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._refs = 1  # the segment's own
        # The segment may let go on another thread (a flush duplicates under its lock,
        # the cleaner swaps segments) while the event loop releases a sent slice.
        self._lock = threading.Lock()

    def retain(self) -> None:
        with self._lock:
            self._refs += 1

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            os.close(self.fd)

    def retain_if_open(self) -> bool:
        """Hold the file again if a slice still keeps it open (False once closed): a
        segment that opens its file again takes it back instead of a new descriptor, so
        clients that do not read their answers cannot make it hold one per answer."""
        with self._lock:
            if self._refs == 0:
                return False
            self._refs += 1
            return True


class FileRecords:
    """``size`` bytes of whole batches at ``position`` of a segment's log file.

    Sized like bytes (``len``), so the response writers keep it by reference as they do
    large bytes. ``records_count`` is the span of offsets it holds (``next_offset`` minus
    the first batch's base offset): the batches are not walked, so offsets that
    compaction removed count too. Released once, by whoever sends it or drops it; an
    unreleased slice is released when it is collected.
    """

    __slots__ = ("_file", "next_offset", "position", "records_count", "size")

    def __init__(self, file: LogFile, position: int, size: int, next_offset: int,
                 records_count: int) -> None:
        file.retain()
        self._file: LogFile | None = file
        self.position = position
        self.size = size
        self.next_offset = next_offset
        self.records_count = records_count

    def __len__(self) -> int:
        return self.size

    @property
    def fd(self) -> int:
        if self._file is None:
            raise ValueError("file records released")
        return self._file.fd

    def read(self, offset: int = 0, size: int | None = None) -> bytes:
        """The bytes from ``offset`` within the slice (all of them by default). Fewer
        than asked means the file was truncated under the slice."""
        n = self.size - offset if size is None else min(size, self.size - offset)
        return os.pread(self.fd, n, self.position + offset)

    def release(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.release()

    def __del__(self) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FileRecords(position={self.position}, size={self.size})"


def whole_batches_end(fd: int, index: OffsetIndex, position: int, end: int) -> tuple[int, int]:
    """(end position, next offset) of the last whole batch in ``[position, end)``, where
    a batch starts at ``position``; (position, -1) when not even the first is whole.

    Walks headers only from the last index entry in the range, as Kafka's
    fetchUpperBoundOffset uses the index by position: the bytes between ``position`` and
    that entry are whole batches by construction.
    """
    entry = index.last_at_or_before_position(end - RECORD_BATCH_OVERHEAD)
    walk = position if entry is None or entry.position < position else entry.position
    whole, next_offset = position, -1
    chunk, chunk_start = b"", walk
    unpack = BATCH_HEADER.unpack_from
    while walk + RECORD_BATCH_OVERHEAD <= end:
        rel = walk - chunk_start
        if rel + RECORD_BATCH_OVERHEAD > len(chunk):
            chunk = os.pread(fd, min(_TAIL_READ_BYTES, end - walk), walk)
            chunk_start, rel = walk, 0
            if len(chunk) < RECORD_BATCH_OVERHEAD:
                break
        header = unpack(chunk, rel)
        # BATCH_HEADER: base offset, batch length, ..., last offset delta (index 6)
        batch_end = walk + header[1] + LOG_OVERHEAD
        if header[1] < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or batch_end > end:
            if walk > whole:  # the walk began at an index entry: all before it is whole
                whole, next_offset = walk, header[0]
            break
        whole, next_offset = batch_end, header[0] + header[6] + 1
        walk = batch_end
    return whole, next_offset


def next_offset_after(records: bytes | bytearray | memoryview | FileRecords) -> int | None:
    """The offset after the last whole batch of fetched records, None for no batch."""
    if isinstance(records, FileRecords):
        return records.next_offset
    view = memoryview(records)
    position, end, last = 0, view.nbytes, None
    while True:
        if position + RECORD_BATCH_OVERHEAD > end:
            return last
        header = read_batch_header(view, position)
        if position + header.size > end:
            return last
        last = header.next_offset
        position += header.size
