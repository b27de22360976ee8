"""One partition's log (Kafka's UnifiedLog): its offsets and the rules over its
segments.

It owns the log start offset, the leader epoch cache and the offsets a reader may see
(the last stable offset); it validates appends (:mod:`kernel.log.validator`) and decides
when to roll, what retention and DeleteRecords delete and what truncation keeps. The
segments, the log end offset and the recovery point are its :class:`LocalLog`'s;
opening goes through :class:`LogLoader`. It owns the partition's producer state
(:class:`ProducerStateManager`): idempotent and transactional appends are checked
against it, snapshots are taken at each roll and on close. The transactions it tracks
give the last stable offset; the aborted ones are in each segment's ``.txnindex``.
The high watermark is the replica layer's (:mod:`kernel.replica.partition`), which
tells the log when it moves.
"""

from __future__ import annotations

import contextlib
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel.log.leader_epoch import LeaderEpochFileCache
from kernel.log.loader import LogLoader, rebuild_producer_state
from kernel.log.local_log import DeleteFilesLater, LocalLog, storage_error
from kernel.log.log_config import LogConfig
from kernel.log.offset_metadata import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset
from kernel.log.open_segments import OpenSegments
from kernel.log.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    CompletedTxn,
    EndTxnMarker,
    ProducerStateManager,
    read_end_txn_marker,
)
from kernel.log.segment import LogSegment
from kernel.log.txn_index import AbortedTxn
from kernel.log.validator import (
    AppendOrigin,
    LogAppendInfo,
    convert_compression,
    validate_and_assign_offsets,
    validate_batches,
)
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import (
    NO_TIMESTAMP,
    BatchHeader,
    Chunks,
    chunks_size,
)

# ListOffsets special timestamps
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class LogCallbacks:
    """Injected by the owner (the log manager); all are called on the event loop."""

    on_segment_rolled: Callable[[Log, int], None] | None = None
    on_flush_needed: Callable[[Log], None] | None = None  # flush.messages reached
    on_log_start_offset_changed: Callable[[Log], None] | None = None
    # Remove these ``.deleted`` files after the delay (ms); without it they go at once.
    delete_files_later: DeleteFilesLater | None = None
    # Told before truncation removes everything from the offset on (the cleaner aborts).
    on_truncation: Callable[[Log, int], None] | None = None
    # The broker's budget of segments with open files (None: files stay open).
    open_segments: OpenSegments | None = None


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append does not continue the log (its first offset is below the log
    end offset); the fetcher truncates or restarts from ``first_offset``."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(ErrorCode.unknown_server_error, message)
        self.first_offset = first_offset
        self.last_offset = last_offset


def _markers(records: bytes | bytearray | memoryview,
             batches: list[BatchHeader]) -> dict[int, EndTxnMarker]:
    """The transaction markers among an append's batches, by base offset (control
    batches come from the coordinators and replication only, never Produce)."""
    view = memoryview(records)
    markers: dict[int, EndTxnMarker] = {}
    position = 0
    for header in batches:
        size = header.size
        if header.is_control:
            marker = read_end_txn_marker(view[position:position + size])
            if marker is not None:
                markers[header.base_offset] = marker
        position += size
    return markers


# ---------------------------------------------------------------------------
# the log
# ---------------------------------------------------------------------------


class Log:
    """One partition's log. Open with :meth:`Log.open`."""

    def __init__(
        self,
        local_log: LocalLog,
        *,
        log_start_offset: int,
        leader_epoch_cache: LeaderEpochFileCache,
        callbacks: LogCallbacks,
        producer_state: ProducerStateManager | None = None,
    ) -> None:
        self._local = local_log
        # the directory's identity, fixed for the log's life
        self.dir = local_log.dir
        self.topic, self.partition = local_log.topic, local_log.partition
        self._log_start_offset = log_start_offset
        self._epochs = leader_epoch_cache
        self._callbacks = callbacks
        if producer_state is None:
            producer_state = ProducerStateManager(self.dir, self.name)
            producer_state.map_end_offset = local_log.log_end_offset
        self._producer_state = producer_state
        self._flush_lock = threading.Lock()  # one flush at a time; the loop never waits

    # -- loading --------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        callbacks: LogCallbacks | None = None,
        now_ms: int | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        on_recovered: Callable[[int], None] | None = None,
    ) -> Log:
        """Load (or create) the partition directory (see :mod:`kernel.log.loader`);
        ``on_recovered`` is told the bytes recovery re-validates, a chunk at a time."""
        now = _wall_ms() if now_ms is None else now_ms
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        epochs = LeaderEpochFileCache(directory)
        producer_state = ProducerStateManager(
            directory, directory.name, producer_id_expiration_ms)
        segments, offsets = LogLoader(
            directory, config, recovery_point=recovery_point,
            log_start_offset=log_start_offset, had_clean_shutdown=had_clean_shutdown,
            leader_epoch_cache=epochs, now_ms=now, producer_state=producer_state,
            on_recovered=on_recovered,
        ).load()
        callbacks = callbacks or LogCallbacks()
        local_log = LocalLog(
            directory, config, segments, log_end_offset=offsets.log_end_offset,
            recovery_point=offsets.recovery_point, now_ms=now,
            delete_files_later=callbacks.delete_files_later, parent_needs_sync=created,
            open_segments=callbacks.open_segments,
        )
        return cls(
            local_log, log_start_offset=offsets.log_start_offset,
            leader_epoch_cache=epochs, callbacks=callbacks, producer_state=producer_state,
        )

    # -- state ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def config(self) -> LogConfig:
        return self._local.config

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._local.segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._local.log_end_offset_metadata

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self._local.unflushed_messages

    @property
    def last_flush_ms(self) -> int:
        return self._local.last_flush_ms

    @property
    def size(self) -> int:
        return self._local.size

    @property
    def appended_bytes(self) -> int:
        """Bytes appended since the log was opened: delayed fetches compare two readings
        to know whether enough data arrived, without touching files."""
        return self._local.appended_bytes

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache:
        return self._epochs

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producer_state

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop the producers idle past producer.id.expiration.ms (the log manager's
        periodic check). Returns how many went."""
        return self._producer_state.remove_expired_producers(now_ms)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's lastStableOffset: the first unstable offset (where the oldest
        transaction starts that is open, or whose marker is not yet below the high
        watermark), capped at the high watermark."""
        unstable = self._producer_state.first_unstable_offset
        if unstable is None:
            return high_watermark
        return min(max(unstable, self._log_start_offset), high_watermark)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """The replica layer moved the high watermark: transactions whose marker it
        passed are stable (READ_COMMITTED fetches may read them)."""
        self._producer_state.on_high_watermark_updated(high_watermark)

    def collect_aborted_transactions(self, start_offset: int,
                                     upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset): the
        transaction index entries from the segment holding ``start_offset`` on whose
        marker is at or after it and whose first offset is below the bound (Kafka's
        collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        segments = self._local.segments
        i = max(0, bisect_right([s.base_offset for s in segments], start_offset) - 1)
        try:
            for segment in segments[i:]:
                txns, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
                found.extend(txns)
                if complete:
                    break
        except OSError as e:
            raise storage_error(self.name, e) from e
        return found

    def _write_aborted_txn(self, txn: CompletedTxn, last_stable_offset: int) -> None:
        # the marker was just appended to the active segment
        self._local.segments[-1].txn_index.append(AbortedTxn(
            txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset))

    @property
    def closed(self) -> bool:
        return self._local.closed

    def _check_open(self) -> None:
        if self._local.closed:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"log {self.name} is closed")

    def update_config(self, config: LogConfig | Mapping[str, Any]) -> None:
        """Dynamic config change, from a LogConfig or the typed values of
        ``resolve_topic_configs``; index sizes apply to segments created from now on."""
        if not isinstance(config, LogConfig):
            config = LogConfig.from_topic_configs(config)
        self._local.update_config(config)

    # -- appends --------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        now_ms: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate, assign offsets from the log end offset, check the producer
        state and append. A client's retried batch (same producer, epoch and sequence
        range as one of the producer's last 5) is not appended: the answer carries the
        original batch's offsets and ``duplicate``.

        Raises KafkaError: CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE (see
        :func:`validator.validate_and_assign_offsets`), INVALID_PRODUCER_EPOCH,
        OUT_OF_ORDER_SEQUENCE_NUMBER (see :mod:`kernel.log.producer_state`),
        RECORD_LIST_TOO_LARGE (larger than segment.bytes), KAFKA_STORAGE_ERROR (I/O),
        NOT_LEADER_OR_FOLLOWER (log closed).
        """
        self._check_open()
        local = self._local
        config = local.config
        chunks, info = validate_and_assign_offsets(
            records, next_offset=local.log_end_offset, leader_epoch=leader_epoch,
            now_ms=now_ms, max_message_bytes=config.max_message_bytes,
            max_inflated_bytes=config.max_inflated_bytes,
            log_append_time=config.message_timestamp_type == "LogAppendTime",
            origin=origin, log_start_offset=self._log_start_offset,
            compacted=config.compact, topic_partition=self.name,
            timestamp_before_max_ms=config.message_timestamp_before_max_ms,
            timestamp_after_max_ms=config.message_timestamp_after_max_ms,
        )
        state = self._producer_state
        markers = _markers(records, info.batches) if info.has_control else None
        duplicate, updates = state.prepare_append(info.batches, origin, markers)
        if duplicate is not None:
            return self._duplicate_info(duplicate)
        if config.compression_type != "producer":
            target = config.target_compression
            if target is not None:
                chunks, info = convert_compression(
                    chunks, info, target, config.compression_level(target))
        self._append(chunks, info.batches, info.max_timestamp, now_ms)
        self._complete_append(updates)
        if leader_epoch >= 0:
            self._epochs.assign(leader_epoch, info.first_offset)
        return info

    def _duplicate_info(self, duplicate: BatchMetadata) -> LogAppendInfo:
        # As Kafka's UnifiedLog.append: the original offsets, and its timestamp as the
        # log append time.
        return LogAppendInfo(
            first_offset=duplicate.first_offset, last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp, offset_of_max_timestamp=duplicate.last_offset,
            log_append_time=duplicate.timestamp, log_start_offset=self._log_start_offset,
            records_count=0, valid_bytes=0, has_transactional=False, has_control=False,
            duplicate=True,
        )

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, now_ms: int | None = None
    ) -> LogAppendInfo:
        """Append batches whose offsets the leader assigned. A partial trailing batch
        (fetch responses may end mid-batch) is dropped; offsets may skip ahead (a
        compacted leader) but not go back: UnexpectedAppendOffsetError."""
        self._check_open()
        now = _wall_ms() if now_ms is None else now_ms
        view = memoryview(records)
        batches, valid = validate_batches(view, allow_partial_tail=True)
        if not batches:
            return LogAppendInfo(
                first_offset=-1, last_offset=-1, max_timestamp=NO_TIMESTAMP,
                offset_of_max_timestamp=-1, log_append_time=NO_TIMESTAMP,
                log_start_offset=self._log_start_offset, records_count=0, valid_bytes=0,
                has_transactional=False, has_control=False, batches=[],
            )
        first = batches[0].base_offset
        last = batches[-1].last_offset
        leo = self._local.log_end_offset
        if first < leo:
            raise UnexpectedAppendOffsetError(
                f"unexpected offset in append to {self.name}: first offset {first} is less "
                f"than the next offset {leo}; last offset in append: {last}; "
                f"log start offset = {self._log_start_offset}", first, last,
            )
        max_ts = NO_TIMESTAMP
        offset_of_max = last
        for b in batches:
            if b.max_timestamp > max_ts:
                max_ts, offset_of_max = b.max_timestamp, b.last_offset
        has_control = any(b.is_control for b in batches)
        markers = _markers(view, batches) if has_control else None
        _, updates = self._producer_state.prepare_append(
            batches, AppendOrigin.REPLICATION, markers)
        self._append([view[:valid]], batches, max_ts, now)
        self._complete_append(updates)
        for b in batches:
            if b.partition_leader_epoch >= 0:
                self._epochs.assign(b.partition_leader_epoch, b.base_offset)
        return LogAppendInfo(
            first_offset=first, last_offset=last, max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max, log_append_time=NO_TIMESTAMP,
            log_start_offset=self._log_start_offset,
            records_count=sum(b.records_count for b in batches), valid_bytes=valid,
            has_transactional=any(b.is_transactional for b in batches),
            has_control=has_control, batches=batches,
        )

    def _complete_append(self, updates: Any) -> None:
        try:
            self._producer_state.complete_append(
                updates, self._local.log_end_offset, self._write_aborted_txn)
        except OSError as e:
            raise storage_error(self.name, e) from e

    def _append(
        self,
        chunks: Chunks,
        batches: list[BatchHeader],
        max_timestamp: int,
        now_ms: int,
    ) -> None:
        size = chunks_size(chunks)
        local = self._local
        config = local.config
        if size > config.segment_bytes:
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"message batch size is {size} bytes in append to partition {self.name}, "
                f"which exceeds the maximum configured segment size of {config.segment_bytes}",
            )
        first = batches[0].base_offset
        last = batches[-1].last_offset
        try:
            if local.segments[-1].should_roll(
                max_segment_bytes=config.segment_bytes, max_segment_ms=config.segment_ms,
                max_timestamp_in_messages=max_timestamp, max_offset_in_messages=last,
                messages_size=size, now_ms=now_ms,
            ):
                self.roll(first, now_ms)
            local.append(last, chunks, batches, size)
        except OSError as e:
            raise storage_error(self.name, e) from e
        callbacks = self._callbacks
        if (
            callbacks.on_flush_needed is not None
            and local.log_end_offset - local.recovery_point >= config.flush_messages
        ):
            callbacks.on_flush_needed(self)

    def roll(
        self, expected_next_offset: int | None = None, now_ms: int | None = None
    ) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        self._check_open()
        now = _wall_ms() if now_ms is None else now_ms
        local = self._local
        active = local.segments[-1]
        segment = local.roll(expected_next_offset, now)
        if segment is not active:
            # Kafka snapshots the producer state at each new segment: loading then
            # replays at most the active segment. Not fsynced here (the event loop):
            # the flush that moves the recovery point past it does; until then a torn
            # snapshot fails its CRC at load and an older one is used.
            try:
                self._producer_state.take_snapshot(segment.base_offset, sync=False)
            except OSError as e:
                raise storage_error(self.name, e) from e
            if self._callbacks.on_segment_rolled is not None:
                self._callbacks.on_segment_rolled(self, segment.base_offset)
        return segment

    # -- reads ----------------------------------------------------------------------

    def _out_of_range(self, offset: int) -> KafkaError:
        return KafkaError(
            ErrorCode.offset_out_of_range,
            f"offset {offset} is out of range for partition {self.name}: the log holds "
            f"[{self._log_start_offset}, {self._local.log_end_offset})",
        )

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset_exclusive: int | None = None,
        min_one_batch: bool = True,
        zero_copy: bool = False,
    ) -> FetchDataInfo:
        """Bytes of the batches from the one holding ``start_offset``, up to
        ``max_bytes`` (at least one whole batch with ``min_one_batch``), stopping before
        the batch holding ``max_offset_exclusive`` (the high watermark for consumers).
        Reads one segment at most, as Kafka does. ``zero_copy``: a large read is a
        FileRecords slice of the segment file (the fetch path sends it with sendfile).

        Raises KafkaError(OFFSET_OUT_OF_RANGE) outside [log start, log end offset].
        """
        local = self._local
        leo = local.log_end_offset
        if start_offset > leo or start_offset < self._log_start_offset:
            raise self._out_of_range(start_offset)
        if start_offset == leo:
            return FetchDataInfo(local.log_end_offset_metadata, b"")
        max_meta: LogOffsetMetadata | None = None
        if max_offset_exclusive is not None and max_offset_exclusive < leo:
            # as Kafka, the metadata of an empty read has the position a delayed fetch
            # measures new data from
            if start_offset > max_offset_exclusive:
                return FetchDataInfo(local.convert_to_offset_metadata(start_offset), b"")
            max_meta = local.convert_to_offset_metadata(max_offset_exclusive)
            if start_offset == max_offset_exclusive:
                return FetchDataInfo(max_meta, b"")
        return local.read(start_offset, max_bytes, max_meta, min_one_batch, zero_copy)

    def convert_to_offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Segment and position of the batch holding ``offset`` (e.g. the high
        watermark), cached for the last offset asked."""
        return self._local.convert_to_offset_metadata(offset)

    def fetch_offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: -2 earliest, -1 latest, -3 the record with the max timestamp,
        else the first offset whose timestamp >= ``timestamp``. None when there is no
        such record (the response then carries offset -1)."""
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            earliest = self._epochs.earliest_entry
            epoch = (
                earliest.epoch
                if earliest is not None and earliest.start_offset <= self._log_start_offset
                else None
            )
            return TimestampAndOffset(NO_TIMESTAMP, self._log_start_offset, epoch)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(
                NO_TIMESTAMP, self._local.log_end_offset, self._epochs.latest_epoch
            )
        segments = self._local.segments
        try:
            if timestamp == MAX_TIMESTAMP:
                best: LogSegment | None = None
                for segment in segments:
                    if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                        best = segment
                if best is None:
                    return None
                if best.max_timestamp_so_far >= 0:
                    return best.find_max_timestamp_record()
                # No record has a timestamp: as Kafka, the first record carrying the
                # max, -1 (UnifiedLog.fetchOffsetByTimestamp).
                for segment in segments:
                    found = segment.find_max_timestamp_record()
                    if found is not None:
                        return found
                return None
            if timestamp < 0:
                return None
            for segment in segments:
                if segment.max_timestamp_so_far < timestamp:
                    continue
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found
        except OSError as e:
            raise storage_error(self.name, e) from e
        return None

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """A new leader epoch starts at ``start_offset`` (becoming leader: the log end
        offset), so OffsetForLeaderEpoch answers for it before its first append."""
        self._epochs.assign(leader_epoch, start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), (-1, -1) when unknown."""
        return self._epochs.end_offset_for(leader_epoch, self._local.log_end_offset)

    # -- flush ----------------------------------------------------------------------

    def needs_flush(self, now_ms: int) -> bool:
        """flush.messages reached, or flush.ms elapsed with unflushed data."""
        local = self._local
        unflushed = local.unflushed_messages
        if unflushed <= 0:
            return False
        config = local.config
        return (
            unflushed >= config.flush_messages
            or now_ms - local.last_flush_ms >= config.flush_ms
        )

    def flush(self, up_to_offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync the segments holding [recovery point, up_to_offset) and move the
        recovery point. Safe in a worker thread while the event loop appends: the bound
        is read before the segment snapshot, so every byte below it was written before
        the fsync starts. The leader epoch cache is synced before the recovery point
        moves past the batches that carried its entries."""
        local = self._local
        with self._flush_lock:
            truncations, leo, recovery_point = local.flush_bounds()
            up_to = leo if up_to_offset is None else min(up_to_offset, leo)
            if up_to <= recovery_point:
                return
            local.flush(up_to, recovery_point)
            self._producer_state.sync_snapshots(recovery_point, up_to)
            self._epochs.flush()
            local.mark_flushed(up_to, truncations, _wall_ms() if now_ms is None else now_ms)

    # -- deletion: log start offset and retention ---------------------------------------

    def delete_records_before(self, offset: int, high_watermark: int | None = None) -> int:
        """DeleteRecords: move the log start offset to ``offset`` (never past the high
        watermark, default the log end offset) and delete the segments entirely below
        it. Returns the new log start offset (the low watermark).

        Raises KafkaError(OFFSET_OUT_OF_RANGE) for a negative offset or one above the
        high watermark."""
        self._check_open()
        limit = self._local.log_end_offset if high_watermark is None else high_watermark
        if offset < 0 or offset > limit:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"cannot increment the log start offset of {self.name} to {offset}: "
                f"it must be in [0, high watermark {limit}]",
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._epochs.truncate_from_start(offset)
            self._delete_old_segments(
                lambda segment, following: following <= self._log_start_offset, limit
            )
            if self._callbacks.on_log_start_offset_changed is not None:
                self._callbacks.on_log_start_offset_changed(self)
        return self._log_start_offset

    def delete_retention_exceeded(
        self, now_ms: int, high_watermark: int | None = None
    ) -> int:
        """Retention: delete the oldest segments that lie below the log start offset
        or, with cleanup.policy=delete, whose largest timestamp is older than
        retention.ms or that push the log over retention.bytes. Never the active
        segment, nor a segment with offsets at or above the high watermark. Returns the
        number of segments deleted."""
        self._check_open()
        limit = self._local.log_end_offset if high_watermark is None else high_watermark
        config = self._local.config
        deleted = self._delete_old_segments(
            lambda segment, following: following <= self._log_start_offset, limit
        )
        if config.delete:
            if config.retention_bytes >= 0:
                excess = self.size - config.retention_bytes

                def over_size(segment: LogSegment, following: int) -> bool:
                    nonlocal excess
                    if excess - segment.size >= 0:
                        excess -= segment.size
                        return True
                    return False

                if excess > 0:
                    deleted += self._delete_old_segments(over_size, limit)
            if config.retention_ms >= 0:
                deleted += self._delete_old_segments(
                    lambda segment, following: (
                        now_ms - segment.largest_timestamp > config.retention_ms
                    ),
                    limit,
                )
        return deleted

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment, int], bool], upper_bound: int
    ) -> int:
        local = self._local
        segments = local.segments
        doomed: list[LogSegment] = []
        for i in range(len(segments) - 1):  # never the active segment
            following = segments[i + 1].base_offset
            if following > upper_bound or not predicate(segments[i], following):
                break
            doomed.append(segments[i])
        if not doomed:
            return 0
        local.remove_and_delete_segments(doomed)
        first = local.segments[0].base_offset
        self._producer_state.delete_snapshots_before(first)
        if first > self._log_start_offset:
            self._log_start_offset = first
            self._epochs.truncate_from_start(self._log_start_offset)
            if self._callbacks.on_log_start_offset_changed is not None:
                self._callbacks.on_log_start_offset_changed(self)
        return len(doomed)

    # -- compaction ---------------------------------------------------------------------

    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        """producer id -> (last data offset, None when its last entry is a marker;
        epoch): the batches the cleaner keeps for the producers' sequence state."""
        out: dict[int, tuple[int | None, int]] = {}
        for pid, entry in self._producer_state.producers.items():
            last = entry.batches[-1].last_offset if entry.batches else None
            out[pid] = (last, entry.producer_epoch)
        return out

    def replace_segments(
        self, new: LogSegment, old: list[LogSegment],
        after_step: Callable[[str], None] | None = None,
    ) -> bool:
        """Swap the cleaner's segment in for ``old`` (see
        :meth:`LocalLog.replace_segments`); False when the log changed meanwhile."""
        self._check_open()
        try:
            return self._local.replace_segments(new, old, after_step)
        except OSError as e:
            raise storage_error(self.name, e) from e

    # -- truncation ---------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: remove everything from ``offset`` on. Returns False
        when there was nothing to remove."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset {offset}")
        local = self._local
        if offset >= local.log_end_offset:
            # As Kafka: the epoch cache is truncated all the same. A broker that became
            # leader and appended nothing before losing leadership holds an epoch
            # starting at its log end that the new leader never had; left in place, the
            # follower would name it as its last epoch and be told to truncate for ever.
            self._epochs.truncate_from_end(local.log_end_offset)
            return False
        if offset < local.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        if self._callbacks.on_truncation is not None:
            self._callbacks.on_truncation(self, offset)
        local.truncate_to(offset)
        self._log_start_offset = min(self._log_start_offset, offset)
        self._epochs.truncate_from_end(offset)
        rebuild_producer_state(self._producer_state, local.segments, self._log_start_offset,
                               local.log_end_offset, _wall_ms())
        return True

    def truncate_fully_and_start_at(self, new_offset: int, now_ms: int | None = None) -> None:
        """Drop every segment and restart empty at ``new_offset`` (a follower that fell
        behind the leader's log start offset)."""
        self._check_open()
        now = _wall_ms() if now_ms is None else now_ms
        if self._callbacks.on_truncation is not None:
            self._callbacks.on_truncation(self, new_offset)
        self._local.truncate_fully_and_start_at(new_offset, now)
        self._log_start_offset = new_offset
        self._epochs.clear()
        self._producer_state.clear(new_offset)
        if self._callbacks.on_log_start_offset_changed is not None:
            self._callbacks.on_log_start_offset_changed(self)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self, flush: bool = True) -> None:
        """Flush (unless told not to), write each index's final entry and trim, close."""
        if self._local.closed:
            return
        if flush:
            self.flush()
            # A clean close loads from this snapshot alone; without it the next open
            # replays the batches instead.
            with contextlib.suppress(OSError):
                self._producer_state.take_snapshot(self._local.log_end_offset)
        # No flush lock: a flush still running in a worker skips what closes under it,
        # and the event loop (deleting a topic) must not wait for its fsync.
        self._local.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        self.close(flush=False)
        self._local.delete()

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._local.log_end_offset}, "
            f"segments={len(self._local.segments)})"
        )
