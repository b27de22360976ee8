"""Which logs the cleaner may clean, and their log-cleaning states (Kafka's
LogCleanerManager).

A partition is in no state, ``LogCleaningInProgress`` (a cleaner thread has it),
``LogCleaningAborted`` (truncation or deletion came while it was being cleaned) or
``LogCleaningPaused(n)`` (n owners keep the cleaner away). Truncation and deletion run
on the event loop and never wait for the cleaner: they abort its run, and the run's
only commit point, the segment swap, also runs on the event loop and refuses an aborted
run. So the cleaner can never swap in segments of a log that changed under it.

Also keeps each log dir's ``cleaner-offset-checkpoint`` (topic partition -> first
dirty offset), as Kafka does. The states are read by cleaner threads and written on the
event loop, under one lock held only for dictionary updates.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernel.log.checkpoint import CheckpointError, read_offset_checkpoint, write_offset_checkpoint
from kernel.log.cleaner import LastRecord, LogCleaningAbortedError, LogToClean, TopicPartition

if TYPE_CHECKING:
    from kernel.log.log import Log

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"

IN_PROGRESS = "LogCleaningInProgress"
ABORTED = "LogCleaningAborted"


@dataclass(slots=True)
class _State:
    in_progress: bool = False
    aborted: bool = False
    paused: int = 0


class LogCleanerManager:
    """Owns the cleaning states and the cleaner checkpoints of one broker's logs.

    :param logs: the log manager's logs now (read on the event loop).
    :param high_watermark: the replica layer's high watermark of a log (None: its end).
    """

    def __init__(
        self,
        logs: Callable[[], Mapping[TopicPartition, Log]],
        *,
        high_watermark: Callable[[Log], int | None] | None = None,
        on_error: Callable[[str, Exception], None] | None = None,
    ) -> None:
        self._logs = logs
        self._high_watermark = high_watermark
        self._on_error = on_error
        self._lock = threading.Lock()
        self._states: dict[TopicPartition, _State] = {}
        self._uncleanable: set[TopicPartition] = set()
        self._checkpoint_lock = threading.Lock()  # one writer of the files at a time
        # Read on first use, not here: the log dirs are checked (and a bad one refused
        # in one line) after this is made.
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        # For metrics, read from another thread: the dirtiest-log ratio, each compacted
        # log's ratio (a new dict each run) and when a thread last looked (Kafka's
        # timeOfLastRun).
        self.dirtiest_ratio = 0.0
        self.dirty_ratios: dict[TopicPartition, float] = {}
        self.last_run_ms: int | None = None

    # -- states -----------------------------------------------------------------------

    def cleaning_state(self, tp: TopicPartition) -> str | None:
        with self._lock:
            state = self._states.get(tp)
            if state is None:
                return None
            if state.in_progress:
                return ABORTED if state.aborted else IN_PROGRESS
            return f"LogCleaningPaused({state.paused})" if state.paused else None

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        """Kafka's abortAndPauseCleaning, without the wait: a run in progress is
        aborted (its swap will be refused) and no new one starts until
        :meth:`resume_cleaning`."""
        with self._lock:
            state = self._states.setdefault(tp, _State())
            state.paused += 1
            if state.in_progress:
                state.aborted = True

    def resume_cleaning(self, tp: TopicPartition) -> None:
        with self._lock:
            state = self._states.get(tp)
            if state is None or state.paused <= 0:
                raise ValueError(f"cleaning of {tp[0]}-{tp[1]} is not paused")
            state.paused -= 1
            self._forget_if_idle(tp, state)

    def abort_cleaning(self, tp: TopicPartition, log_dir: Path | None = None) -> None:
        """The log is deleted: abort a run and forget the partition."""
        with self._lock:
            state = self._states.get(tp)
            if state is not None and state.in_progress:
                state.aborted = True
                state.paused = 0
            else:
                self._states.pop(tp, None)
            self._uncleanable.discard(tp)
        if log_dir is not None:
            self.update_checkpoint(log_dir, tp, None)

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        """Raise :class:`LogCleaningAbortedError` once the run was aborted (Kafka's
        checkDone)."""
        with self._lock:
            state = self._states.get(tp)
            if state is None or not state.in_progress or state.aborted:
                raise LogCleaningAbortedError(f"cleaning of {tp[0]}-{tp[1]} was aborted")

    def may_swap(self, tp: TopicPartition) -> bool:
        """On the event loop, the commit point: the run is still wanted."""
        with self._lock:
            state = self._states.get(tp)
            return state is not None and state.in_progress and not state.aborted

    def done_cleaning(self, tp: TopicPartition, log_dir: Path, end_offset: int | None) -> None:
        """The run ended; ``end_offset`` is the next dirty offset when it completed."""
        with self._lock:
            state = self._states.get(tp)
            if state is None or not state.in_progress:
                raise ValueError(f"{tp[0]}-{tp[1]} is not being cleaned")
            completed = not state.aborted and end_offset is not None
            state.in_progress = False
            state.aborted = False
            self._forget_if_idle(tp, state)
        if completed:
            self.update_checkpoint(log_dir, tp, end_offset)

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        """A clean failed unexpectedly: not tried again until the log is recreated
        (Kafka's uncleanable partitions)."""
        with self._lock:
            self._uncleanable.add(tp)

    def _forget_if_idle(self, tp: TopicPartition, state: _State) -> None:
        if not state.in_progress and state.paused == 0:
            self._states.pop(tp, None)

    # -- checkpoints ------------------------------------------------------------------

    def _offsets(self, log_dir: Path) -> dict[TopicPartition, int]:
        """The log dir's checkpointed first dirty offsets (call with the lock held)."""
        offsets = self._checkpoints.get(log_dir)
        if offsets is None:
            try:
                offsets = read_offset_checkpoint(log_dir / CLEANER_CHECKPOINT)
            except CheckpointError as e:
                # cleaning again from each log's start is slower, never wrong
                offsets = {}
                if self._on_error is not None:
                    self._on_error("ignoring unreadable cleaner checkpoint", e)
            self._checkpoints[log_dir] = offsets
        return offsets

    def checkpoint(self, log_dir: Path, tp: TopicPartition) -> int | None:
        with self._checkpoint_lock:
            return self._offsets(log_dir).get(tp)

    def update_checkpoint(self, log_dir: Path, tp: TopicPartition, offset: int | None) -> None:
        """Set (None: remove) a partition's first dirty offset and write the file."""
        with self._checkpoint_lock:
            offsets = self._offsets(log_dir)
            if offset is None:
                if offsets.pop(tp, None) is None:
                    return
            else:
                offsets[tp] = offset
            if log_dir.exists():
                write_offset_checkpoint(log_dir / CLEANER_CHECKPOINT, dict(offsets))

    def maybe_truncate_checkpoint(self, log_dir: Path, tp: TopicPartition, offset: int) -> None:
        """Truncation below the first dirty offset moves it back (Kafka's
        maybeTruncateCheckpoint)."""
        current = self.checkpoint(log_dir, tp)
        if current is not None and current > offset:
            self.update_checkpoint(log_dir, tp, offset)

    # -- choosing a log (event loop) ------------------------------------------------------

    def log_to_clean(self, tp: TopicPartition, log: Log, now_ms: int) -> LogToClean:
        """The log's clean and dirty sections now (Kafka's cleanableOffsets and
        LogToClean)."""
        config = log.config
        segments = log.segments
        checkpointed = self.checkpoint(log.dir.parent, tp)
        first_dirty = log.log_start_offset if checkpointed is None else checkpointed
        if first_dirty < log.log_start_offset or first_dirty > log.log_end_offset:
            first_dirty = log.log_start_offset
        hw = self._high_watermark(log) if self._high_watermark is not None else None
        uncleanable = min(log.last_stable_offset(log.log_end_offset if hw is None else hw),
                          segments[-1].base_offset)
        lag = max(config.min_compaction_lag_ms, 0)
        for i, segment in enumerate(segments[:-1]):
            if segments[i + 1].base_offset <= first_dirty:
                continue
            if lag > 0 and segment.largest_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
        uncleanable = max(first_dirty, uncleanable)
        # whole segments only: the one holding the uncleanable offset is not cleaned
        first_uncleanable = segments[-1].base_offset
        for i, segment in enumerate(segments[:-1]):
            if segments[i + 1].base_offset > uncleanable:
                first_uncleanable = segment.base_offset
                break
        max_lag = max(config.max_compaction_lag_ms, 0)
        needs_now = False
        for i, segment in enumerate(segments[:-1]):
            if segments[i + 1].base_offset <= first_dirty:
                continue
            first_ts = segment.first_batch_timestamp
            if 0 < first_ts < now_ms - max_lag:
                needs_now = True
                break
        last_records = {
            pid: LastRecord(last, epoch)
            for pid, (last, epoch) in log.last_records_of_active_producers().items()
        }
        return LogToClean(
            topic_partition=tp, log=log, segments=segments,
            sizes=tuple(s.size for s in segments), first_dirty_offset=first_dirty,
            first_uncleanable_offset=first_uncleanable, needs_compaction_now=needs_now,
            last_records=last_records, segment_bytes=config.segment_bytes,
            max_index_size=config.segment_index_bytes,
            index_interval_bytes=config.index_interval_bytes,
            delete_retention_ms=config.delete_retention_ms,
            min_cleanable_ratio=config.min_cleanable_dirty_ratio,
        )

    def grab_filthiest_compacted_log(self, now_ms: int) -> LogToClean | None:
        """The compacted log with the highest cleanable ratio above its
        min.cleanable.dirty.ratio (or past max.compaction.lag.ms), marked in progress;
        None when there is none."""
        candidates: list[LogToClean] = []
        with self._lock:
            busy = {tp for tp, s in self._states.items() if s.in_progress or s.paused}
            busy |= self._uncleanable
        ratios: dict[TopicPartition, float] = {}
        for tp, log in list(self._logs().items()):
            if log.closed or not log.config.compact or tp in busy:
                continue
            try:
                ltc = self.log_to_clean(tp, log, now_ms)
            except OSError as e:
                if self._on_error is not None:
                    self._on_error(f"cannot size {tp[0]}-{tp[1]} for cleaning", e)
                continue
            if ltc.total_bytes <= 0:
                continue
            ratios[tp] = ltc.cleanable_ratio
            if ((ltc.needs_compaction_now and ltc.cleanable_bytes > 0)
                    or ltc.cleanable_ratio > ltc.min_cleanable_ratio):
                candidates.append(ltc)
        self.dirty_ratios = ratios
        self.dirtiest_ratio = max(ratios.values(), default=0.0)
        self.last_run_ms = now_ms
        if not candidates:
            return None
        filthiest = max(candidates, key=lambda c: c.cleanable_ratio)
        with self._lock:
            state = self._states.setdefault(filthiest.topic_partition, _State())
            if state.in_progress or state.paused:
                return None  # paused meanwhile (another thread of the loop? never)
            state.in_progress = True
        return filthiest
