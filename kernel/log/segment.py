"""One log segment: ``<20-digit base offset>.log`` with its ``.index`` and ``.timeindex``
(and ``.txnindex``, the aborted transactions: :mod:`kernel.log.txn_index`).

Appends write the already validated batches with one ``pwrite`` and add an index entry
every ``index.interval.bytes``. Reads translate an offset to a file position through the
sparse index and then walk batch *headers* only, and return a byte range read with
``pread``: records are never decoded on the fetch path. Files are opened lazily, so a
clean start reads no segment data at all, and indexes are created on first use (Kafka's
LazyIndex). An inactive segment's files are closed again once its log keeps more than a
few open (``LocalLog._files_opened``), and any segment's, the active one's too, once the
broker's budget of open segments is spent (:mod:`kernel.log.open_segments`): an idle
partition holds no open file, and open files grow with neither partitions nor segments.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from kernel.libc import fallocate_keep_size, pwritev_all
from kernel.log.checkpoint import fsync_path
from kernel.log.file_records import FileRecords, LogFile, whole_batches_end
from kernel.log.index import (
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
    TimestampOffset,
)
from kernel.log.offset_metadata import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset
from kernel.log.open_segments import OpenSegments
from kernel.log.segment_recovery import RecoveryScan, recovery_start, revalidate
from kernel.log.txn_index import TransactionIndex
from kernel.protocol.records import (
    BATCH_HEADER,
    INT32_MAX,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    Chunks,
    iter_records,
    whole_batches,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
# A segment file waiting for file.delete.delay.ms before it is removed.
DELETED_SUFFIX = ".deleted"
# The cleaner writes a segment as ``.cleaned``, renames it ``.swap`` once it is complete
# and durable, and drops the suffix after the segments it replaces are gone; a start-up
# deletes ``.cleaned`` files and completes ``.swap`` ones (Kafka's swap protocol).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

# Reads at least this large are sent from the file (FileRecords); smaller ones are read.
# Small, so that a fetch of many partitions holds little of its records in memory
# either: a response waiting for its client holds at most this much per partition.
ZERO_COPY_MIN_BYTES = 4 * 1024
SCAN_CHUNK_BYTES = 16 * 1024  # headers between two index entries fit in one pread
# Disk blocks reserved ahead of the active segment's end (see LogSegment._reserve).
PREALLOCATE_BYTES = 8 * 1024 * 1024

def segment_file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


class LogSegment:
    """Files are opened on first use; ``active`` segments keep their indexes
    preallocated to ``max_index_size`` (segment.index.bytes), others are trimmed."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        created_ms: int,
        active: bool = False,
        file_suffix: str = "",
        roll_jitter_ms: int = 0,
        preallocate_bytes: int = 0,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.created_ms = created_ms
        self.roll_jitter_ms = roll_jitter_ms  # Kafka's rollJitterMs, taken off segment.ms
        self.preallocate_bytes = preallocate_bytes  # reserved up front (preallocate)
        self._active = active
        stem = segment_file_stem(base_offset)
        self.log_path = directory / (stem + LOG_SUFFIX + file_suffix)
        self.index_path = directory / (stem + INDEX_SUFFIX + file_suffix)
        self.time_index_path = directory / (stem + TIME_INDEX_SUFFIX + file_suffix)
        self.txn_index = TransactionIndex(directory / (stem + TXN_INDEX_SUFFIX + file_suffix))
        self._fd = -1
        self._file: LogFile | None = None  # holds _fd open while fetches send from it
        self._let_go: LogFile | None = None  # closed by close_files, maybe held by a slice
        self._size: int | None = None
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._bytes_since_last_index_entry = 0
        self._max_timestamp: int | None = None  # loaded lazily from the time index
        self._offset_of_max_timestamp = base_offset
        self._rolling_based_timestamp: int | None = None
        self._closed = False
        self._reserved_to = 0  # file offset up to which disk blocks are allocated
        self._reserve_failed = False
        # Told when an inactive segment opens its files: the owner keeps only a few
        # segments' files open (set by the Log; None leaves them open until close).
        self.on_files_opened: Callable[[LogSegment], None] | None = None
        self.open_segments: OpenSegments | None = None  # the broker's budget (set by the log)
        self._fd_lock = threading.Lock()  # the loop closing _fd vs. a flush using it

    # -- construction ---------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        now_ms: int,
        file_suffix: str = "",
        roll_jitter_ms: int = 0,
        preallocate_bytes: int = 0,
    ) -> LogSegment:
        """A new, empty active segment; leftovers with the same name are replaced."""
        segment = cls(
            directory, base_offset, index_interval_bytes=index_interval_bytes,
            max_index_size=max_index_size, created_ms=now_ms, active=True,
            file_suffix=file_suffix, roll_jitter_ms=roll_jitter_ms,
            preallocate_bytes=preallocate_bytes,
        )
        for path in (segment.log_path, segment.index_path, segment.time_index_path,
                     segment.txn_index.path):
            path.unlink(missing_ok=True)
        fd = os.open(segment.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if preallocate_bytes > 0:  # the blocks stay allocated after the close
                segment._reserve(fd, 0, 0)
        finally:
            os.close(fd)
        segment._size = 0
        segment._max_timestamp = NO_TIMESTAMP
        # The log file opens, and the indexes are created, on first use as Kafka's
        # LazyIndex: the first append (should_roll asks whether they are full) or read.
        return segment

    # -- files ----------------------------------------------------------------------

    def _open(self) -> int:
        if self._fd < 0:
            if self._closed:
                raise ValueError(f"segment {self.log_path.name} is closed")
            let_go = self._let_go
            if let_go is not None and let_go.retain_if_open():
                self._file = let_go  # still open for a slice being sent: take it back
            else:
                self._file = LogFile(os.open(self.log_path, os.O_RDWR))
            self._let_go = None
            self._fd = self._file.fd
            if self._size is None:
                self._size = os.fstat(self._fd).st_size
            self._files_opened()
        return self._fd

    def _files_opened(self) -> None:
        if not self._active and self.on_files_opened is not None:
            self.on_files_opened(self)
        if self.open_segments is not None:
            self.open_segments.opened(self)

    @property
    def size(self) -> int:
        if self._size is None:
            # stat rather than open: retention sums the sizes of segments nobody reads
            self._size = os.stat(self.log_path).st_size if self._fd < 0 else os.fstat(
                self._fd
            ).st_size
        return self._size

    @property
    def is_active(self) -> bool:
        return self._active

    def _open_indexes(self, allow_rebuild: bool = True) -> None:
        prealloc = self.max_index_size if self._active else -1
        rebuild = not self.index_path.exists() or not self.time_index_path.exists()
        try:
            offset_index = OffsetIndex(self.index_path, self.base_offset, prealloc)
            try:
                time_index = TimeIndex(self.time_index_path, self.base_offset, prealloc)
            except BaseException:
                offset_index.close()
                raise
            try:
                offset_index.sanity_check(self.size)
                time_index.sanity_check()
            except CorruptIndexError:
                offset_index.delete()
                time_index.delete()
                raise
        except CorruptIndexError:
            self.index_path.unlink(missing_ok=True)
            self.time_index_path.unlink(missing_ok=True)
            offset_index = OffsetIndex(self.index_path, self.base_offset, prealloc)
            time_index = TimeIndex(self.time_index_path, self.base_offset, prealloc)
            rebuild = True
        if self._active:  # a trimmed index would be full: appends need the room back
            offset_index.resize(self.max_index_size)
            time_index.resize(self.max_index_size)
        self._offset_index = offset_index
        self._time_index = time_index
        if rebuild and allow_rebuild and self.size > 0:
            self.recover()
        self._files_opened()

    def close_files(self) -> None:
        """Close the log file and unmap the indexes of a segment nobody is using (Kafka's
        lazy indexes, closed again): the next append or read opens them. What was
        written through them stays in the page cache and a flush fsyncs the files by
        name. An active segment's indexes stay preallocated (a reopen counts their
        entries) and get the time entry a close writes; its reserved blocks go back."""
        if self.open_segments is not None:
            self.open_segments.closed(self)
        if self._closed:
            return
        offset_index, time_index = self._offset_index, self._time_index
        self._offset_index = self._time_index = None
        if self._active:
            ts = self._max_timestamp
            if time_index is not None and ts is not None and not time_index.is_full():
                time_index.maybe_append(ts, self._offset_of_max_timestamp)
            with contextlib.suppress(OSError):  # kept reserved: the close still happens
                self._release_reserved()
        for index in (offset_index, time_index):
            if index is not None:  # an active one is unmapped, not trimmed
                (index.discard if self._active else index.close)()
        with self._fd_lock:  # a flush in a worker thread duplicates it under this lock
            self._fd = -1
            file, self._file = self._file, None
        if file is not None:
            self._let_go = file
            file.release()

    @property
    def files_open(self) -> bool:
        return self._fd >= 0 or self._offset_index is not None or self._time_index is not None

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._open_indexes()
            assert self._offset_index is not None
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._open_indexes()
            assert self._time_index is not None
        return self._time_index

    # -- append ---------------------------------------------------------------------

    def append(self, chunks: Chunks, batches: Sequence[BatchHeader]) -> None:
        """Write validated batches (``chunks`` hold exactly ``batches`` back to back)."""
        if not batches:
            return
        last_offset = batches[-1].last_offset
        if not 0 <= last_offset - self.base_offset <= INT32_MAX:
            raise ValueError(
                f"offset {last_offset} does not fit segment {self.log_path.name}"
            )
        fd = self._open()
        if self.open_segments is not None:
            self.open_segments.touch(self)
        position = self.size
        if position == 0:
            self._rolling_based_timestamp = max(b.max_timestamp for b in batches)
        end = position + sum(memoryview(c).nbytes for c in chunks)
        if end > self._reserved_to:
            self._reserve(fd, position, end)
        pwritev_all(fd, chunks, position)
        offset_index = self.offset_index
        time_index = self.time_index
        max_ts = self.max_timestamp_so_far
        interval = self.index_interval_bytes
        since = self._bytes_since_last_index_entry
        for batch in batches:
            if batch.max_timestamp > max_ts:
                max_ts = batch.max_timestamp
                self._max_timestamp = max_ts
                self._offset_of_max_timestamp = batch.last_offset
            if since > interval:
                # a full index only makes lookups scan further; the log rolls on it
                if not offset_index.is_full():
                    offset_index.append(batch.last_offset, position)
                if not time_index.is_full():
                    time_index.maybe_append(max_ts, self._offset_of_max_timestamp)
                since = 0
            size = batch.batch_length + LOG_OVERHEAD
            position += size
            since += size
        self._bytes_since_last_index_entry = since
        self._size = position

    def _reserve(self, fd: int, position: int, end: int) -> None:
        """Allocate disk blocks a few MB past ``end`` (or preallocate_bytes) keeping the
        file size (FALLOC_FL_KEEP_SIZE), so readers and recovery see only what was written.
        Writing into allocated blocks skips the filesystem's per-page block allocation:
        about a third of the cost of a write to the page cache on ext4. Released when
        the segment stops being active."""
        if self._reserve_failed:
            return
        start = max(self._reserved_to, position)
        target = max(end + PREALLOCATE_BYTES, self.preallocate_bytes)
        if not fallocate_keep_size(fd, start, target - start):
            self._reserve_failed = True  # e.g. a filesystem without fallocate: write anyway
            return
        self._reserved_to = target

    def _release_reserved(self) -> None:
        """Give back the blocks past the end (ftruncate to the same size frees them)."""
        if self._reserved_to > 0 and self._fd >= 0:
            os.ftruncate(self._fd, self.size)
        self._reserved_to = 0

    # -- timestamps -----------------------------------------------------------------

    def _load_max_timestamp(self) -> None:
        last = self.time_index.last_entry
        if self._max_timestamp is None:
            self._max_timestamp = last.timestamp
            self._offset_of_max_timestamp = last.offset

    @property
    def max_timestamp_so_far(self) -> int:
        if self._max_timestamp is None:
            self._load_max_timestamp()
            assert self._max_timestamp is not None
        return self._max_timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        if self._max_timestamp is None:
            self._load_max_timestamp()
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What retention.ms compares: the largest record timestamp, else the file's
        modification time (batches without timestamps)."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        try:
            return self.log_path.stat().st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return 0

    @property
    def first_batch_timestamp(self) -> int:
        """The first batch's max timestamp (max.compaction.lag.ms measures from it)."""
        return self._first_batch_timestamp()

    def _first_batch_timestamp(self) -> int:
        if self._rolling_based_timestamp is None:
            header = self._read_header(0) if self.size >= RECORD_BATCH_OVERHEAD else None
            self._rolling_based_timestamp = (
                header.max_timestamp if header is not None else NO_TIMESTAMP
            )
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """segment.ms age: from the first batch's timestamp when it has one (so replicas
        roll at the same records), else from when this segment object was created."""
        first = self._first_batch_timestamp()
        if first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(
        self,
        *,
        max_segment_bytes: int,
        max_segment_ms: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        messages_size: int,
        now_ms: int,
    ) -> bool:
        size = self.size
        if size > max_segment_bytes - messages_size:
            return True
        if size > 0 and self.time_waited_for_roll(now_ms, max_timestamp_in_messages) > (
            max_segment_ms - self.roll_jitter_ms
        ):
            return True
        if self.offset_index.is_full() or self.time_index.is_full():
            return True
        return not 0 <= max_offset_in_messages - self.base_offset <= INT32_MAX

    # -- reads ----------------------------------------------------------------------

    def _read_header(self, position: int) -> BatchHeader | None:
        data = os.pread(self._open(), RECORD_BATCH_OVERHEAD, position)
        if len(data) < RECORD_BATCH_OVERHEAD:
            return None
        return BatchHeader._make(BATCH_HEADER.unpack_from(data))

    def scan_headers(
        self, position: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``position``: headers are read in
        chunks, the records are skipped."""
        limit = self.size if end is None else end
        chunk = b""
        chunk_start = position
        unpack = BATCH_HEADER.unpack_from
        while position + RECORD_BATCH_OVERHEAD <= limit:
            rel = position - chunk_start
            if rel + RECORD_BATCH_OVERHEAD > len(chunk):
                # opened again: between two yields the budget may have closed it
                chunk = os.pread(self._open(), SCAN_CHUNK_BYTES, position)
                chunk_start = position
                rel = 0
                if len(chunk) < RECORD_BATCH_OVERHEAD:
                    return
            header = BatchHeader._make(unpack(chunk, rel))
            if header.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
                return  # not a batch: recovery deals with it, readers stop here
            yield position, header
            position += header.batch_length + LOG_OVERHEAD

    def translate_offset(
        self, offset: int, starting_position: int = 0
    ) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset >= ``offset``."""
        mapping = self.offset_index.lookup(offset)
        for position, header in self.scan_headers(max(mapping.position, starting_position)):
            if header.base_offset + header.last_offset_delta >= offset:
                return position, header
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_batch: bool = False,
        zero_copy: bool = False,
    ) -> FetchDataInfo | None:
        """Bytes from the batch holding ``start_offset``, at most ``max_size`` (or the
        whole first batch with ``min_one_batch``) and never past ``max_position``.
        None when the segment has nothing at or after ``start_offset``. With
        ``zero_copy`` a read of ``ZERO_COPY_MIN_BYTES`` or more is a FileRecords slice of
        the file, not its bytes (a fetch sends it with sendfile)."""
        if self.open_segments is not None:
            self.open_segments.touch(self)
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, header = found
        metadata = LogOffsetMetadata(start_offset, self.base_offset, position)
        batch_size = header.batch_length + LOG_OVERHEAD
        adjusted = max(max_size, batch_size) if min_one_batch else max_size
        limit = self.size if max_position is None else max_position
        fetch_size = min(limit - position, adjusted)
        if fetch_size <= 0:
            return FetchDataInfo(metadata, b"")
        if zero_copy and adjusted < batch_size:
            # The fetch sends nothing of a batch cut by its limits (KIP-74): not read.
            return FetchDataInfo(metadata, b"", first_entry_incomplete=True)
        if zero_copy and fetch_size >= ZERO_COPY_MIN_BYTES:
            fd = self._open()
            end, next_offset = whole_batches_end(fd, self.offset_index, position,
                                                 position + fetch_size)
            if end - position >= ZERO_COPY_MIN_BYTES:
                assert self._file is not None
                records = FileRecords(self._file, position, end - position, next_offset,
                                      next_offset - header.base_offset)
                return FetchDataInfo(metadata, records, records_count=records.records_count)
            fetch_size = end - position  # small once cut to whole batches: read it
        data = os.pread(self._open(), fetch_size, position)
        if adjusted < batch_size:
            return FetchDataInfo(metadata, data, first_entry_incomplete=True)
        whole, count = whole_batches(data)
        # Kafka sends the part of the last batch that fits too, and clients drop it;
        # not sending it saves them reading and fetching those bytes twice.
        return FetchDataInfo(metadata, data if whole == len(data) else memoryview(data)[:whole],
                             records_count=count)

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        return os.pread(self._open(), header.batch_length + LOG_OVERHEAD, position)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """First record with timestamp >= ``timestamp`` and offset >= ``starting_offset``;
        only the one batch that holds it is decoded."""
        entry: TimestampOffset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for pos, header in self.scan_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            for record in iter_records(self.read_batch(pos, header)):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    epoch = header.partition_leader_epoch
                    return TimestampAndOffset(
                        record.timestamp, record.offset, epoch if epoch >= 0 else None
                    )
        return None

    def find_max_timestamp_record(self) -> TimestampAndOffset | None:
        """The first record carrying this segment's max timestamp (ListOffsets -3); in a
        segment whose records have no timestamps, its first record (max -1)."""
        max_ts = self.max_timestamp_so_far
        position = (self.offset_index.lookup(self.offset_of_max_timestamp_so_far).position
                    if max_ts >= 0 else 0)
        for scan_from in (position, 0):
            for pos, header in self.scan_headers(scan_from):
                if header.max_timestamp != max_ts:
                    continue
                for record in iter_records(self.read_batch(pos, header)):
                    if record.timestamp == max_ts:
                        epoch = header.partition_leader_epoch
                        return TimestampAndOffset(
                            max_ts, record.offset, epoch if epoch >= 0 else None
                        )
        return None

    def read_next_offset(self) -> int:
        """Offset after the last batch: scans only from the last index entry."""
        next_offset = self.base_offset
        if self.size == 0:
            return next_offset  # an empty segment needs no index
        for _, header in self.scan_headers(self.offset_index.last_entry.position):
            next_offset = header.base_offset + header.last_offset_delta + 1
        return next_offset

    # -- recovery -------------------------------------------------------------------

    def recover(
        self,
        on_batch: Callable[[BatchHeader], None] | None = None,
        start_offset: int | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> int:
        """Re-validate batches (framing, magic, CRC, increasing offsets), rebuild the
        indexes over them and truncate at the first invalid or partial batch. With
        ``start_offset`` (the recovery point) only the batches from the one just below
        it are checked. ``on_progress`` is told the bytes re-validated since its last
        call, at each chunk read (not per batch: this loop is the recovery's cost).
        Returns the number of bytes truncated."""
        fd = self._open()
        file_size = os.fstat(fd).st_size
        if file_size == 0 and self._offset_index is None and self._time_index is None:
            # Nothing to index: stale index files go, and new ones are created on first
            # use, so an idle partition recovered after a crash holds no index either.
            self.index_path.unlink(missing_ok=True)
            self.time_index_path.unlink(missing_ok=True)
            self.txn_index.reset()
            self._size = 0
            self._bytes_since_last_index_entry = 0
            self._max_timestamp = NO_TIMESTAMP
            self._offset_of_max_timestamp = self.base_offset
            self._rolling_based_timestamp = None
            return 0
        if self._offset_index is None or self._time_index is None:
            self._open_indexes(allow_rebuild=False)
        offset_index = self.offset_index
        time_index = self.time_index
        offset_index.resize(self.max_index_size)
        time_index.resize(self.max_index_size)
        position, next_offset = 0, self.base_offset
        if start_offset is not None and start_offset > self.base_offset:
            position, next_offset = recovery_start(self, start_offset, file_size)
        self._rolling_based_timestamp = None
        # the loader's producer state replay writes the aborted transactions again
        self.txn_index.truncate_to(next_offset)
        if position == 0:
            offset_index.reset()
            time_index.reset()
            self._max_timestamp = NO_TIMESTAMP
            self._offset_of_max_timestamp = self.base_offset
        else:
            last = time_index.last_entry
            self._max_timestamp, self._offset_of_max_timestamp = last.timestamp, last.offset
        scan = RecoveryScan(
            position, next_offset, self._max_timestamp, self._offset_of_max_timestamp
        )
        revalidate(
            fd, file_size, self.base_offset, scan, offset_index, time_index,
            self.index_interval_bytes, on_batch, on_progress,
        )
        position = scan.position
        self._max_timestamp = scan.max_timestamp
        self._offset_of_max_timestamp = scan.offset_of_max_timestamp
        truncated = file_size - position
        if truncated:
            os.ftruncate(fd, position)
        self._size = position
        self._bytes_since_last_index_entry = scan.since
        if not self._active:
            self._finish_inactive()
        return truncated

    # -- truncation, lifecycle ----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove batches from the one holding ``offset`` on (follower truncation);
        returns bytes removed. The segment becomes (or stays) the active one."""
        found = self.translate_offset(offset)
        self.make_active()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if found is None:
            return 0
        position = found[0]
        old = self.size
        os.ftruncate(self._open(), position)
        self._size = position
        self._reserved_to = 0
        if position == 0:
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        last = self.time_index.last_entry
        self._max_timestamp = last.timestamp
        self._offset_of_max_timestamp = last.offset
        return old - position

    def make_active(self) -> None:
        """Preallocate the indexes again (now, or when they open): the segment takes
        appends."""
        self._active = True
        if self._offset_index is not None and self._time_index is not None:
            self._offset_index.resize(self.max_index_size)
            self._time_index.resize(self.max_index_size)

    def _finish_inactive(self) -> None:
        if self._max_timestamp is not None and self._max_timestamp >= 0:
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def on_become_inactive(self) -> None:
        """Roll: record the final max timestamp and trim the preallocated indexes."""
        self._active = False
        self._finish_inactive()
        self._release_reserved()

    def flush(self) -> None:
        """fsync data and indexes; called from a worker thread while the event loop
        appends. Files closed since they were written are fsynced by name; a segment
        deleted meanwhile has nothing left to make durable."""
        with self._fd_lock:  # a copy: the event loop may close the segment's own fd
            fd = os.dup(self._fd) if self._fd >= 0 else -1
        if fd < 0:
            fsync_path(self.log_path)
        else:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        # by name: the indexes may have been closed since they were written
        fsync_path(self.index_path)
        fsync_path(self.time_index_path)
        fsync_path(self.txn_index.path)

    def close(self) -> None:
        if self._closed:
            return
        if self._offset_index is not None and self._time_index is not None:
            was_active = self._active
            self._finish_inactive()
            if was_active:
                # the final time index entry and the trim come after the last flush; a
                # clean start trusts them, so they must be on disk
                self._offset_index.flush()
                self._time_index.flush()
        self._release_reserved()
        self._closed = True
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close()
        self._release_file()

    def delete(self) -> None:
        for path in self._discard():
            path.unlink(missing_ok=True)

    def change_file_suffixes(
        self, old: str, new: str, after_each: Callable[[Path], None] | None = None
    ) -> None:
        """Rename every file of the segment from suffix ``old`` to ``new`` (the cleaner's
        ``.cleaned`` -> ``.swap`` -> none), the log file first as Kafka does; open files
        and mappings follow the rename. ``after_each`` sees each renamed path (tests
        inject crashes there)."""

        def target(path: Path) -> Path:
            if not path.name.endswith(old):
                raise ValueError(f"{path.name} does not end with {old!r}")
            return path.with_name(path.name[: len(path.name) - len(old)] + new)

        renames: list[tuple[Path, Callable[[Path], None]]] = [
            (self.log_path, lambda p: setattr(self, "log_path", p)),
            (self.index_path, self._rename_index(lambda: self._offset_index, "index_path")),
            (self.time_index_path,
             self._rename_index(lambda: self._time_index, "time_index_path")),
            (self.txn_index.path, lambda p: setattr(self.txn_index, "path", p)),
        ]
        for path, update in renames:
            moved = target(path)
            # an index never created (nothing to index), or no aborted transaction
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, moved)
            update(moved)
            if after_each is not None:
                after_each(moved)

    def _rename_index(
        self, index: Callable[[], OffsetIndex | TimeIndex | None], attr: str
    ) -> Callable[[Path], None]:
        def update(path: Path) -> None:
            setattr(self, attr, path)
            opened = index()
            if opened is not None:
                opened.path = path
        return update

    def set_last_modified(self, ms: int) -> None:
        """Keep the original segments' modification time on a cleaned one: the delete
        horizon of legacy tombstones and retention read it."""
        seconds = ms / 1000
        os.utime(self.log_path, (seconds, seconds))

    def rename_for_deletion(self) -> list[Path]:
        """Close the segment and give its files the ``.deleted`` suffix, as Kafka does;
        the owner removes them once ``file.delete.delay.ms`` has passed (a start-up
        removes any that are left). Returns the renamed files."""
        renamed = []
        for path in self._discard():
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.replace(path, target)
            except FileNotFoundError:
                continue
            renamed.append(target)
        return renamed

    def _discard(self) -> list[Path]:
        """Close every file without writing more; the paths of the segment's files."""
        self._closed = True
        self._release_reserved()
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.discard()
        self._release_file()
        return [self.log_path, self.index_path, self.time_index_path, self.txn_index.path]

    def _release_file(self) -> None:
        """Let go of the log file: it closes once no fetch is sending from it."""
        if self.open_segments is not None:
            self.open_segments.closed(self)
        self._fd = -1
        file, self._file = self._file, None
        if file is not None:
            file.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size})"

