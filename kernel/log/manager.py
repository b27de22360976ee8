"""All partition logs of one broker: loading and recovery at startup, creation and
deletion, and the periodic work (retention, flush.ms, recovery-point checkpoints).

Per log directory: ``.lock`` (one broker per directory), ``.kafka_cleanshutdown``
(written by a clean close: the next start reads no segment data), and Kafka's
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``. Without the
marker each log re-validates only what lies after its checkpointed recovery point, and
that recovery's progress is logged (:mod:`kernel.log.recovery_progress`).

Everything here runs on the broker's event loop except fsyncs and checkpoint writes,
which go to this manager's own thread pool. No module-level state: two brokers in one
process share nothing. Observers are plain callbacks injected by the owner.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import structlog

from kernel.config import BrokerConfig
from kernel.libc import out_of_descriptors
from kernel.log import local_log
from kernel.log.checkpoint import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    OffsetsByDir,
    OrderedCheckpoints,
    fsync_dir,
    read_offset_checkpoint,
)
from kernel.log.loader import bytes_to_recover
from kernel.log.local_log import DELETE_DIR_SUFFIX, log_dir_name, parse_topic_partition
from kernel.log.log import Log, LogCallbacks
from kernel.log.log_cleaner import CleanerObserver, LogCleaner
from kernel.log.log_config import LogConfig

# re-exported: the broker and the metadata plugin lock their dirs through this module
from kernel.log.log_dir_lock import LogDirError as LogDirError
from kernel.log.log_dir_lock import LogDirInUseError as LogDirInUseError
from kernel.log.log_dir_lock import lock_log_dir
from kernel.log.open_segments import OpenSegments
from kernel.log.recovery_progress import (
    RECOVERY_LOG_INTERVAL_S,
    RecoveryListener,
    RecoveryProgress,
)
from kernel.logging import Notices
from kernel.slices import in_slices

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
# Directories in a log dir that are not partition logs of this manager.
SKIPPED_DIRS = frozenset({"__cluster_metadata-0"})
# Intervals at or above this mean "never" (Kafka's defaults are Long.MAX_VALUE).
_NEVER_MS = 10 * 365 * 24 * 3600 * 1000

TopicPartition = tuple[str, int]
SegmentRolledCallback = Callable[[str, int, int], None]


@dataclass(slots=True)
class _LogDir:
    """One log dir as read before its logs open: whether its last shutdown was clean,
    its checkpoints, and its partition directories with the bytes each will recover."""

    directory: Path
    clean: bool
    recovery_points: dict[TopicPartition, int]
    start_offsets: dict[TopicPartition, int]
    logs: list[tuple[TopicPartition, Path, int]] = field(default_factory=list)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LogManager:
    """Owns every :class:`Log` of a broker.

    :param log_dirs: Kafka's ``log.dirs``; new logs go to the one with fewest logs.
    :param broker_config: broker defaults of the topic configs.
    :param topic_overrides: topic -> topic-level config overrides known at load time
        (the cluster image); later changes come through :meth:`update_topic_config`.
    :param high_watermark: the replica layer's high watermark of a log; retention never
        deletes at or above it (default: the log end offset).
    :param on_segment_rolled: ``(topic, partition, new base offset)`` observer.
    :param on_flush: seconds one background fsync took (the flush latency metric).
    :param on_recovery_progress: told a start-up's recovery progress (a terminal's bar),
        from the loading thread; ``recovery_log_interval_s``: how often it is logged.
    """

    def __init__(
        self,
        log_dirs: Sequence[str | Path],
        broker_config: BrokerConfig,
        *,
        topic_overrides: Mapping[str, Mapping[str, Any]] | None = None,
        high_watermark: Callable[[Log], int | None] | None = None,
        on_segment_rolled: SegmentRolledCallback | None = None,
        on_flush: Callable[[float], None] | None = None,
        cleaner_observer: CleanerObserver | None = None,
        on_recovery_progress: RecoveryListener | None = None,
        recovery_log_interval_s: float = RECOVERY_LOG_INTERVAL_S,
        logger: Any = None,
        time_ms: Callable[[], int] = _wall_ms,
        producer_id_expiration_check_interval_ms: int = 600_000,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self._broker_config = broker_config
        self._overrides: dict[str, dict[str, Any]] = {
            t: dict(o) for t, o in (topic_overrides or {}).items()
        }
        self._high_watermark = high_watermark
        self._on_segment_rolled = on_segment_rolled
        self._on_flush = on_flush
        self._on_recovery_progress = on_recovery_progress
        self._recovery_log_interval_s = recovery_log_interval_s
        self._log = logger if logger is not None else structlog.get_logger("kafkernel.log")
        self._time_ms = time_ms
        # Kafka's internal producer.id.expiration.check.interval.ms (not a broker config)
        self._producer_expiration_check_ms = producer_id_expiration_check_interval_ms
        self._logs: dict[TopicPartition, Log] = {}
        # Logs per log dir, kept as logs come and go: a new log goes to the emptiest
        # dir without walking every log (a 4,000-partition topic would, 4,000 times).
        self._logs_per_dir: dict[Path, int] = {}
        self._lock_fds: dict[Path, int] = {}
        self._loaded = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._periodic: list[asyncio.Task[None]] = []
        # Work that found no free descriptor: one line per task per period, then retried.
        self._descriptor_notices = Notices()
        self._background: set[asyncio.Task[Any]] = set()
        self._pending_flush: set[TopicPartition] = set()
        self._lso_checkpoint_pending = False
        # Checkpoint files are written from worker threads: one at a time, newest wins.
        self._checkpoints = OrderedCheckpoints()
        # The high watermarks the last run saved, until the replica layer takes each.
        self._saved_high_watermarks: dict[TopicPartition, int] = {}
        self._file_deletions: set[asyncio.TimerHandle] = set()
        self._dirs_to_remove: list[Path] = []
        self.open_segments = OpenSegments()  # across logs; the broker sets its cap
        self._callbacks = LogCallbacks(
            open_segments=self.open_segments,
            on_segment_rolled=self._segment_rolled,
            on_flush_needed=self._flush_needed,
            on_log_start_offset_changed=self._log_start_offset_changed,
            delete_files_later=self._delete_files_later,
            on_truncation=self._truncating,
        )
        # Kafka's LogCleaner: compacted topics, in its own threads (log.cleaner.enable).
        self.cleaner: LogCleaner | None = None
        if broker_config.log_cleaner_enable:
            self.cleaner = LogCleaner(
                broker_config, lambda: self._logs,
                high_watermark=high_watermark, logger=self._log,
                observer=cleaner_observer, time_ms=time_ms,
            )

    # -- configuration ------------------------------------------------------------------

    @property
    def broker_config(self) -> BrokerConfig:
        return self._broker_config

    @property
    def num_logs(self) -> int:
        """Partitions hosted (their open files are capped by ``open_segments``)."""
        return len(self._logs)

    @property
    def num_workers(self) -> int:
        """Threads of the log executor (flushes, checkpoints, deletions)."""
        return max(2, 2 * len(self.log_dirs))

    def config_for(self, topic: str) -> LogConfig:
        return LogConfig.from_broker(self._broker_config, self._overrides.get(topic, {}))

    def update_topic_config(self, topic: str, overrides: Mapping[str, Any]) -> None:
        """Topic configs changed (AlterConfigs): the topic's logs use them at once."""
        self._overrides[topic] = dict(overrides)
        config = self.config_for(topic)
        for (t, _), log in self._logs.items():
            if t == topic:
                log.update_config(config)

    def update_broker_config(self, broker_config: BrokerConfig) -> None:
        """Dynamic broker defaults changed: every log re-resolves its configs."""
        self._broker_config = broker_config
        for (topic, _), log in self._logs.items():
            log.update_config(self.config_for(topic))
            log.producer_state.producer_id_expiration_ms = broker_config.producer_id_expiration_ms

    # -- loading ------------------------------------------------------------------------

    def lock_dirs(self) -> None:
        """Create each log dir, take its ``.lock`` and check that it takes writes, as
        the first step of a start, before anything else opens a file there. Raises
        :class:`LogDirError` naming the directory. Idempotent; :meth:`load` calls it."""
        if self._lock_fds:
            return
        try:
            for directory in self.log_dirs:
                self._lock_dir(directory)
        except BaseException:
            self._release_locks()
            raise

    def _lock_dir(self, directory: Path) -> None:
        self._lock_fds[directory] = lock_log_dir(directory)

    def load(self) -> None:
        """Open every partition directory. Blocking (recovery reads data): :meth:`start`
        runs it in a worker thread. When a log dir had no clean shutdown, the recovery's
        progress is logged (:mod:`kernel.log.recovery_progress`)."""
        if self._loaded:
            return
        progress: RecoveryProgress | None = None
        try:
            self.lock_dirs()
            found: dict[TopicPartition, Path] = {}
            dirs = [self._read_log_dir(directory, found) for directory in self.log_dirs]
            if any(not d.clean and d.logs for d in dirs):
                progress = RecoveryProgress(
                    self._log, sum(len(d.logs) for d in dirs),
                    sum(planned for d in dirs for _, _, planned in d.logs),
                    log_interval_s=self._recovery_log_interval_s,
                    on_update=self._on_recovery_progress,
                )
                progress.start()
            for log_dir in dirs:
                self._load_dir(log_dir, progress)
        except BaseException:
            if progress is not None:
                progress.finish(completed=False)
            self._release_locks()
            for log in self._logs.values():
                log.close(flush=False)
            self._logs.clear()
            self._logs_per_dir.clear()
            raise
        if progress is not None:
            progress.finish()
        self._loaded = True

    def _read_log_dir(self, directory: Path, found: dict[TopicPartition, Path]) -> _LogDir:
        """A log dir's checkpoints and partition directories, before any log opens:
        what its load will do (``found``: the partitions of the dirs read before)."""
        clean = (directory / CLEAN_SHUTDOWN_FILE).exists()
        try:
            recovery_points = read_offset_checkpoint(directory / RECOVERY_POINT_CHECKPOINT)
        except CheckpointError as e:
            # recovering everything from the start is slow but always correct
            self._log.warning("ignoring unreadable recovery point checkpoint", error=str(e))
            recovery_points, clean = {}, False
        try:
            start_offsets = read_offset_checkpoint(directory / LOG_START_OFFSET_CHECKPOINT)
        except CheckpointError as e:
            self._log.warning("ignoring unreadable log start offset checkpoint", error=str(e))
            start_offsets = {}
        try:
            self._saved_high_watermarks.update(
                read_offset_checkpoint(directory / HIGH_WATERMARK_CHECKPOINT))
        except CheckpointError as e:
            # the followers' next fetches and the ISR's log ends bring them back
            self._log.warning("ignoring unreadable high watermark checkpoint", error=str(e))
        log_dir = _LogDir(directory, clean, recovery_points, start_offsets)
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if not entry.is_dir() or entry.name in SKIPPED_DIRS:
                continue
            path = Path(entry.path)
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)  # a deletion the last run began
                continue
            try:
                key = parse_topic_partition(entry.name)
            except ValueError:
                continue
            if key in found:
                raise RuntimeError(
                    f"duplicate log directories for {entry.name}: {found[key]} and {path}")
            found[key] = path
            planned = 0 if clean else bytes_to_recover(path, recovery_points.get(key, 0))
            log_dir.logs.append((key, path, planned))
        return log_dir

    def _load_dir(self, log_dir: _LogDir, progress: RecoveryProgress | None) -> None:
        directory, clean = log_dir.directory, log_dir.clean
        started = time.monotonic()
        for key, path, planned in log_dir.logs:
            if progress is not None:
                progress.begin_log(planned)
            self._logs[key] = Log.open(
                path, self.config_for(key[0]),
                recovery_point=log_dir.recovery_points.get(key, 0),
                log_start_offset=log_dir.start_offsets.get(key, 0),
                had_clean_shutdown=clean, callbacks=self._callbacks, now_ms=self._time_ms(),
                producer_id_expiration_ms=self._broker_config.producer_id_expiration_ms,
                on_recovered=None if progress is None else progress.recovered,
            )
            if progress is not None:
                progress.log_loaded()
        self._count_logs(directory, len(log_dir.logs))
        if clean:
            # from now on a crash must be seen as one: the removal has to be durable
            (directory / CLEAN_SHUTDOWN_FILE).unlink()
            fsync_dir(directory)
        # Without logs there is nothing to recover: a fresh directory had no shutdown,
        # clean or not, and saying clean_shutdown=False would suggest a crash.
        shutdown = {"clean_shutdown": clean} if log_dir.logs else {}
        self._log.info(
            "loaded logs", log_dir=str(directory), logs=len(log_dir.logs), **shutdown,
            seconds=round(time.monotonic() - started, 3),
        )

    # -- logs ---------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("the log manager is closed")
        if not self._loaded:
            self.load()

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def logs_by_dir(self) -> dict[Path, list[Log]]:
        """Each directory of ``log.dirs`` with the logs it holds (DescribeLogDirs)."""
        by_dir: dict[Path, list[Log]] = {d: [] for d in self.log_dirs}
        for log in self._logs.values():
            by_dir.setdefault(log.dir.parent, []).append(log)
        return by_dir

    def _next_log_dir(self) -> Path:
        counts = self._logs_per_dir
        return min(self.log_dirs, key=lambda d: counts.get(d, 0))

    def _count_logs(self, directory: Path, change: int) -> None:
        self._logs_per_dir[directory] = self._logs_per_dir.get(directory, 0) + change

    def get_or_create_log(
        self,
        topic: str,
        partition: int,
        overrides: Mapping[str, Any] | LogConfig | None = None,
    ) -> Log:
        """The partition's log, created empty if absent. ``overrides`` are the topic's
        config overrides (Kafka names; strings or typed values, e.g. the result of
        ``resolve_topic_configs``) and become the topic's configs; None keeps the
        known ones."""
        self._check_usable()
        log = self._logs.get((topic, partition))
        if isinstance(overrides, LogConfig):
            config = overrides
            if log is not None:
                log.update_config(config)
                return log
        else:
            # Unchanged overrides leave an existing log as it is: a topic's thousands of
            # partitions need not resolve its configs once each.
            changed = False
            if overrides is not None and self._overrides.get(topic) != overrides:
                self._overrides[topic], changed = dict(overrides), True
            if log is not None:
                if changed:
                    log.update_config(self.config_for(topic))
                return log
            config = self.config_for(topic)
        parent = self._next_log_dir()
        directory = parent / log_dir_name(topic, partition)
        log = Log.open(
            directory, config, had_clean_shutdown=False, callbacks=self._callbacks,
            now_ms=self._time_ms(),
            producer_id_expiration_ms=self._broker_config.producer_id_expiration_ms,
        )
        self._logs[(topic, partition)] = log
        self._count_logs(parent, 1)
        return log

    async def create_logs(self, wanted: Sequence[tuple[str, int, Mapping[str, Any],
                                                       int | None]]) -> None:
        """Create the missing logs of ``wanted`` (topic, partition, the topic's configs,
        the leader epoch to start at offset 0 when this broker leads) in the worker
        threads, a batch at a time: a topic's thousands of new directories and files are
        made off the event loop, whose file system calls can stall for 100s of ms."""
        self._check_usable()
        jobs: list[tuple[TopicPartition, Path, LogConfig, int | None]] = []
        configs: dict[str, LogConfig] = {}
        for topic, partition, overrides, epoch in wanted:
            if (topic, partition) in self._logs:
                continue
            if topic not in configs:
                self._overrides[topic] = dict(overrides)
                configs[topic] = self.config_for(topic)
            parent = self._next_log_dir()
            self._count_logs(parent, 1)  # the next job's dir sees this one
            jobs.append(((topic, partition), parent, configs[topic], epoch))
        for start in range(0, len(jobs), 100):
            batch = jobs[start:start + 100]
            try:
                logs = await self._in_thread(self._open_new_logs, batch, self._time_ms())
            except BaseException:
                for _, parent, _, _ in jobs[start:]:
                    self._count_logs(parent, -1)
                raise
            for (key, parent, _, _), log in zip(batch, logs, strict=True):
                if key in self._logs or self._closed:  # one made meanwhile on the loop wins
                    log.close(flush=False)
                    self._count_logs(parent, -1)
                else:
                    self._logs[key] = log

    def _open_new_logs(self, batch: list[tuple[TopicPartition, Path, LogConfig, int | None]],
                       now_ms: int) -> list[Log]:
        """The logs, holding no file; on a failure (EMFILE) those opened are closed."""
        logs: list[Log] = []
        try:
            for (topic, partition), parent, config, epoch in batch:
                log = Log.open(parent / log_dir_name(topic, partition), config,
                               had_clean_shutdown=False, callbacks=self._callbacks,
                               now_ms=now_ms, producer_id_expiration_ms=self._broker_config
                               .producer_id_expiration_ms)
                logs.append(log)
                if epoch is not None:  # what the leader's make_leader writes on the loop
                    log.assign_epoch_start_offset(epoch, 0)
        except BaseException:
            for log in logs:
                log.close(flush=False)
            raise
        return logs

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close the log and remove its directory (renamed first, removed in the
        background when running). False if there was no such log."""
        log = self._logs.pop((topic, partition), None)
        if log is None:
            return False
        self._count_logs(log.dir.parent, -1)
        self._pending_flush.discard((topic, partition))
        if self.cleaner is not None:
            self.cleaner.abort_cleaning((topic, partition), log.dir.parent)
        log.close(flush=False)
        target = log.dir.with_name(f"{log.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        try:
            os.rename(log.dir, target)
        except FileNotFoundError:
            return True
        if self._loop is not None and self._executor is not None:
            # One worker job for all the dirs a loop turn renamed (a topic's thousands).
            if not self._dirs_to_remove:
                self._loop.call_soon(self._remove_renamed_dirs)
            self._dirs_to_remove.append(target)
        else:
            shutil.rmtree(target, ignore_errors=True)
        return True

    def _remove_renamed_dirs(self) -> None:
        dirs, self._dirs_to_remove = self._dirs_to_remove, []
        if self._executor is None:
            local_log.remove_trees(dirs)
        else:
            self._spawn(self._in_thread(local_log.remove_trees, dirs))

    # -- checkpoints --------------------------------------------------------------------

    def _snapshot(self, value: Callable[[Log], int | None]) -> OffsetsByDir:
        """Each log's ``value`` (None: left out), by log dir; every dir is in it."""
        snapshot: OffsetsByDir = {d: {} for d in self.log_dirs}
        collections.deque(self._walk(value, snapshot), maxlen=0)
        return snapshot

    def _hw_or_none(self, log: Log) -> int | None:
        return self._high_watermark(log) if self._high_watermark is not None else None

    def _walk(self, value: Callable[[Log], int | None], into: OffsetsByDir) -> Iterator[None]:
        for key, log in list(self._logs.items()):
            # Between two slices a log may be deleted: it is left out.
            if self._logs.get(key) is log and (v := value(log)) is not None:
                into.setdefault(log.dir.parent, {})[key] = v
            yield None

    def saved_high_watermark(self, topic: str, partition: int) -> int:
        """The high watermark the last run checkpointed for this log (0 if none),
        capped at its log end; given once, to the replica that starts with it."""
        saved = self._saved_high_watermarks.pop((topic, partition), 0)
        log = self._logs.get((topic, partition))
        return min(saved, log.log_end_offset) if log is not None else 0

    async def _snapshot_in_slices(self, value: Callable[[Log], int | None]) -> OffsetsByDir:
        """``_snapshot``, walking the logs in slices that give the event loop back."""
        snapshot: OffsetsByDir = {d: {} for d in self.log_dirs}
        await in_slices(self._walk(value, snapshot), check_every=8)
        return snapshot

    async def checkpoint_high_watermarks(self) -> None:
        """Write every log dir's replication-offset-checkpoint in a worker thread."""
        snapshot = await self._snapshot_in_slices(self._hw_or_none)
        await self._in_thread(self._checkpoint_writer(HIGH_WATERMARK_CHECKPOINT, snapshot))

    def _checkpoint_writer(self, name: str, snapshot: OffsetsByDir) -> Callable[[], None]:
        return self._checkpoints.writer(name, snapshot)

    def checkpoint_recovery_points(self) -> None:
        """Write every log dir's recovery-point-offset-checkpoint (blocking: fsync)."""
        self._checkpoint_writer(RECOVERY_POINT_CHECKPOINT, self._snapshot(_recovery_point))()

    def checkpoint_log_start_offsets(self) -> None:
        """Write every log dir's log-start-offset-checkpoint (blocking: fsync)."""
        self._checkpoint_writer(LOG_START_OFFSET_CHECKPOINT, self._snapshot(_moved_start))()

    # -- callbacks from the logs (event loop) -------------------------------------------

    def _segment_rolled(self, log: Log, base_offset: int) -> None:
        if self._on_segment_rolled is not None:
            self._on_segment_rolled(log.topic, log.partition, base_offset)
        # as Kafka: the rolled segment is flushed in the background
        if self._loop is not None:
            self._spawn(self.flush_log(log, base_offset))

    def _flush_needed(self, log: Log) -> None:
        key = (log.topic, log.partition)
        if self._loop is None or key in self._pending_flush:
            return
        self._pending_flush.add(key)

        async def flush() -> None:
            try:
                await self.flush_log(log)
            finally:
                self._pending_flush.discard(key)

        self._spawn(flush())

    def _truncating(self, log: Log, offset: int) -> None:
        """Kafka's truncateTo around the cleaner: a clean in progress is aborted (its
        swap refused), and the first dirty offset moves back below the truncation."""
        cleaner = self.cleaner
        if cleaner is None:
            return
        key = (log.topic, log.partition)
        cleaner.abort_and_pause_cleaning(key)
        try:
            cleaner.maybe_truncate_checkpoint(log.dir.parent, key, offset)
        finally:
            cleaner.resume_cleaning(key)

    def _log_start_offset_changed(self, log: Log) -> None:
        if self._loop is None:
            if self._loaded and not self._closed:
                self.checkpoint_log_start_offsets()
            return
        if self._lso_checkpoint_pending:
            return
        self._lso_checkpoint_pending = True

        async def checkpoint() -> None:
            self._lso_checkpoint_pending = False
            snapshot = await self._snapshot_in_slices(_moved_start)
            await self._in_thread(self._checkpoint_writer(LOG_START_OFFSET_CHECKPOINT, snapshot))

        self._spawn(checkpoint())

    def _delete_files_later(self, paths: list[Path], delay_ms: int) -> None:
        """Remove deleted segments' files after ``file.delete.delay.ms``, in a worker
        thread. A stop cancels what is still waiting; the next start removes those."""
        loop = self._loop
        if loop is None or self._executor is None:
            local_log.unlink_all(paths)
            return

        def due() -> None:
            self._file_deletions.discard(handle)
            self._spawn(self._in_thread(local_log.unlink_all, paths))

        handle = loop.call_later(delay_ms / 1000, due)
        self._file_deletions.add(handle)

    # -- async operation ------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            assert error is not None
            if out_of_descriptors(error):
                # A flush or checkpoint left undone: the periodic ones take it up again.
                self._out_of_descriptors("background flush or checkpoint", error,
                                         "the periodic flush and checkpoint redo it")
                return
            self._log.error("log background task failed", error=repr(error))

    def _out_of_descriptors(self, task: str, error: BaseException, retry: str) -> None:
        if self._descriptor_notices.due(task):
            self._log.warning(
                f"log task {task} could not open a file: the process is out of file "
                f"descriptors (RLIMIT_NOFILE); {retry}; logged once every "
                f"{self._descriptor_notices.period_s:.0f} s", error=str(error))

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the log executor. A coroutine, so ``_spawn`` can own it: a
        bare executor future is not a task (create_task refuses it)."""
        assert self._loop is not None
        return await self._loop.run_in_executor(self._executor, fn, *args)

    async def flush_log(self, log: Log, up_to_offset: int | None = None) -> None:
        """fsync ``log`` up to ``up_to_offset`` (default: its current log end offset) in
        a worker thread; e.g. a produce path that must not answer before the fsync."""
        now_ms = self._time_ms()  # the manager's clock decides when flush.ms is due
        if self._loop is None:
            log.flush(up_to_offset, now_ms)
            return
        up_to = log.log_end_offset if up_to_offset is None else up_to_offset
        if up_to > log.recovery_point and not log.closed:
            started = time.perf_counter()
            await self._in_thread(log.flush, up_to, now_ms)
            if self._on_flush is not None:
                self._on_flush(time.perf_counter() - started)

    async def start(self) -> None:
        """Load the logs (in a worker thread) and start the periodic tasks on the
        running loop."""
        if self._loop is not None:
            return
        loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(
            max_workers=self.num_workers, thread_name_prefix="kafkernel-log"
        )
        self._loop = loop
        self.open_segments.bind_to_current_thread()  # only the loop closes others' files
        if not self._loaded:
            await loop.run_in_executor(self._executor, self.load)
        config = self._broker_config
        self._every(config.log_retention_check_interval_ms, self.run_retention)
        self._every(config.log_flush_scheduler_interval_ms, self.flush_dirty_logs)
        self._every(config.log_flush_offset_checkpoint_interval_ms, self.checkpoint)
        self._every(self._producer_expiration_check_ms, self.remove_expired_producers)
        self._every(config.replica_high_watermark_checkpoint_interval_ms,
                    self.checkpoint_high_watermarks)
        if self.cleaner is not None and config.log_cleaner_threads > 0:
            self.cleaner.start()

    def _every(self, interval_ms: int, job: Callable[[], Awaitable[Any]]) -> None:
        if interval_ms <= 0 or interval_ms >= _NEVER_MS:
            return
        assert self._loop is not None

        async def run() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    await job()
                except Exception as e:
                    if out_of_descriptors(e):
                        self._out_of_descriptors(job.__name__, e,
                                                 f"it runs again in {interval_ms} ms")
                        continue
                    self._log.error("periodic log task failed", task=job.__name__,
                                    error=repr(e))

        self._periodic.append(self._loop.create_task(run(), name=f"log-{job.__name__}"))

    async def _each_log(self, fn: Callable[[Log], Any]) -> list[Any]:
        """``fn`` of every open log, in slices that give the event loop back: a walk
        over thousands of logs would otherwise hold every client up."""
        return await in_slices((fn(log) for log in list(self._logs.values()) if not log.closed),
                               check_every=8)

    async def run_retention(self) -> int:
        """One retention pass over every log; returns the segments deleted."""
        now = self._time_ms()
        return sum(await self._each_log(
            lambda log: log.delete_retention_exceeded(now, self._hw_or_none(log))))

    async def remove_expired_producers(self) -> int:
        """producer.id.expiration.ms: drop the idle producers of every log; returns how
        many went."""
        now = self._time_ms()
        return sum(await self._each_log(lambda log: log.remove_expired_producers(now)))

    async def flush_dirty_logs(self) -> None:
        """flush.ms: fsync the logs whose last flush is older than their flush.ms."""
        now = self._time_ms()
        dirty = await self._each_log(lambda log: log if log.needs_flush(now) else None)
        jobs = [self.flush_log(log) for log in dirty if log is not None]
        if jobs:
            await asyncio.gather(*jobs)

    async def checkpoint(self) -> None:
        """Write the recovery points and log start offsets in a worker thread."""
        recovery_points = await self._snapshot_in_slices(_recovery_point)
        start_offsets = await self._snapshot_in_slices(_moved_start)
        await self._in_thread(self._checkpoint_writer(RECOVERY_POINT_CHECKPOINT, recovery_points))
        await self._in_thread(self._checkpoint_writer(LOG_START_OFFSET_CHECKPOINT, start_offsets))

    async def stop(self) -> None:
        """Stop the periodic tasks, let background flushes finish, then close cleanly
        (flush, checkpoints, clean-shutdown marker) in a worker thread."""
        loop = self._loop
        if loop is None:
            self.close()
            return
        if self.cleaner is not None:
            await self.cleaner.stop()  # before the logs close under it
        for task in self._periodic:
            task.cancel()
        for task in self._periodic:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._periodic.clear()
        for handle in self._file_deletions:
            handle.cancel()
        self._file_deletions.clear()
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        await loop.run_in_executor(self._executor, self.close)
        self._loop = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def close(self) -> None:
        """Clean shutdown: flush and close every log, write the checkpoints and the
        clean-shutdown marker of each log dir whose logs all closed cleanly."""
        if self._closed:
            return
        self._closed = True
        failed: set[Path] = set()
        for log in self._logs.values():
            try:
                log.close()
            except OSError as e:
                failed.add(log.dir.parent)
                self._log.error("closing log failed", log=log.name, error=str(e))
        if self._loaded:
            try:
                self.checkpoint_recovery_points()
                self.checkpoint_log_start_offsets()
                self._checkpoint_writer(HIGH_WATERMARK_CHECKPOINT,
                                        self._snapshot(self._hw_or_none))()
            except OSError as e:
                failed.update(self.log_dirs)
                self._log.error("writing checkpoints failed", error=str(e))
            for directory in self.log_dirs:
                if directory in failed or not directory.exists():
                    continue
                marker = directory / CLEAN_SHUTDOWN_FILE
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                fsync_dir(directory)
        self._logs.clear()
        self._logs_per_dir.clear()
        self._release_locks()

    def _release_locks(self) -> None:
        for fd in self._lock_fds.values():
            os.close(fd)  # closing releases the flock
        self._lock_fds.clear()

    @property
    def closed(self) -> bool:
        return self._closed


_recovery_point = attrgetter("recovery_point")


def _moved_start(log: Log) -> int | None:
    """The log start offset where it is past the first segment's base (else None)."""
    return log.log_start_offset if log.log_start_offset > log.segments[0].base_offset else None

