"""Sparse offset and time indexes of one segment, memory-mapped like Kafka's.

Why mmap rather than in-memory arrays: appends are a ``pack_into`` into the page cache
(no syscall per entry, and an append happens every ``index.interval.bytes`` of log), the
OS owns the memory of thousands of mostly-cold indexes, files keep Kafka's big-endian
format and preallocated size, and ``os.fsync`` of the file persists the dirty pages
from a worker thread (``mmap.flush`` would hold the GIL). Lookups are a short
Python binary search; Kafka's "warm section" keeps them inside the last 8 KB that the
tail readers and the appender keep in cache, and the last entry is cached in Python so
the common tail lookup touches no mapping at all.

Offset index entry: relative offset u32, position u32 (8 bytes).
Time index entry: timestamp i64, relative offset u32 (12 bytes).
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from kernel.log.checkpoint import fsync_path

WARM_SECTION_BYTES = 8192  # Kafka's warm section: touched by every tail lookup

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
# Python 3.13+ maps without keeping a duplicate descriptor (we never resize in place).
_NO_FD_COPY: dict[str, Any] = {"trackfd": False} if sys.version_info >= (3, 13) else {}


class CorruptIndexError(Exception):
    """The index file fails its sanity check; the segment rebuilds it from the log."""


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class _MmapIndex:
    """Fixed-size entries in a preallocated, memory-mapped file.

    ``max_index_size`` is the preallocated size while the segment is active; closing or
    rolling trims the file to its entries so a clean restart knows the count at once.
    An open index holds its mapping and no descriptor of its own (as Kafka closes its
    RandomAccessFile once mapped): CPython's mmap keeps a duplicate before 3.13 and
    none with ``trackfd=False``. Resizes and fsyncs open the file by name for the call.
    """

    entry_size: ClassVar[int]

    def __init__(self, path: Path, base_offset: int, max_index_size: int = -1) -> None:
        self.path = path
        self.base_offset = base_offset
        self._mmap: mmap.mmap | None = None
        self._open = True
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            fresh = length == 0
            if fresh and max_index_size > 0:
                length = self._round(max_index_size)
                os.ftruncate(fd, length)
            elif length % self.entry_size:
                raise CorruptIndexError(
                    f"index file {path.name} has size {length}, not a multiple of "
                    f"{self.entry_size}"
                )
            self._length = length
            self._map(fd, length)
        finally:
            os.close(fd)
        try:
            self._entries = 0 if fresh else self._count_entries(length // self.entry_size)
            self._max_entries = length // self.entry_size
            self._load_last_entry()
        except BaseException:
            self._close_files()
            raise

    # -- file handling ------------------------------------------------------------------

    def _round(self, size: int) -> int:
        return max(size // self.entry_size * self.entry_size, self.entry_size)

    def _map(self, fd: int, length: int) -> None:
        self._mmap = mmap.mmap(fd, length, **_NO_FD_COPY) if length > 0 else None
        if self._mmap is not None and hasattr(mmap, "MADV_RANDOM"):
            # Lookups touch a few scattered pages; readahead (8 MB on some hosts) would
            # fault in most of a preallocated index on the first access.
            self._mmap.madvise(mmap.MADV_RANDOM)

    def _count_entries(self, slots: int) -> int:
        """Entries in use: a file preallocated by a run that crashed ends in zero slots.
        Real entries are never all-zero (positions and timestamps grow from the first
        one), so binary-search the first zero slot."""
        if slots == 0 or self._mmap is None:
            return 0
        zero = bytes(self.entry_size)
        mm = self._mmap
        size = self.entry_size
        if mm[(slots - 1) * size:slots * size] != zero:
            return slots
        lo, hi = 0, slots - 1  # the answer is in [lo, hi]; slot hi is zero
        while lo < hi:
            mid = (lo + hi) // 2
            if mm[mid * size:(mid + 1) * size] == zero:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _load_last_entry(self) -> None:
        raise NotImplementedError

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def size_in_bytes(self) -> int:
        return self._entries * self.entry_size

    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    def resize(self, new_size: int) -> None:
        """Grow back to ``new_size`` (a segment that becomes active again) or shrink to
        the entries in use (trim)."""
        length = max(self._round(new_size), self._entries * self.entry_size)
        if self._entries == 0 and new_size <= 0:
            length = 0
        if length == self._length:
            return
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, length)
            self._length = length
            self._max_entries = length // self.entry_size
            self._map(fd, length)
        finally:
            os.close(fd)

    def trim_to_valid_size(self) -> None:
        self.resize(self._entries * self.entry_size)

    def truncate_to_entries(self, entries: int) -> None:
        old = self._entries
        self._entries = min(entries, old)
        if self._mmap is not None and self._entries < old:
            # zero the dropped entries so a crash before trimming cannot resurrect them
            start = self._entries * self.entry_size
            end = old * self.entry_size
            self._mmap[start:end] = bytes(end - start)
        self._load_last_entry()

    def reset(self) -> None:
        self.truncate_to_entries(0)

    def flush(self) -> None:
        """fsync the dirty pages; safe from a worker thread (releases the GIL), also
        after the event loop closed the index."""
        fsync_path(self.path)

    def _close_files(self) -> None:
        self._open = False
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    @property
    def is_open(self) -> bool:
        return self._open

    def close(self) -> None:
        if self._open:
            self.trim_to_valid_size()
        self._close_files()

    def delete(self) -> None:
        self._close_files()
        self.path.unlink(missing_ok=True)

    def discard(self) -> None:
        """Close without writing anything more: the file is about to be deleted."""
        self._close_files()

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= 0xFFFFFFFF:
            raise ValueError(
                f"offset {offset} does not fit an index with base offset {self.base_offset}"
            )
        return relative

    def _search(self, target: int, key_size: int) -> int:
        """Largest slot whose key <= target, or -1: Kafka's warm-section binary search.
        The key is the first field of an entry (u32 relative offset or i64 timestamp)."""
        n = self._entries
        if n == 0:
            return -1
        mm = self._mmap
        assert mm is not None
        size = self.entry_size
        unpack = _U32.unpack_from if key_size == 4 else _I64.unpack_from
        first_hot = max(0, n - 1 - WARM_SECTION_BYTES // size)
        if unpack(mm, first_hot * size)[0] < target:
            lo, hi = first_hot, n - 1
        else:
            if unpack(mm, 0)[0] > target:
                return -1
            lo, hi = 0, first_hot
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            k = unpack(mm, mid * size)[0]
            if k > target:
                hi = mid - 1
            elif k < target:
                lo = mid
            else:
                return mid
        return lo


class OffsetIndex(_MmapIndex):
    """offset -> file position of a batch at or before it (sparse)."""

    entry_size = 8

    def _load_last_entry(self) -> None:
        if self._entries == 0 or self._mmap is None:
            self._last_offset = self.base_offset
            self._last_position = 0
            return
        rel, pos = _OFFSET_ENTRY.unpack_from(self._mmap, (self._entries - 1) * 8)
        self._last_offset = self.base_offset + rel
        self._last_position = pos

    @property
    def last_offset(self) -> int:
        return self._last_offset

    @property
    def last_entry(self) -> OffsetPosition:
        return OffsetPosition(self._last_offset, self._last_position)

    def entry(self, slot: int) -> OffsetPosition:
        assert self._mmap is not None and 0 <= slot < self._entries
        rel, pos = _OFFSET_ENTRY.unpack_from(self._mmap, slot * 8)
        return OffsetPosition(self.base_offset + rel, pos)

    def sanity_check(self, log_size: int | None = None) -> None:
        if self._entries and self._last_offset < self.base_offset:
            raise CorruptIndexError(f"{self.path.name}: last offset below the base offset")
        if log_size is not None and self._last_position > log_size:
            raise CorruptIndexError(
                f"{self.path.name}: last entry points at byte {self._last_position} of a "
                f"{log_size}-byte log"
            )
        if self._entries >= 2:
            before = self.entry(self._entries - 2)
            if before.offset >= self._last_offset or before.position >= self._last_position:
                raise CorruptIndexError(f"{self.path.name}: last entries are not increasing")

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Largest entry with offset <= target, else (base offset, 0)."""
        if self._entries == 0 or target_offset >= self._last_offset:
            if self._entries == 0:
                return OffsetPosition(self.base_offset, 0)
            return OffsetPosition(self._last_offset, self._last_position)
        slot = self._search(target_offset - self.base_offset, 4)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def last_at_or_before_position(self, position: int) -> OffsetPosition | None:
        """The last entry whose file position <= ``position``, None when there is none:
        positions grow with offsets, so a binary search over them."""
        n = self._entries
        if n == 0 or self._mmap is None:
            return None
        if self._last_position <= position:
            return OffsetPosition(self._last_offset, self._last_position)
        mm = self._mmap
        lo, hi = 0, n - 1  # entry ``hi`` is past ``position``
        if _OFFSET_ENTRY.unpack_from(mm, 0)[1] > position:
            return None
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if _OFFSET_ENTRY.unpack_from(mm, mid * 8)[1] <= position:
                lo = mid
            else:
                hi = mid
        return self.entry(lo)

    def append(self, offset: int, position: int) -> None:
        if self._entries and offset <= self._last_offset:
            raise ValueError(
                f"attempt to append offset {offset} to position {self._entries} no larger "
                f"than the last offset appended ({self._last_offset}) to {self.path.name}"
            )
        if self.is_full():
            raise ValueError(f"attempt to append to a full index {self.path.name}")
        assert self._mmap is not None
        _OFFSET_ENTRY.pack_into(self._mmap, self._entries * 8, self._relative(offset), position)
        self._entries += 1
        self._last_offset = offset
        self._last_position = position

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose offset >= ``offset``."""
        slot = self._search(offset - self.base_offset, 4) if offset >= self.base_offset else -1
        if slot < 0:
            keep = 0
        elif self.entry(slot).offset == offset:
            keep = slot
        else:
            keep = slot + 1
        self.truncate_to_entries(keep)


class TimeIndex(_MmapIndex):
    """max timestamp so far -> offset where it was first reached (sparse)."""

    entry_size = 12

    def _load_last_entry(self) -> None:
        if self._entries == 0 or self._mmap is None:
            self._last_entry = TimestampOffset(-1, self.base_offset)
            return
        ts, rel = _TIME_ENTRY.unpack_from(self._mmap, (self._entries - 1) * 12)
        self._last_entry = TimestampOffset(ts, self.base_offset + rel)

    @property
    def last_entry(self) -> TimestampOffset:
        return self._last_entry

    def entry(self, slot: int) -> TimestampOffset:
        assert self._mmap is not None and 0 <= slot < self._entries
        ts, rel = _TIME_ENTRY.unpack_from(self._mmap, slot * 12)
        return TimestampOffset(ts, self.base_offset + rel)

    def is_full(self) -> bool:
        # One slot is kept for the final entry written when the segment rolls.
        return self._entries >= self._max_entries - 1

    def sanity_check(self) -> None:
        if self._entries:
            first = self.entry(0)
            if self._last_entry.timestamp < first.timestamp:
                raise CorruptIndexError(
                    f"{self.path.name}: last timestamp is below the first one"
                )
            if self._last_entry.offset < self.base_offset:
                raise CorruptIndexError(f"{self.path.name}: last offset below the base offset")

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= target, else (-1, base offset)."""
        if self._entries and target_timestamp >= self._last_entry.timestamp:
            return self._last_entry
        slot = self._search(target_timestamp, 8)
        if slot < 0:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(slot)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append when ``timestamp`` is a new maximum (the index only ever grows in time)."""
        if not skip_full_check and self.is_full():
            raise ValueError(f"attempt to append to a full time index {self.path.name}")
        last = self._last_entry
        if self._entries and offset < last.offset:
            raise ValueError(
                f"attempt to append offset {offset} below the last offset {last.offset} "
                f"of {self.path.name}"
            )
        if timestamp <= last.timestamp:
            return
        if self._entries >= self._max_entries:
            self.resize((self._entries + 1) * self.entry_size)
        assert self._mmap is not None
        _TIME_ENTRY.pack_into(self._mmap, self._entries * 12, timestamp, self._relative(offset))
        self._entries += 1
        self._last_entry = TimestampOffset(timestamp, offset)

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose offset >= ``offset`` (entries grow in offset too)."""
        keep = 0
        lo, hi = 0, self._entries  # first slot with offset >= target
        while lo < hi:
            mid = (lo + hi) // 2
            if self.entry(mid).offset >= offset:
                hi = mid
            else:
                lo = mid + 1
        keep = lo
        self.truncate_to_entries(keep)
