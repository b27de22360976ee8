"""The background log cleaner (Kafka's LogCleaner and its CleanerThreads).

``log.cleaner.threads`` worker threads each pick the dirtiest eligible compacted log
(:class:`LogCleanerManager`), clean it (:class:`Cleaner`) and sleep
``log.cleaner.backoff.ms`` when there is none. The event loop is never blocked by a
clean: a thread asks the loop only to choose a log (reading its state) and to swap a
cleaned segment in, both short. The dedupe buffer and the I/O buffer are split between
the threads; one throttler (``log.cleaner.io.max.bytes.per.second``) is shared.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kernel.config import BrokerConfig
from kernel.libc import out_of_descriptors
from kernel.log.checkpoint import fsync_dir
from kernel.log.cleaner import (
    Cleaner,
    CleanerStats,
    LogCleaningAbortedError,
    LogToClean,
    Throttler,
    TopicPartition,
)
from kernel.log.cleaner_manager import LogCleanerManager
from kernel.log.segment import LogSegment
from kernel.logging import Notices
from kernel.protocol.errors import KafkaError

if TYPE_CHECKING:
    from kernel.log.log import Log

T = TypeVar("T")


@dataclass(slots=True)
class CleanerObserver:
    """What the owner (the broker's metrics) is told; called from cleaner threads."""

    on_clean: Callable[[TopicPartition, CleanerStats], None] | None = None


class LogCleaner:
    """Owns the cleaner threads, their cleaners and the throttler of one broker."""

    def __init__(
        self,
        config: BrokerConfig,
        logs: Callable[[], Mapping[TopicPartition, Log]],
        *,
        high_watermark: Callable[[Log], int | None] | None = None,
        logger: Any = None,
        observer: CleanerObserver | None = None,
        time_ms: Callable[[], int] | None = None,
    ) -> None:
        self._log = logger
        self._observer = observer or CleanerObserver()
        self.time_ms = time_ms or (lambda: time.time_ns() // 1_000_000)
        self.manager = LogCleanerManager(
            logs, high_watermark=high_watermark, on_error=self._error)
        self._stop = threading.Event()
        self.throttler = Throttler(config.log_cleaner_io_max_bytes_per_second, self._stop)
        self.threads = max(config.log_cleaner_threads, 1)
        self.backoff_s = config.log_cleaner_backoff_ms / 1000
        self._cleaners = [
            Cleaner(
                dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size // self.threads,
                io_buffer_size=max(config.log_cleaner_io_buffer_size // self.threads // 2,
                                   64 * 1024),
                throttler=self.throttler, check_done=self.manager.check_cleaning_aborted,
                swap=self._swap, time_ms=self.time_ms,
            )
            for _ in range(self.threads)
        ]
        self._workers: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # Tests inject crashes between the steps of a swap (see LocalLog.replace_segments).
        self.after_swap_step: Callable[[str], None] | None = None
        self.last_clean_ms: dict[TopicPartition, int] = {}
        self.runs = 0
        self._descriptor_notices = Notices()

    def _error(self, message: str, error: Exception) -> None:
        if self._log is None:
            return
        if out_of_descriptors(error):
            # Passes as clients close: retried after the backoff, told once a period
            # rather than once per partition and pass.
            if self._descriptor_notices.due("cleaner"):
                self._log.warning(
                    f"{message}: the process is out of file descriptors (RLIMIT_NOFILE); "
                    f"retried every {self.backoff_s:.0f} s, logged once every "
                    f"{self._descriptor_notices.period_s:.0f} s", error=str(error))
            return
        self._log.warning(message, error=str(error))

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Start the threads; they reach the running loop for its short steps."""
        self._loop = asyncio.get_running_loop()
        self._stop.clear()
        for i, cleaner in enumerate(self._cleaners):
            worker = threading.Thread(target=self._run, args=(cleaner,),
                                      name=f"kafkernel-cleaner-{i}", daemon=True)
            worker.start()
            self._workers.append(worker)

    async def stop(self) -> None:
        """Stop the threads (a run in progress stops at its next chunk) and wait for
        them; the loop keeps serving their last requests meanwhile."""
        self._stop.set()
        workers, self._workers = self._workers, []
        loop = asyncio.get_running_loop()
        for worker in workers:
            await loop.run_in_executor(None, worker.join)
        self._loop = None

    def _run(self, cleaner: Cleaner) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_filthiest_log(cleaner)
            except Exception as e:  # a thread that dies would stop all cleaning
                self._error("log cleaner failed", e)
                cleaned = False
            if not cleaned:
                self._stop.wait(self.backoff_s)

    # -- one run ----------------------------------------------------------------------

    def _on_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the event loop, waited for; directly without a loop (tests
        and synchronous use)."""
        loop = self._loop
        if loop is None:
            return fn(*args)
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                future.set_result(fn(*args))
            except BaseException as e:
                future.set_exception(e)

        loop.call_soon_threadsafe(call)
        return future.result()

    def clean_filthiest_log(self, cleaner: Cleaner | None = None) -> bool:
        """Clean the dirtiest eligible log; False when none was."""
        cleaner = cleaner or self._cleaners[0]
        if self._stop.is_set() and self._loop is not None:
            return False
        ltc = self._on_loop(self.manager.grab_filthiest_compacted_log, self.time_ms())
        if ltc is None:
            return False
        self.clean_log(cleaner, ltc)
        return True

    def clean_log(self, cleaner: Cleaner, ltc: LogToClean) -> None:
        tp = ltc.topic_partition
        log_dir = ltc.segments[0].directory.parent
        end_offset: int | None = None
        try:
            end_offset, stats = cleaner.clean(ltc)
            self.runs += 1
            self.last_clean_ms[tp] = self.time_ms()
            if self._observer.on_clean is not None:
                self._observer.on_clean(tp, stats)
        except LogCleaningAbortedError:
            pass  # truncated or deleted meanwhile
        except (ValueError, OSError, KafkaError) as e:  # KafkaError: a corrupt batch
            if out_of_descriptors(e):
                # Not the log's fault: it is tried again on a later pass.
                self._error(f"cleaning {tp[0]}-{tp[1]} failed", e)
                return
            self.manager.mark_uncleanable(tp)
            self._error(f"cleaning {tp[0]}-{tp[1]} failed; it is not cleaned again", e)
        finally:
            self.manager.done_cleaning(tp, log_dir, end_offset)

    def _swap(self, ltc: LogToClean, new: LogSegment, old: list[LogSegment]) -> None:
        tp = ltc.topic_partition

        def swap() -> None:
            log = ltc.log
            if (not self.manager.may_swap(tp)
                    or not log.replace_segments(new, old, self.after_swap_step)):
                raise LogCleaningAbortedError(f"{tp[0]}-{tp[1]} changed under the cleaner")

        self._on_loop(swap)
        fsync_dir(new.directory)  # the renames are durable before the checkpoint moves

    # -- coordination (event loop) ------------------------------------------------------

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        self.manager.abort_and_pause_cleaning(tp)

    def resume_cleaning(self, tp: TopicPartition) -> None:
        self.manager.resume_cleaning(tp)

    def abort_cleaning(self, tp: TopicPartition, log_dir: Path) -> None:
        self.manager.abort_cleaning(tp, log_dir)
        self.last_clean_ms.pop(tp, None)

    def maybe_truncate_checkpoint(self, log_dir: Path, tp: TopicPartition, offset: int) -> None:
        self.manager.maybe_truncate_checkpoint(log_dir, tp, offset)
