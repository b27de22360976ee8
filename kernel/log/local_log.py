"""Kafka's LocalLog: the segments of one partition directory ``<topic>-<partition>/``,
the log end offset and the recovery point. Rolls, appends to the active segment, reads
across segments, deletes segments, truncates and flushes; what to delete, when to roll
and which offsets a reader may see are the partition log's (:mod:`kernel.log.log`).

The segment list is an immutable tuple that is replaced on roll, deletion and
truncation: a reader binary-searches the snapshot it took, so deletes never block
reads. Everything runs on the event loop except the flush, which fsyncs from a worker
thread while appends go on; the recovery point moves only after the fsync returned, and
only if no truncation happened meanwhile.
"""

from __future__ import annotations

import shutil
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from kernel.log.checkpoint import fsync_dir
from kernel.log.log_config import LogConfig
from kernel.log.offset_metadata import FetchDataInfo, LogOffsetMetadata
from kernel.log.open_segments import OpenSegments
from kernel.log.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import BatchHeader, Chunks

# Inactive segments of one log that keep their files open after a read: a consumer
# catching up reads one old segment at a time, and reopening costs an open and a mmap.
MAX_OPEN_INACTIVE_SEGMENTS = 2

DELETE_DIR_SUFFIX = "-delete"

# Remove these ``.deleted`` files after the delay (ms); without it they go at once.
DeleteFilesLater = Callable[[list[Path], int], None]


def log_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_topic_partition(name: str) -> tuple[str, int]:
    """``<topic>-<partition>``; topics may contain dashes, so split at the last one."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


def new_segment(directory: Path, base: int, config: LogConfig, now_ms: int) -> LogSegment:
    return LogSegment.create(
        directory, base, index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes, now_ms=now_ms,
        roll_jitter_ms=config.random_segment_jitter(),
        preallocate_bytes=config.segment_bytes if config.preallocate else 0,
    )


def remove_trees(dirs: list[Path]) -> None:
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)


def unlink_all(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def storage_error(name: str, e: OSError) -> KafkaError:
    return KafkaError(ErrorCode.kafka_storage_error, f"I/O error on {name}: {e}")


class LocalLog:
    """One partition directory's segments; the partition log opens it through
    :class:`kernel.log.loader.LogLoader`.

    ``config``, ``segments`` (oldest first, the last one active), ``log_end_offset``,
    ``recovery_point``, ``last_flush_ms``, ``appended_bytes`` and ``closed`` are plain
    attributes, read by the partition log on every append and fetch where a property
    call would cost; only this class writes them.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: Sequence[LogSegment],
        *,
        log_end_offset: int,
        recovery_point: int,
        now_ms: int,
        delete_files_later: DeleteFilesLater | None = None,
        parent_needs_sync: bool = False,
        open_segments: OpenSegments | None = None,
    ) -> None:
        self.dir = directory
        self.topic, self.partition = parse_topic_partition(directory.name)
        self.config = config
        self.segments: tuple[LogSegment, ...] = ()
        self._bases: tuple[int, ...] = ()
        # Inactive segments whose files are open, oldest first (see _files_opened).
        self._open_inactive_files: dict[LogSegment, None] = {}
        self._open_segments = open_segments
        self._set_segments(tuple(segments))
        for segment in segments:
            segment.close_files()  # recovery opened them; appends and reads open them again
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.last_flush_ms = now_ms
        # Bytes appended since the log was opened: delayed fetches compare two readings
        # to know whether enough data arrived, without touching files.
        self.appended_bytes = 0
        self.closed = False
        self._delete_files_later = delete_files_later
        self._offset_metadata_cache: LogOffsetMetadata | None = None
        self._state_lock = threading.Lock()  # recovery point vs. truncation, never I/O
        self._truncations = 0
        # a new partition directory: the first flush syncs its parent
        self._parent_needs_sync = parent_needs_sync

    # -- state ----------------------------------------------------------------------

    def _set_segments(self, segments: tuple[LogSegment, ...]) -> None:
        self._bases = tuple(s.base_offset for s in segments)
        self.segments = segments
        self._offset_metadata_cache = None
        for segment in segments:
            segment.on_files_opened = self._files_opened
            segment.open_segments = self._open_segments
        open_inactive = self._open_inactive_files
        current = set(segments)
        for segment in [s for s in open_inactive if s not in current or s.is_active]:
            del open_inactive[segment]

    def _files_opened(self, segment: LogSegment) -> None:
        """An inactive segment opened its files for a read or retention: keep the last
        few open, as Kafka's lazy indexes keep what is used, and close the oldest, so
        open files do not grow with segments (nor with partitions: the broker's budget,
        :mod:`kernel.log.open_segments`, closes any segment's)."""
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
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        active = self.segments[-1]
        return LogOffsetMetadata(self.log_end_offset, active.base_offset, active.size)

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        """Index sizes apply to segments created from now on."""
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    # -- appends --------------------------------------------------------------------

    def append(self, last_offset: int, chunks: Chunks, batches: list[BatchHeader],
               size: int) -> None:
        """Write an append of ``size`` bytes, offsets assigned up to ``last_offset``, to
        the active segment (the partition log rolled it if it had to) and move the log
        end offset past it."""
        self.segments[-1].append(chunks, batches)
        self.log_end_offset = last_offset + 1
        self.appended_bytes += size

    def roll(self, expected_next_offset: int | None, now_ms: int) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset);
        returns the active segment unchanged when it is empty at that offset. The new
        segment opens its file on its first append."""
        new_offset = max(expected_next_offset or 0, self.log_end_offset)
        active = self.segments[-1]
        if active.base_offset == new_offset and active.size == 0:
            return active  # nothing to roll away from
        if new_offset <= active.base_offset:
            raise ValueError(
                f"cannot roll {self.name} at offset {new_offset}: the active segment starts "
                f"at {active.base_offset}"
            )
        active.on_become_inactive()
        active.close_files()  # the flush after the roll syncs them by name
        segment = new_segment(self.dir, new_offset, self.config, now_ms)
        self._set_segments((*self.segments, segment))
        return segment

    # -- reads ----------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset_metadata: LogOffsetMetadata | None,
        min_one_batch: bool,
        zero_copy: bool = False,
    ) -> FetchDataInfo:
        """Bytes of the batches from the one holding ``start_offset`` (in the log's
        range, below its end), up to ``max_bytes``, stopping before the position of
        ``max_offset_metadata``. Reads one segment at most, as Kafka does."""
        segments = self.segments
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        try:
            while i < len(segments):
                segment = segments[i]
                max_position: int | None = None
                if max_offset_metadata is not None:
                    if max_offset_metadata.segment_base_offset == segment.base_offset:
                        max_position = max_offset_metadata.relative_position_in_segment
                    elif max_offset_metadata.segment_base_offset < segment.base_offset:
                        break
                info = segment.read(start_offset, max_bytes, max_position, min_one_batch,
                                    zero_copy)
                if info is not None:
                    return info
                i += 1
        except OSError as e:
            raise storage_error(self.name, e) from e
        # everything at or after start_offset was deleted (compaction) or is above max
        return FetchDataInfo(self.log_end_offset_metadata, b"")

    def convert_to_offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Segment and position of the batch holding ``offset`` (e.g. the high
        watermark), cached for the last offset asked."""
        if offset >= self.log_end_offset:
            return self.log_end_offset_metadata
        cached = self._offset_metadata_cache
        if cached is not None and cached.message_offset == offset:
            return cached
        segments = self.segments
        i = max(0, bisect_right(self._bases, offset) - 1)
        for segment in segments[i:]:
            found = segment.translate_offset(offset)
            if found is not None:
                meta = LogOffsetMetadata(offset, segment.base_offset, found[0])
                self._offset_metadata_cache = meta
                return meta
        return self.log_end_offset_metadata

    # -- flush ----------------------------------------------------------------------

    def flush_bounds(self) -> tuple[int, int, int]:
        """(truncations so far, log end offset, recovery point), read together: a
        truncation changes all three."""
        with self._state_lock:
            return self._truncations, self.log_end_offset, self.recovery_point

    def flush(self, up_to: int, recovery_point: int) -> None:
        """fsync the segments holding [recovery_point, up_to), and the directories a
        new file appeared in. Safe in a worker thread while the event loop appends:
        ``up_to`` was read before the segment snapshot, so every byte below it was
        written before the fsync starts."""
        segments = self.segments
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

    def mark_flushed(self, recovery_point: int, truncations: int, now_ms: int) -> None:
        """Move the recovery point to ``recovery_point`` after its fsync, unless a
        truncation happened since :meth:`flush_bounds` was read."""
        with self._state_lock:
            if truncations == self._truncations and recovery_point > self.recovery_point:
                self.recovery_point = recovery_point
        self.last_flush_ms = now_ms

    # -- deletion -------------------------------------------------------------------

    def remove_and_delete_segments(self, doomed: Sequence[LogSegment]) -> None:
        """Drop the oldest ``len(doomed)`` segments (``doomed``, never the active one):
        readers switch to the new snapshot first, then the files go."""
        remaining = self.segments[len(doomed):]
        self._set_segments(remaining)
        self._delete_segments(doomed)

    def _delete_segments(self, doomed: Iterable[LogSegment]) -> None:
        """Segments already out of the snapshot readers use. As Kafka, their files are
        renamed at once and removed after ``file.delete.delay.ms``, in the owner's
        worker thread: unlinking a large file can take a while."""
        later = self._delete_files_later
        for segment in doomed:
            if later is None:
                segment.delete()
            else:
                later(segment.rename_for_deletion(), self.config.file_delete_delay_ms)

    # -- compaction -----------------------------------------------------------------

    def replace_segments(
        self, new: LogSegment, old: Sequence[LogSegment],
        after_step: Callable[[str], None] | None = None,
    ) -> bool:
        """Put the cleaner's ``new`` segment (complete, fsynced, named ``.cleaned``) in
        place of the consecutive segments ``old``, crash-safe as Kafka's
        replaceSegments: ``.cleaned`` -> ``.swap``, readers switch to the new list, the
        old files are renamed for deletion, the ``.swap`` suffix goes. A crash at any
        step leaves what the loader completes or undoes (see :mod:`kernel.log.loader`).
        False, and nothing changed, when ``old`` is no longer a run of the segment list
        (retention or truncation removed some meanwhile). ``after_step`` is told each
        step's name (tests inject crashes there)."""
        segments = self.segments
        try:
            first = segments.index(old[0])
        except ValueError:
            return False
        if (
            segments[first:first + len(old)] != tuple(old)
            or first + len(old) >= len(segments)  # never the active segment
            or new.base_offset != old[0].base_offset
        ):
            return False

        def step(name: str) -> Callable[[Path], None]:
            return lambda path: after_step(f"{name} {path.name}") if after_step else None

        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX, step("swap"))
        self._set_segments((*segments[:first], new, *segments[first + len(old):]))
        self._delete_segments(old)
        if after_step is not None:
            after_step("old segments deleted")
        new.change_file_suffixes(SWAP_SUFFIX, "", step("rename"))
        new.close_files()  # the cleaner thread opened them: reads open them on the loop
        return True

    # -- truncation -----------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything from ``offset`` on; ``offset`` lies in
        [first segment's base offset, log end offset)."""
        segments = self.segments
        keep = tuple(s for s in segments if s.base_offset <= offset)
        doomed = segments[len(keep):]
        with self._state_lock:
            self._truncations += 1
            self.log_end_offset = offset
            self.recovery_point = min(self.recovery_point, offset)
        self._set_segments(keep)
        self._delete_segments(doomed)
        try:
            keep[-1].truncate_to(offset)
        except OSError as e:
            raise storage_error(self.name, e) from e

    def truncate_fully_and_start_at(self, new_offset: int, now_ms: int) -> None:
        """Drop every segment and restart empty at ``new_offset``."""
        with self._state_lock:
            self._truncations += 1
            self.log_end_offset = new_offset
            self.recovery_point = new_offset
        doomed = self.segments
        segment = new_segment(self.dir, new_offset, self.config, now_ms)
        self._set_segments((segment,))
        self._delete_segments([old for old in doomed if old.base_offset != new_offset])

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """Write each index's final entry and trim, close."""
        self.closed = True
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        """Remove the whole partition directory (close first)."""
        shutil.rmtree(self.dir, ignore_errors=True)
