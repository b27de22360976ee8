"""One partition's log: a directory ``<topic>-<partition>/`` of segments.

The segment list is an immutable tuple that is replaced on roll, deletion and
truncation: a reader binary-searches the snapshot it took, so deletes never block
reads. Everything runs on the event loop except :meth:`Log.flush`, which fsyncs from a
worker thread while appends go on; the recovery point moves only after the fsync
returned, and only if no truncation happened meanwhile.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel.config import LONG_MAX, BrokerConfig, resolve_topic_configs
from kernel.log.checkpoint import fsync_dir
from kernel.log.leader_epoch import LeaderEpochFileCache
from kernel.log.records import (
    NO_TIMESTAMP,
    AppendOrigin,
    BatchHeader,
    Chunks,
    Compression,
    LogAppendInfo,
    chunks_size,
    convert_compression,
    validate_and_assign_offsets,
    validate_batches,
)
from kernel.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    FetchDataInfo,
    LogOffsetMetadata,
    LogSegment,
    TimestampAndOffset,
)
from kernel.protocol.errors import ErrorCode, KafkaError

# ListOffsets special timestamps
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

# Inactive segments of one log that keep their files open after a read: a consumer
# catching up reads one old segment at a time, and reopening costs an open and a mmap.
MAX_OPEN_INACTIVE_SEGMENTS = 2

DELETE_DIR_SUFFIX = "-delete"
_TEMP_SUFFIXES = (DELETED_SUFFIX, ".cleaned", ".tmp")


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def log_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_topic_partition(name: str) -> tuple[str, int]:
    """``<topic>-<partition>``; topics may contain dashes, so split at the last one."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


# ---------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The topic-level configs the log honours (Kafka names with dots as underscores);
    defaults are Kafka's. Build it from :func:`kernel.config.resolve_topic_configs`."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    file_delete_delay_ms: int = 60000
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    @classmethod
    def from_topic_configs(cls, resolved: Mapping[str, Any]) -> LogConfig:
        """From Kafka-named typed values; names the log does not use are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, value in resolved.items():
            attr = name.replace(".", "_")
            if attr in names:
                kwargs[attr] = tuple(value) if attr == "cleanup_policy" else value
        return cls(**kwargs)

    @classmethod
    def from_broker(
        cls, broker: BrokerConfig, overrides: Mapping[str, str] | None = None
    ) -> LogConfig:
        return cls.from_topic_configs(resolve_topic_configs(broker, overrides or {}))

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def target_compression(self) -> Compression | None:
        return Compression.from_config(self.compression_type)


@dataclass(frozen=True, slots=True)
class LogCallbacks:
    """Injected by the owner (the log manager); all are called on the event loop."""

    on_segment_rolled: Callable[[Log, int], None] | None = None
    on_flush_needed: Callable[[Log], None] | None = None  # flush.messages reached
    on_log_start_offset_changed: Callable[[Log], None] | None = None
    # Remove these ``.deleted`` files after the delay (ms); without it they go at once.
    delete_files_later: Callable[[list[Path], int], None] | None = None


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append does not continue the log (its first offset is below the log
    end offset); the fetcher truncates or restarts from ``first_offset``."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(ErrorCode.unknown_server_error, message)
        self.first_offset = first_offset
        self.last_offset = last_offset


def _storage_error(log: Log, e: OSError) -> KafkaError:
    return KafkaError(ErrorCode.kafka_storage_error, f"I/O error on {log.name}: {e}")


# ---------------------------------------------------------------------------
# the log
# ---------------------------------------------------------------------------


class Log:
    """One partition's log. Open with :meth:`Log.open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: tuple[LogSegment, ...],
        *,
        log_end_offset: int,
        log_start_offset: int,
        recovery_point: int,
        leader_epoch_cache: LeaderEpochFileCache,
        callbacks: LogCallbacks,
        now_ms: int,
    ) -> None:
        self.dir = directory
        self.topic, self.partition = parse_topic_partition(directory.name)
        self._config = config
        self._segments: tuple[LogSegment, ...] = ()
        self._bases: tuple[int, ...] = ()
        # Inactive segments whose files are open, oldest first (see _files_opened).
        self._open_inactive_files: dict[LogSegment, None] = {}
        self._set_segments(segments)
        for segment in segments[:-1]:
            segment.close_files()  # recovery opened them; reads open them again
        self._leo = log_end_offset
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._epochs = leader_epoch_cache
        self._callbacks = callbacks
        self._last_flush_ms = now_ms
        self._offset_metadata_cache: LogOffsetMetadata | None = None
        self._state_lock = threading.Lock()  # recovery point vs. truncation, never I/O
        self._flush_lock = threading.Lock()  # one flush at a time; the loop never waits
        self._truncations = 0
        self._appended_bytes = 0
        self._parent_needs_sync = False  # a new partition directory: first flush syncs it
        self._closed = False

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
    ) -> Log:
        """Load (or create) the partition directory. After a clean shutdown no segment
        data is read beyond the active segment's tail after its last index entry;
        otherwise the segments from ``recovery_point`` on are re-validated and the log
        is truncated at the first invalid batch."""
        now = _wall_ms() if now_ms is None else now_ms
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        bases: list[int] = []
        for entry in os.scandir(directory):
            name = entry.name
            if name.endswith(_TEMP_SUFFIXES):
                os.unlink(entry.path)
            elif name.endswith(LOG_SUFFIX):
                stem = name[: -len(LOG_SUFFIX)]
                if stem.isdigit():
                    bases.append(int(stem))
        bases.sort()
        known = {f"{b:020d}" for b in bases}
        for entry in os.scandir(directory):
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                if entry.name.endswith(suffix) and entry.name[: -len(suffix)] not in known:
                    os.unlink(entry.path)  # an index without its log is useless
        epochs = LeaderEpochFileCache(directory)
        segments = [
            LogSegment(
                directory, base, index_interval_bytes=config.index_interval_bytes,
                max_index_size=config.segment_index_bytes, created_ms=now,
                active=(i == len(bases) - 1),
            )
            for i, base in enumerate(bases)
        ]
        if not had_clean_shutdown and segments:
            segments = cls._recover_segments(segments, recovery_point, epochs)
        if not segments:
            segments = [cls._new_segment(directory, log_start_offset, config, now)]
        active = segments[-1]
        active.make_active()
        log_end_offset = active.read_next_offset()
        start = max(log_start_offset, segments[0].base_offset)
        if start > log_end_offset:
            # the checkpointed start is past the data (lost unflushed tail): start there
            for segment in segments:
                segment.delete()
            segments = [cls._new_segment(directory, start, config, now)]
            log_end_offset = start
            epochs.clear()
        recovery = log_end_offset if had_clean_shutdown else min(recovery_point, log_end_offset)
        epochs.truncate_from_end(log_end_offset)
        epochs.truncate_from_start(start)
        log = cls(
            directory, config, tuple(segments), log_end_offset=log_end_offset,
            log_start_offset=start, recovery_point=recovery, leader_epoch_cache=epochs,
            callbacks=callbacks or LogCallbacks(), now_ms=now,
        )
        log._parent_needs_sync = created
        return log

    @staticmethod
    def _new_segment(directory: Path, base: int, config: LogConfig, now_ms: int) -> LogSegment:
        return LogSegment.create(
            directory, base, index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes, now_ms=now_ms,
        )

    @staticmethod
    def _recover_segments(
        segments: list[LogSegment], recovery_point: int, epochs: LeaderEpochFileCache
    ) -> list[LogSegment]:
        """Recover the segments that may hold unflushed data: the one containing the
        recovery point and everything after. A truncated segment ends the log: the
        later segments hold garbage or data that never reached disk in order."""

        def assign(header: BatchHeader) -> None:
            if header.partition_leader_epoch >= 0:
                epochs.assign(header.partition_leader_epoch, header.base_offset)

        first = max(0, bisect_right([s.base_offset for s in segments], recovery_point) - 1)
        for i in range(first, len(segments)):
            start = recovery_point if i == first else None
            if segments[i].recover(assign, start_offset=start) > 0:
                for later in segments[i + 1:]:
                    later.delete()
                return segments[: i + 1]
        return segments

    # -- state ----------------------------------------------------------------------

    def _set_segments(self, segments: tuple[LogSegment, ...]) -> None:
        self._bases = tuple(s.base_offset for s in segments)
        self._segments = segments
        self._offset_metadata_cache = None
        for segment in segments:
            segment.on_files_opened = self._files_opened
        open_inactive = self._open_inactive_files
        current = set(segments)
        for segment in [s for s in open_inactive if s not in current or s.is_active]:
            del open_inactive[segment]

    def _files_opened(self, segment: LogSegment) -> None:
        """An inactive segment opened its files for a read or retention: keep the last
        few open, as Kafka's lazy indexes keep what is used, and close the oldest. Only
        the active segment's stay open for good, so open files grow with partitions,
        not with segments."""
        open_inactive = self._open_inactive_files
        open_inactive.pop(segment, None)
        open_inactive[segment] = None
        while len(open_inactive) > MAX_OPEN_INACTIVE_SEGMENTS:
            oldest = next(iter(open_inactive))
            del open_inactive[oldest]
            oldest.close_files()

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        active = self._segments[-1]
        return LogOffsetMetadata(self._leo, active.base_offset, active.size)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def appended_bytes(self) -> int:
        """Bytes appended since the log was opened: delayed fetches compare two readings
        to know whether enough data arrived, without touching files."""
        return self._appended_bytes

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache:
        return self._epochs

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"log {self.name} is closed")

    def update_config(self, config: LogConfig | Mapping[str, Any]) -> None:
        """Dynamic config change, from a LogConfig or the typed values of
        ``resolve_topic_configs``; index sizes apply to segments created from now on."""
        if not isinstance(config, LogConfig):
            config = LogConfig.from_topic_configs(config)
        self._config = config
        for segment in self._segments:
            segment.index_interval_bytes = config.index_interval_bytes

    # -- appends --------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        now_ms: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate, assign offsets from the log end offset and append.

        Raises KafkaError: CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE (see
        :func:`records.validate_and_assign_offsets`), RECORD_LIST_TOO_LARGE (larger than
        segment.bytes), KAFKA_STORAGE_ERROR (I/O), NOT_LEADER_OR_FOLLOWER (log closed).
        """
        self._check_open()
        config = self._config
        chunks, info = validate_and_assign_offsets(
            records, next_offset=self._leo, leader_epoch=leader_epoch, now_ms=now_ms,
            max_message_bytes=config.max_message_bytes,
            log_append_time=config.message_timestamp_type == "LogAppendTime",
            origin=origin, log_start_offset=self._log_start_offset,
            compacted=config.compact, topic_partition=self.name,
        )
        if config.compression_type != "producer":
            target = config.target_compression
            if target is not None:
                chunks, info = convert_compression(chunks, info, target)
        self._append(chunks, info.batches, info.max_timestamp, now_ms)
        if leader_epoch >= 0:
            self._epochs.assign(leader_epoch, info.first_offset)
        return info

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
        if first < self._leo:
            raise UnexpectedAppendOffsetError(
                f"unexpected offset in append to {self.name}: first offset {first} is less "
                f"than the next offset {self._leo}; last offset in append: {last}; "
                f"log start offset = {self._log_start_offset}", first, last,
            )
        max_ts = NO_TIMESTAMP
        offset_of_max = last
        for b in batches:
            if b.max_timestamp > max_ts:
                max_ts, offset_of_max = b.max_timestamp, b.last_offset
        self._append([view[:valid]], batches, max_ts, now)
        for b in batches:
            if b.partition_leader_epoch >= 0:
                self._epochs.assign(b.partition_leader_epoch, b.base_offset)
        return LogAppendInfo(
            first_offset=first, last_offset=last, max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max, log_append_time=NO_TIMESTAMP,
            log_start_offset=self._log_start_offset,
            records_count=sum(b.records_count for b in batches), valid_bytes=valid,
            has_transactional=any(b.is_transactional for b in batches),
            has_control=any(b.is_control for b in batches), batches=batches,
        )

    def _append(
        self,
        chunks: Chunks,
        batches: list[BatchHeader],
        max_timestamp: int,
        now_ms: int,
    ) -> None:
        size = chunks_size(chunks)
        config = self._config
        if size > config.segment_bytes:
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"message batch size is {size} bytes in append to partition {self.name}, "
                f"which exceeds the maximum configured segment size of {config.segment_bytes}",
            )
        first = batches[0].base_offset
        last = batches[-1].last_offset
        try:
            segment = self._segments[-1]
            if segment.should_roll(
                max_segment_bytes=config.segment_bytes, max_segment_ms=config.segment_ms,
                max_timestamp_in_messages=max_timestamp, max_offset_in_messages=last,
                messages_size=size, now_ms=now_ms,
            ):
                segment = self.roll(first, now_ms)
            segment.append(chunks, batches)
        except OSError as e:
            raise _storage_error(self, e) from e
        self._leo = last + 1
        self._appended_bytes += size
        callbacks = self._callbacks
        if (
            callbacks.on_flush_needed is not None
            and self._leo - self._recovery_point >= config.flush_messages
        ):
            callbacks.on_flush_needed(self)

    def roll(
        self, expected_next_offset: int | None = None, now_ms: int | None = None
    ) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        self._check_open()
        now = _wall_ms() if now_ms is None else now_ms
        new_offset = max(expected_next_offset or 0, self._leo)
        active = self._segments[-1]
        if active.base_offset == new_offset and active.size == 0:
            return active  # nothing to roll away from
        if new_offset <= active.base_offset:
            raise ValueError(
                f"cannot roll {self.name} at offset {new_offset}: the active segment starts "
                f"at {active.base_offset}"
            )
        active.on_become_inactive()
        active.close_files()  # the flush after the roll syncs them by name
        segment = self._new_segment(self.dir, new_offset, self._config, now)
        self._set_segments((*self._segments, segment))
        if self._callbacks.on_segment_rolled is not None:
            self._callbacks.on_segment_rolled(self, new_offset)
        return segment

    # -- reads ----------------------------------------------------------------------

    def _out_of_range(self, offset: int) -> KafkaError:
        return KafkaError(
            ErrorCode.offset_out_of_range,
            f"offset {offset} is out of range for partition {self.name}: the log holds "
            f"[{self._log_start_offset}, {self._leo})",
        )

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset_exclusive: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchDataInfo:
        """Bytes of the batches from the one holding ``start_offset``, up to
        ``max_bytes`` (at least one whole batch with ``min_one_batch``), stopping before
        the batch holding ``max_offset_exclusive`` (the high watermark for consumers).
        Reads one segment at most, as Kafka does.

        Raises KafkaError(OFFSET_OUT_OF_RANGE) outside [log start, log end offset].
        """
        leo = self._leo
        if start_offset > leo or start_offset < self._log_start_offset:
            raise self._out_of_range(start_offset)
        if start_offset == leo:
            return FetchDataInfo(self.log_end_offset_metadata, b"")
        segments = self._segments
        max_meta: LogOffsetMetadata | None = None
        if max_offset_exclusive is not None and max_offset_exclusive < leo:
            if start_offset >= max_offset_exclusive:
                return FetchDataInfo(LogOffsetMetadata(start_offset), b"")
            max_meta = self.convert_to_offset_metadata(max_offset_exclusive)
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        try:
            while i < len(segments):
                segment = segments[i]
                max_position: int | None = None
                if max_meta is not None:
                    if max_meta.segment_base_offset == segment.base_offset:
                        max_position = max_meta.relative_position_in_segment
                    elif max_meta.segment_base_offset < segment.base_offset:
                        break
                info = segment.read(start_offset, max_bytes, max_position, min_one_batch)
                if info is not None:
                    return info
                i += 1
        except OSError as e:
            raise _storage_error(self, e) from e
        # everything at or after start_offset was deleted (compaction) or is above max
        return FetchDataInfo(self.log_end_offset_metadata, b"")

    def convert_to_offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Segment and position of the batch holding ``offset`` (e.g. the high
        watermark), cached for the last offset asked."""
        if offset >= self._leo:
            return self.log_end_offset_metadata
        cached = self._offset_metadata_cache
        if cached is not None and cached.message_offset == offset:
            return cached
        segments = self._segments
        i = max(0, bisect_right(self._bases, offset) - 1)
        for segment in segments[i:]:
            found = segment.translate_offset(offset)
            if found is not None:
                meta = LogOffsetMetadata(offset, segment.base_offset, found[0])
                self._offset_metadata_cache = meta
                return meta
        return self.log_end_offset_metadata

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
            return TimestampAndOffset(NO_TIMESTAMP, self._leo, self._epochs.latest_epoch)
        segments = self._segments
        try:
            if timestamp == MAX_TIMESTAMP:
                best: LogSegment | None = None
                for segment in segments:
                    if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                        best = segment
                if best is None or best.max_timestamp_so_far < 0:
                    return None
                return best.find_max_timestamp_record()
            if timestamp < 0:
                return None
            for segment in segments:
                if segment.max_timestamp_so_far < timestamp:
                    continue
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found
        except OSError as e:
            raise _storage_error(self, e) from e
        return None

    def assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """A new leader epoch starts at ``start_offset`` (becoming leader: the log end
        offset), so OffsetForLeaderEpoch answers for it before its first append."""
        self._epochs.assign(leader_epoch, start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset), (-1, -1) when unknown."""
        return self._epochs.end_offset_for(leader_epoch, self._leo)

    # -- flush ----------------------------------------------------------------------

    def needs_flush(self, now_ms: int) -> bool:
        """flush.messages reached, or flush.ms elapsed with unflushed data."""
        unflushed = self._leo - self._recovery_point
        if unflushed <= 0:
            return False
        config = self._config
        return (
            unflushed >= config.flush_messages
            or now_ms - self._last_flush_ms >= config.flush_ms
        )

    def flush(self, up_to_offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync the segments holding [recovery point, up_to_offset) and move the
        recovery point. Safe in a worker thread while the event loop appends: the bound
        is read before the segment snapshot, so every byte below it was written before
        the fsync starts."""
        with self._flush_lock:
            with self._state_lock:  # a truncation changes all three together
                truncations = self._truncations
                leo = self._leo
                recovery_point = self._recovery_point
            up_to = leo if up_to_offset is None else min(up_to_offset, leo)
            if up_to <= recovery_point:
                return
            segments = self._segments
            new_files = False
            for i, segment in enumerate(segments):
                following = segments[i + 1].base_offset if i + 1 < len(segments) else None
                if segment.base_offset >= up_to:
                    break
                if following is not None and following <= recovery_point:
                    continue
                segment.flush()
                new_files = new_files or segment.base_offset >= recovery_point
            if new_files:
                fsync_dir(self.dir)  # a segment created since the last flush
            if self._parent_needs_sync:
                fsync_dir(self.dir.parent)
                self._parent_needs_sync = False
            self._epochs.flush()
            with self._state_lock:
                if truncations == self._truncations and up_to > self._recovery_point:
                    self._recovery_point = up_to
            self._last_flush_ms = _wall_ms() if now_ms is None else now_ms

    # -- deletion: log start offset and retention ---------------------------------------

    def delete_records_before(self, offset: int, high_watermark: int | None = None) -> int:
        """DeleteRecords: move the log start offset to ``offset`` (never past the high
        watermark, default the log end offset) and delete the segments entirely below
        it. Returns the new log start offset (the low watermark).

        Raises KafkaError(OFFSET_OUT_OF_RANGE) for a negative offset or one above the
        high watermark."""
        self._check_open()
        limit = self._leo if high_watermark is None else high_watermark
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
        limit = self._leo if high_watermark is None else high_watermark
        config = self._config
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
        segments = self._segments
        doomed: list[LogSegment] = []
        for i in range(len(segments) - 1):  # never the active segment
            following = segments[i + 1].base_offset
            if following > upper_bound or not predicate(segments[i], following):
                break
            doomed.append(segments[i])
        if not doomed:
            return 0
        remaining = segments[len(doomed):]
        self._set_segments(remaining)  # readers switch to the new snapshot first
        self._delete_segments(doomed)
        if remaining[0].base_offset > self._log_start_offset:
            self._log_start_offset = remaining[0].base_offset
            self._epochs.truncate_from_start(self._log_start_offset)
            if self._callbacks.on_log_start_offset_changed is not None:
                self._callbacks.on_log_start_offset_changed(self)
        return len(doomed)

    def _delete_segments(self, doomed: Iterable[LogSegment]) -> None:
        """Segments already out of the snapshot readers use. As Kafka, their files are
        renamed at once and removed after ``file.delete.delay.ms``, in the owner's
        worker thread: unlinking a large file can take a while."""
        later = self._callbacks.delete_files_later
        for segment in doomed:
            if later is None:
                segment.delete()
            else:
                later(segment.rename_for_deletion(), self._config.file_delete_delay_ms)

    # -- truncation ---------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: remove everything from ``offset`` on. Returns False
        when there was nothing to remove."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset {offset}")
        if offset >= self._leo:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        segments = self._segments
        keep = tuple(s for s in segments if s.base_offset <= offset)
        doomed = segments[len(keep):]
        with self._state_lock:
            self._truncations += 1
            self._leo = offset
            self._recovery_point = min(self._recovery_point, offset)
        self._set_segments(keep)
        self._delete_segments(doomed)
        try:
            keep[-1].truncate_to(offset)
        except OSError as e:
            raise _storage_error(self, e) from e
        self._log_start_offset = min(self._log_start_offset, offset)
        self._epochs.truncate_from_end(offset)
        return True

    def truncate_fully_and_start_at(self, new_offset: int, now_ms: int | None = None) -> None:
        """Drop every segment and restart empty at ``new_offset`` (a follower that fell
        behind the leader's log start offset)."""
        self._check_open()
        now = _wall_ms() if now_ms is None else now_ms
        with self._state_lock:
            self._truncations += 1
            self._leo = new_offset
            self._recovery_point = new_offset
        doomed = self._segments
        segment = self._new_segment(self.dir, new_offset, self._config, now)
        self._set_segments((segment,))
        self._delete_segments([old for old in doomed if old.base_offset != new_offset])
        self._log_start_offset = new_offset
        self._epochs.clear()
        if self._callbacks.on_log_start_offset_changed is not None:
            self._callbacks.on_log_start_offset_changed(self)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self, flush: bool = True) -> None:
        """Flush (unless told not to), write each index's final entry and trim, close."""
        if self._closed:
            return
        if flush:
            self.flush()
        # No flush lock: a flush still running in a worker skips what closes under it,
        # and the event loop (deleting a topic) must not wait for its fsync.
        self._closed = True
        for segment in self._segments:
            segment.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        self.close(flush=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._leo}, segments={len(self._segments)})"
        )
