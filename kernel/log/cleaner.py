"""Log compaction of one log (Kafka's Cleaner): the latest record of each key is kept.

A log is a clean section (cleaned before, up to the cleaner checkpoint) followed by a
dirty one; the dirty section's cleanable part ends at the first uncleanable offset (the
active segment, the last stable offset, min.compaction.lag.ms). A clean builds a key ->
last offset map over the cleanable dirty section (bounded by the dedupe buffer: if it
fills, the clean stops where the map got), then recopies every segment from the log's
start up to there, in groups merged up to segment.bytes and the index size, keeping:

- the latest record of each key (records past the map's last offset are all kept);
- a tombstone until its batch's delete horizon (KIP-534: the first clean that keeps a
  tombstone writes ``now + delete.retention.ms`` into the batch; a later clean past it
  drops the tombstone);
- the last batch of each active producer, emptied if need be (sequence state);
- no record of an aborted transaction; a transaction marker until the transaction's
  batches are gone and its own delete horizon has passed.

Offsets keep their values: retained records are rewritten in a batch with the original
base offset, last offset delta and producer fields. Each group is written as a
``.cleaned`` segment beside the originals and swapped in (``.swap``, old files removed,
suffix dropped) by the log on its event loop: see :meth:`LocalLog.replace_segments`.

Everything here runs in a cleaner thread and reads segment files through its own file
descriptors; the log's state it needs was taken on the event loop (:class:`LogToClean`).
"""

from __future__ import annotations

import heapq
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kernel.log.offset_map import new_offset_map
from kernel.log.segment import CLEANED_SUFFIX, LogSegment
from kernel.log.txn_index import AbortedTxn, TransactionIndex
from kernel.protocol.records import (
    CONTROL_FLAG,
    DELETE_HORIZON_FLAG,
    INT32_MAX,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    ControlRecordType,
    Record,
    SimpleRecord,
    TimestampType,
    batch_records_bytes,
    build_batch,
    frame_batch,
    iter_batches,
    iter_records,
    parse_control_record,
    read_batch_header,
)

TopicPartition = tuple[str, int]

# Kafka's log.cleaner.io.buffer.load.factor: the map takes keys up to this share of slots.
DEDUPE_BUFFER_LOAD_FACTOR = 0.9


class LogCleaningAbortedError(Exception):
    """Truncation, deletion or a changed segment list aborted this log's cleaning."""


@dataclass(frozen=True, slots=True)
class LastRecord:
    """An active producer's last data offset (None: its last entry is a marker) and
    epoch (Kafka's LastRecord)."""

    last_data_offset: int | None
    producer_epoch: int


class CleanableLog(Protocol):
    """What the cleaner uses of a :class:`kernel.log.log.Log` (a Protocol keeps this
    module below it)."""

    def collect_aborted_transactions(self, start_offset: int,
                                     upper_bound_offset: int) -> list[AbortedTxn]: ...

    def replace_segments(self, new: LogSegment, old: list[LogSegment],
                         after_step: Callable[[str], None] | None = None) -> bool: ...


@dataclass(frozen=True, slots=True)
class LogToClean:
    """What a clean needs of a log, read on the event loop when it was chosen.

    ``segments`` is the segment list then (the last one active, never cleaned);
    ``first_uncleanable_offset`` is the base offset of the first segment that may not
    be cleaned."""

    topic_partition: TopicPartition
    log: CleanableLog
    segments: tuple[LogSegment, ...]
    sizes: tuple[int, ...]
    first_dirty_offset: int
    first_uncleanable_offset: int
    needs_compaction_now: bool
    last_records: dict[int, LastRecord]
    segment_bytes: int
    max_index_size: int
    index_interval_bytes: int
    delete_retention_ms: int
    min_cleanable_ratio: float

    @property
    def clean_bytes(self) -> int:
        return sum(size for s, size in zip(self.segments, self.sizes, strict=True)
                   if s.base_offset < self.first_dirty_offset
                   and self._next_base(s) <= self.first_dirty_offset)

    @property
    def cleanable_bytes(self) -> int:
        return sum(size for s, size in zip(self.segments, self.sizes, strict=True)
                   if s.base_offset < self.first_uncleanable_offset
                   and self._next_base(s) > self.first_dirty_offset)

    def _next_base(self, segment: LogSegment) -> int:
        i = self.segments.index(segment)
        return self.segments[i + 1].base_offset if i + 1 < len(self.segments) else 1 << 63

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass(slots=True)
class CleanerStats:
    """One clean's counters (Kafka's CleanerStats)."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    buffer_utilization: float = 0.0
    start_s: float = field(default_factory=time.monotonic)
    end_s: float = 0.0

    @property
    def elapsed_s(self) -> float:
        return (self.end_s or time.monotonic()) - self.start_s


class Throttler:
    """Kafka's Throttler: sleeps so the observed bytes stay below ``rate`` per second,
    measured over 300 ms periods. Shared by a broker's cleaner threads."""

    CHECK_INTERVAL_S = 0.3

    def __init__(self, bytes_per_second: float, stop: threading.Event | None = None) -> None:
        self.rate = bytes_per_second
        self._stop = stop or threading.Event()
        self._lock = threading.Lock()
        self._period_start = time.monotonic()
        self._observed = 0.0

    def maybe_throttle(self, observed: int) -> None:
        if self.rate <= 0 or self.rate == float("inf"):
            return
        sleep_s = 0.0
        with self._lock:
            self._observed += observed
            now = time.monotonic()
            elapsed = now - self._period_start
            if elapsed < self.CHECK_INTERVAL_S:
                return
            if self._observed / elapsed > self.rate:
                sleep_s = self._observed / self.rate - elapsed
            self._period_start = now + max(sleep_s, 0.0)
            self._observed = 0.0
        if sleep_s > 0:
            self._stop.wait(sleep_s)


class CleanedTransactionMetadata:
    """Transactions seen while walking a log in offset order (Kafka's
    CleanedTransactionMetadata): which batches belong to aborted transactions, and
    which markers may go."""

    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        # producer id -> [its aborted transaction, last batch offset seen of it]
        self._ongoing_aborted: dict[int, list[object]] = {}
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seq = 0
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted_transactions(self, txns: Sequence[AbortedTxn]) -> None:
        for txn in txns:
            self._seq += 1
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control_batch_read(self, header: BatchHeader,
                              batch: bytes | memoryview) -> bool:
        """True when the marker may be discarded."""
        self._consume_aborted_up_to(header.last_offset)
        record = next(iter_records(batch), None)
        if record is None:
            return True  # an empty control batch was cleaned before
        kind, _ = parse_control_record(record)
        pid = header.producer_id
        if kind == ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing[1] is not None:
                # its batches are still in the log: keep the marker and its index entry
                if self.cleaned_index is not None:
                    txn = ongoing[0]
                    assert isinstance(txn, AbortedTxn)
                    self.cleaned_index.append(txn)
                return False
            return True
        if kind == ControlRecordType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, header: BatchHeader) -> bool:
        """True when the batch belongs to an aborted transaction."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1] = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False


def delete_horizon(header: BatchHeader) -> int | None:
    return header.first_timestamp if header.attributes & DELETE_HORIZON_FLAG else None


def empty_batch(header: BatchHeader) -> bytes:
    """A batch without records keeping the producer fields and offset range (Kafka's
    DefaultRecordBatch.writeEmptyHeader): a producer's last sequence survives."""
    return frame_batch(
        b"", 0, attributes=header.attributes & (
            TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG | CONTROL_FLAG),
        base_offset=header.base_offset, last_offset_delta=header.last_offset_delta,
        base_timestamp=header.max_timestamp, max_timestamp=header.max_timestamp,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch)


def rebuild_batch(header: BatchHeader, records: Sequence[Record],
                  horizon: int | None) -> bytes:
    """The retained records in a batch with the original base offset, last offset
    delta, producer fields, codec and timestamp type (Kafka's
    buildRetainedRecordsInto)."""
    log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    return build_batch(
        [SimpleRecord(value=r.value, key=r.key, headers=r.headers, timestamp=r.timestamp,
                      offset_delta=r.offset - header.base_offset) for r in records],
        base_offset=header.base_offset, compression=header.compression,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append
        else TimestampType.CREATE_TIME,
        log_append_time=header.max_timestamp if log_append else None,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, is_transactional=header.is_transactional,
        is_control=header.is_control, partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta, delete_horizon_ms=horizon,
    )


def read_segment_batches(
    path: os.PathLike[str] | str, io_buffer_size: int,
    on_chunk: Callable[[int], None] | None = None,
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every whole batch of a segment file, read through a descriptor of our own in
    chunks of ``io_buffer_size`` (grown for a larger batch); ``on_chunk`` sees each
    chunk's size before it is walked (abort checks, throttling)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise LogCleaningAbortedError(f"{path} is gone") from None
    try:
        end = os.fstat(fd).st_size
        position = 0
        size = io_buffer_size
        while position + RECORD_BATCH_OVERHEAD <= end:
            chunk = os.pread(fd, min(size, end - position), position)
            if on_chunk is not None:
                on_chunk(len(chunk))
            view = memoryview(chunk)
            rel = 0
            for header, batch in iter_batches(view):  # whole batches; a cut one is next
                yield header, batch
                rel += len(batch)
            if rel == 0:
                if position + RECORD_BATCH_OVERHEAD > end or size >= end - position:
                    return  # a torn tail
                size = max(size * 2, read_batch_header(view, 0).batch_length + LOG_OVERHEAD)
                continue
            position += rel
            size = io_buffer_size
    finally:
        os.close(fd)


SwapSegments = Callable[[LogToClean, LogSegment, list[LogSegment]], None]


class Cleaner:
    """Cleans one log at a time; owned by one cleaner thread (its offset map is).

    :param dedupe_buffer_size: this thread's share of log.cleaner.dedupe.buffer.size.
    :param check_done: raises :class:`LogCleaningAbortedError` once the log's cleaning
        was aborted; called for every chunk read.
    :param swap: puts a cleaned segment in place of a group (on the log's event loop);
        raises :class:`LogCleaningAbortedError` if the log changed under the clean.
    """

    def __init__(
        self,
        *,
        dedupe_buffer_size: int,
        io_buffer_size: int,
        throttler: Throttler,
        check_done: Callable[[TopicPartition], None],
        swap: SwapSegments,
        time_ms: Callable[[], int],
    ) -> None:
        self.offset_map = new_offset_map(dedupe_buffer_size)
        self.io_buffer_size = io_buffer_size
        self.throttler = throttler
        self.check_done = check_done
        self.swap = swap
        self.time_ms = time_ms

    def _batches(self, ltc: LogToClean, segment: LogSegment,
                 stats_read: Callable[[int], None]) -> Iterator[tuple[BatchHeader, memoryview]]:
        tp = ltc.topic_partition

        def on_chunk(size: int) -> None:
            self.check_done(tp)
            self.throttler.maybe_throttle(size)
            stats_read(size)

        return read_segment_batches(segment.log_path, self.io_buffer_size, on_chunk)

    # -- the clean ----------------------------------------------------------------------

    def clean(self, ltc: LogToClean) -> tuple[int, CleanerStats]:
        """Clean the log; returns the next dirty offset (where the map got) and stats."""
        stats = CleanerStats()
        now = self.time_ms()
        self.build_offset_map(ltc, ltc.first_dirty_offset, ltc.first_uncleanable_offset,
                              stats)
        end_offset = self.offset_map.latest_offset + 1
        if end_offset <= ltc.first_dirty_offset:
            raise ValueError(
                f"log.cleaner.dedupe.buffer.size holds {self.offset_map.slots} keys: too "
                f"few for one batch of {ltc.topic_partition[0]}-{ltc.topic_partition[1]}")
        txns = CleanedTransactionMetadata()
        segments = [s for s in ltc.segments[:-1] if s.base_offset < end_offset]
        for group in self.group_segments_by_size(ltc, segments):
            self.clean_segments(ltc, group, txns, now, stats)
        stats.buffer_utilization = self.offset_map.size / self.offset_map.slots
        stats.end_s = time.monotonic()
        return end_offset, stats

    def build_offset_map(self, ltc: LogToClean, start: int, end: int,
                         stats: CleanerStats) -> None:
        """key -> last offset over the dirty segments in [start, end); stops where the
        map is full (its latest offset then says how far it got)."""
        offset_map = self.offset_map
        offset_map.clear()
        segments = ltc.segments
        dirty = [
            (s, segments[i + 1].base_offset)
            for i, s in enumerate(segments[:-1])
            if s.base_offset < end and segments[i + 1].base_offset > start
        ]
        txns = CleanedTransactionMetadata()
        txns.add_aborted_transactions(ltc.log.collect_aborted_transactions(
            start, end))
        max_keys = int(offset_map.slots * DEDUPE_BUFFER_LOAD_FACTOR)

        def read(size: int) -> None:
            stats.map_bytes_read += size

        for segment, next_start in dirty:
            for header, batch in self._batches(ltc, segment, read):
                if header.is_control:
                    txns.on_control_batch_read(header, batch)
                    stats.map_messages_read += 1
                elif txns.on_batch_read(header):
                    stats.map_messages_read += header.records_count
                else:
                    walked, full = offset_map.put_records(
                        batch_records_bytes(header, batch), header.records_count,
                        header.base_offset, start, max_keys)
                    stats.map_messages_read += walked
                    if full:
                        return
                if header.last_offset >= start:
                    offset_map.latest_offset = header.last_offset
            # offsets compacted away at the end of a segment belong to it
            offset_map.latest_offset = min(next_start, end) - 1

    def group_segments_by_size(self, ltc: LogToClean,
                               segments: Sequence[LogSegment]) -> list[list[LogSegment]]:
        """Consecutive segments merged while the log stays within segment.bytes, each
        index within segment.index.bytes and the offsets within a segment's range
        (Kafka's groupSegmentsBySize)."""
        sizes = dict(zip((s.base_offset for s in ltc.segments), ltc.sizes, strict=True))
        bases = [s.base_offset for s in ltc.segments]

        def index_sizes(segment: LogSegment) -> tuple[int, int]:
            return (_file_size(segment.index_path), _file_size(segment.time_index_path))

        def last_offset(segment: LogSegment) -> int:
            i = bases.index(segment.base_offset)
            return min(bases[i + 1], ltc.first_uncleanable_offset) - 1

        groups: list[list[LogSegment]] = []
        i = 0
        while i < len(segments):
            group = [segments[i]]
            log_size = sizes[segments[i].base_offset]
            index_size, time_index_size = index_sizes(segments[i])
            i += 1
            while i < len(segments):
                nxt = segments[i]
                nxt_size = sizes[nxt.base_offset]
                nxt_index, nxt_time_index = index_sizes(nxt)
                if not (
                    log_size + nxt_size <= ltc.segment_bytes
                    and index_size + nxt_index <= ltc.max_index_size
                    and time_index_size + nxt_time_index <= ltc.max_index_size
                    and (nxt_size == 0
                         or last_offset(nxt) - group[0].base_offset <= INT32_MAX)
                ):
                    break
                group.append(nxt)
                log_size += nxt_size
                index_size += nxt_index
                time_index_size += nxt_time_index
                i += 1
            groups.append(group)
        return groups

    def clean_segments(self, ltc: LogToClean, group: list[LogSegment],
                       txns: CleanedTransactionMetadata, now: int,
                       stats: CleanerStats) -> None:
        """Recopy ``group`` into one ``.cleaned`` segment and have it swapped in."""
        first = group[0]
        cleaned = LogSegment.create(
            first.directory, first.base_offset, index_interval_bytes=ltc.index_interval_bytes,
            max_index_size=ltc.max_index_size, now_ms=now, file_suffix=CLEANED_SUFFIX,
        )
        txns.cleaned_index = cleaned.txn_index
        bases = [s.base_offset for s in ltc.segments]
        swapped = False
        try:
            for segment in group:
                i = bases.index(segment.base_offset)
                txns.add_aborted_transactions(
                    ltc.log.collect_aborted_transactions(
                        segment.base_offset, bases[i + 1]))
                self.clean_into(ltc, segment, cleaned, txns, now, stats)
            cleaned.on_become_inactive()
            cleaned.flush()  # durable before it may replace anything
            cleaned.set_last_modified(group[-1].last_modified_ms)
            self.swap(ltc, cleaned, group)
            swapped = True
        finally:
            if not swapped:
                cleaned.delete()

    def clean_into(self, ltc: LogToClean, source: LogSegment, dest: LogSegment,
                   txns: CleanedTransactionMetadata, now: int, stats: CleanerStats) -> None:
        """Copy what ``source`` keeps into ``dest`` (Kafka's cleanInto with its
        RecordFilter and MemoryRecords.filterTo)."""
        last_records = ltc.last_records
        retention_ms = ltc.delete_retention_ms
        out: list[bytes | memoryview] = []
        out_headers: list[BatchHeader] = []
        out_size = 0

        def read(size: int) -> None:
            stats.bytes_read += size

        def write_out() -> None:
            nonlocal out_size
            if out:
                dest.append(out, out_headers)
                self.throttler.maybe_throttle(out_size)
                stats.bytes_written += out_size
                out.clear()
                out_headers.clear()
                out_size = 0

        for header, batch in self._batches(ltc, source, read):
            if header.is_control:
                can_discard = txns.on_control_batch_read(header, batch)
                horizon = delete_horizon(header)
                discard_records = can_discard and horizon is not None and horizon <= now
            else:
                can_discard = txns.on_batch_read(header)
                discard_records = can_discard
            last = last_records.get(header.producer_id) if header.producer_id >= 0 else None
            last_of_producer = last is not None and (
                header.last_offset == last.last_data_offset
                if last.last_data_offset is not None
                else header.is_control and header.producer_epoch == last.producer_epoch
            )
            if discard_records and not last_of_producer:
                continue  # BatchRetention.DELETE
            stats.messages_read += header.records_count
            kept: bytes | memoryview | None
            if header.is_control:
                kept = self._retain_control(header, batch, discard_records, can_discard,
                                            now + retention_ms)
                stats.messages_written += header.records_count if kept is not None else 0
            elif discard_records:
                kept = None
            else:
                kept = self._retain(header, batch, now, retention_ms, stats)
            if kept is None:
                if not last_of_producer:
                    continue
                kept = empty_batch(header)  # BatchRetention.RETAIN_EMPTY
            out.append(kept)
            out_headers.append(read_batch_header(kept))
            out_size += len(kept)
            if out_size >= self.io_buffer_size:
                write_out()
        write_out()

    def _retain(self, header: BatchHeader, batch: memoryview, now: int, retention_ms: int,
                stats: CleanerStats) -> bytes | memoryview | None:
        """What a data batch keeps (Kafka's shouldRetainRecord over its records): the
        batch itself when every record stays, a rebuilt batch of the kept ones, or None.
        A batch that keeps a tombstone gets its delete horizon the first time (KIP-534)."""
        horizon = delete_horizon(header)
        kept, invalid, tombstones, body, base, max_ts = self.offset_map.retain_records(
            batch_records_bytes(header, batch), header.records_count, header.base_offset,
            header.first_timestamp, horizon is None or now < horizon, horizon,
            now + retention_ms)
        if tombstones and horizon is None:
            horizon = base  # stamped now (rebuilt): the kept records' deltas are from it
        stats.invalid_messages += invalid
        stats.messages_written += kept
        if not kept:
            return None
        if body is None:
            return batch
        log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
        attributes = header.attributes | (DELETE_HORIZON_FLAG if horizon is not None else 0)
        return frame_batch(
            body, kept, attributes=attributes, base_offset=header.base_offset,
            last_offset_delta=header.last_offset_delta, base_timestamp=base,
            max_timestamp=header.max_timestamp if log_append else max_ts,
            producer_id=header.producer_id, producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch)

    @staticmethod
    def _retain_control(header: BatchHeader, batch: memoryview, discard: bool,
                        can_discard: bool, new_horizon: int) -> bytes | memoryview | None:
        """A transaction marker stays until it may be discarded (then None); one whose
        transaction left no batches gets a delete horizon the first time."""
        if discard:
            return None
        if can_discard and delete_horizon(header) is None:
            return rebuild_batch(header, list(iter_records(batch)), new_horizon)
        return batch


def _file_size(path: os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
