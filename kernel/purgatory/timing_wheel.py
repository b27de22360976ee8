"""Hierarchical timing wheel and the asyncio-driven ``Timer`` (Kafka's ``SystemTimer``).

Every delayed Produce (``acks=all``) and long-polling Fetch puts one task in the timer and
most of them are cancelled long before they expire, so insert and cancel must be O(1): a
heap of tasks would make both O(log n). Tasks go into the buckets of a timing wheel
(doubly-linked lists, so cancel unlinks in O(1)); delays beyond one wheel go to an overflow
wheel with a tick of the whole lower wheel, created on demand, and come back down when its
bucket expires.

Kafka keeps the buckets in a ``DelayQueue`` polled by a reaper thread. Here the ``Timer``
keeps the buckets in a heap keyed by bucket expiration and arranges one ``loop.call_at``
for the earliest bucket, so the event loop holds at most one handle per timer, never one
per task. Time comes from an injectable clock (milliseconds), and ``Timer.advance_clock``
drives everything without a loop, which is how unit tests run it.

Everything here runs on the broker's one event-loop thread, so there are no locks; the
thread-safety dance of Kafka's ``TimerTaskList`` (retry loops, synchronized blocks) is gone.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

__all__ = [
    "Timer",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
    "monotonic_ms",
]

# Sentinel "no wakeup scheduled": later than any bucket expiration.
_NEVER = 1 << 62


def monotonic_ms() -> int:
    """The default clock: monotonic, so a wall-clock jump cannot expire every request."""
    return time.monotonic_ns() // 1_000_000


class TimerTask(ABC):
    """Something to ``run()`` once ``delay_ms`` after it is added to a ``Timer``.

    A task is in at most one bucket: adding it again moves it, and ``cancel()`` unlinks it.
    """

    __slots__ = ("_timer_task_entry", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._timer_task_entry: TimerTaskEntry | None = None

    @abstractmethod
    def run(self) -> None:
        """Called by the timer when the delay has passed (not called if cancelled)."""

    def cancel(self) -> None:
        """Take the task out of the timer in O(1); a no-op if it is not in one."""
        entry = self._timer_task_entry
        if entry is not None:
            entry.remove()
            self._timer_task_entry = None

    def _set_timer_task_entry(self, entry: TimerTaskEntry) -> None:
        # A task re-added to the timer leaves its old bucket, so it can only fire once.
        old = self._timer_task_entry
        if old is not None and old is not entry:
            old.remove()
        self._timer_task_entry = entry


class TimerTaskEntry:
    """A node of a bucket's doubly-linked list: one task with its absolute expiration."""

    __slots__ = ("bucket", "expiration_ms", "next", "prev", "timer_task")

    def __init__(self, timer_task: TimerTask | None, expiration_ms: int) -> None:
        self.timer_task = timer_task
        self.expiration_ms = expiration_ms
        self.bucket: TimerTaskList | None = None
        self.next: TimerTaskEntry | None = None
        self.prev: TimerTaskEntry | None = None
        if timer_task is not None:
            timer_task._set_timer_task_entry(self)

    @property
    def cancelled(self) -> bool:
        """True once the task was cancelled or re-added (it then points to another entry)."""
        task = self.timer_task
        return task is None or task._timer_task_entry is not self

    def remove(self) -> None:
        bucket = self.bucket
        if bucket is not None:
            bucket.remove(self)


class TaskCounter:
    """Number of tasks in all buckets of one timer; shared by its wheels (Kafka's taskCounter)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class TimerTaskList:
    """A bucket: a circular doubly-linked list with a sentinel root, so add/remove are O(1).

    ``expiration_ms`` is the start of the bucket's time range, or -1 while the bucket is
    not waiting in the timer's queue.
    """

    __slots__ = ("_counter", "_root", "expiration_ms")

    def __init__(self, counter: TaskCounter) -> None:
        root = TimerTaskEntry(None, -1)
        root.next = root
        root.prev = root
        self._root = root
        self._counter = counter
        self.expiration_ms = -1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Returns True if the expiration changed, i.e. the bucket must be (re-)queued.

        Only a bucket reused for a later round of the wheel changes; further adds in the
        same round pass the same value, so a bucket is never queued twice.
        """
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    @property
    def is_empty(self) -> bool:
        return self._root.next is self._root

    def add(self, entry: TimerTaskEntry) -> None:
        entry.remove()
        root = self._root
        tail = root.prev
        assert tail is not None
        entry.next = root
        entry.prev = tail
        entry.bucket = self
        tail.next = entry
        root.prev = entry
        self._counter.count += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.bucket is not self:
            return
        prev, nxt = entry.prev, entry.next
        assert prev is not None and nxt is not None
        prev.next = nxt
        nxt.prev = prev
        # Unlinked nodes drop their neighbours so a completed operation that is still
        # referenced (e.g. from a watch list) does not keep other requests alive.
        entry.next = None
        entry.prev = None
        entry.bucket = None
        self._counter.count -= 1

    def flush(self, reinsert: Callable[[TimerTaskEntry], None]) -> None:
        """Empty the bucket, handing each entry to ``reinsert`` (run it or move it down)."""
        root = self._root
        head = root.next
        while head is not root:
            assert head is not None
            self.remove(head)
            reinsert(head)
            head = root.next
        self.expiration_ms = -1

    def entries(self) -> list[TimerTaskEntry]:
        """Snapshot of the entries, oldest first (for tests and debugging)."""
        out: list[TimerTaskEntry] = []
        node = self._root.next
        while node is not self._root:
            assert node is not None
            out.append(node)
            node = node.next
        return out


class TimingWheel:
    """One level of the hierarchy: ``wheel_size`` buckets of ``tick_ms`` each.

    A task due within ``[current_time + tick, current_time + interval)`` goes into the
    bucket for its tick; a later one goes to the overflow wheel (tick = this wheel's
    interval), created on demand. A task due before ``current_time + tick`` is already
    expired and ``add`` returns False so the caller runs it. Insert is O(levels), cancel O(1).
    """

    __slots__ = (
        "_buckets",
        "_counter",
        "_enqueue",
        "_overflow_wheel",
        "current_time_ms",
        "interval_ms",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        counter: TaskCounter,
        enqueue: Callable[[TimerTaskList], None],
    ) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            # With one bucket the overflow wheel would have the same tick: endless overflow.
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        # Rounded down to the tick, so buckets cover whole ticks.
        self.current_time_ms = start_ms - start_ms % tick_ms
        self._counter = counter
        self._enqueue = enqueue
        self._buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        self._overflow_wheel: TimingWheel | None = None

    @property
    def overflow_wheel(self) -> TimingWheel | None:
        return self._overflow_wheel

    def add(self, entry: TimerTaskEntry) -> bool:
        """Put ``entry`` in a bucket; False if it is cancelled or already expired."""
        if entry.cancelled:
            return False
        expiration = entry.expiration_ms
        wheel = self
        while True:
            if expiration < wheel.current_time_ms + wheel.tick_ms:
                return False
            if expiration < wheel.current_time_ms + wheel.interval_ms:
                virtual_id = expiration // wheel.tick_ms
                bucket = wheel._buckets[virtual_id % wheel.wheel_size]
                bucket.add(entry)
                if bucket.set_expiration(virtual_id * wheel.tick_ms):
                    wheel._enqueue(bucket)
                return True
            overflow = wheel._overflow_wheel
            if overflow is None:
                overflow = wheel._overflow_wheel = TimingWheel(
                    wheel.interval_ms,
                    wheel.wheel_size,
                    wheel.current_time_ms,
                    wheel._counter,
                    wheel._enqueue,
                )
            wheel = overflow

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel and the ones above to ``time_ms`` rounded down to their ticks.

        The caller must have flushed every bucket due at or before ``time_ms`` first, or
        a bucket would be reused for a later round while still holding earlier tasks.
        """
        wheel: TimingWheel | None = self
        while wheel is not None and time_ms >= wheel.current_time_ms + wheel.tick_ms:
            wheel.current_time_ms = time_ms - time_ms % wheel.tick_ms
            time_ms = wheel.current_time_ms
            wheel = wheel._overflow_wheel


class Timer:
    """Kafka's ``SystemTimer`` on an asyncio event loop.

    Buckets waiting to expire sit in a heap keyed by expiration; one ``loop.call_at`` is
    armed for the earliest. When it fires the timer advances its wheels to the bucket's
    time and flushes it: tasks of an overflow bucket move down to finer wheels, due tasks
    run. Buckets emptied by cancellation are dropped without a wakeup when they reach the
    head of the heap, so requests that complete early cost no timer callbacks.

    The loop is the one given, else the running loop at the first add. Without a loop
    (unit tests) nothing fires on its own: call ``advance_clock(now_ms)``.

    A task that is already due when added runs at once, inside ``add``. A task may run up
    to ``tick_ms`` - 1 early, never late by more than the loop's own latency.
    Each broker owns its timers: no state is shared between ``Timer`` instances.

    ``logger`` (the broker's structlog logger, or any logger with ``exception(msg, *args)``)
    reports tasks that raise; without one, the stdlib logger of this module does.
    """

    def __init__(
        self,
        *,
        tick_ms: int = 1,
        wheel_size: int = 20,
        clock: Callable[[], int] = monotonic_ms,
        loop: asyncio.AbstractEventLoop | None = None,
        logger: Any | None = None,
    ) -> None:
        self._clock = clock
        self._logger = logger if logger is not None else logging.getLogger(__name__)
        self._loop = loop
        self._counter = TaskCounter()
        self._queue: list[tuple[int, int, TimerTaskList]] = []
        self._sequence = itertools.count()  # heap tie-breaker: buckets do not compare
        self._wheel = TimingWheel(tick_ms, wheel_size, clock(), self._counter, self._enqueue)
        self._wakeup: asyncio.TimerHandle | None = None
        self._wakeup_ms = _NEVER
        self._advancing = False
        self._closed = False
        self._tasks_run = 0

    @property
    def size(self) -> int:
        """Tasks waiting in the timer (cancelled ones are not counted)."""
        return self._counter.count

    @property
    def wheel(self) -> TimingWheel:
        """The lowest (finest) wheel."""
        return self._wheel

    @property
    def next_expiration_ms(self) -> int | None:
        """Expiration of the earliest queued bucket (it may have been emptied by cancels)."""
        return self._queue[0][0] if self._queue else None

    @property
    def clock(self) -> Callable[[], int]:
        return self._clock

    def add(self, task: TimerTask) -> None:
        """Start ``task``'s timer: it runs ``task.delay_ms`` from now unless cancelled."""
        if self._closed:
            raise RuntimeError("timer is shut down")
        self._add_entry(TimerTaskEntry(task, self._clock() + task.delay_ms))

    def advance_clock(self, now_ms: int | None = None) -> int:
        """Expire every bucket due at ``now_ms`` (default: the clock); returns tasks run."""
        if self._closed:
            return 0
        if now_ms is None:
            now_ms = self._clock()
        before = self._tasks_run
        queue = self._queue
        wheel = self._wheel
        self._advancing = True
        try:
            while queue and queue[0][0] <= now_ms and not self._closed:
                expiration, _, bucket = heapq.heappop(queue)
                if bucket.expiration_ms != expiration:
                    continue  # stale: the bucket was dropped while empty and reused
                wheel.advance_clock(expiration)
                bucket.flush(self._reinsert)
            # Every bucket due by now is flushed, so the wheels may move to now; tasks
            # added next are then placed relative to the present, not the last bucket.
            wheel.advance_clock(now_ms)
        finally:
            self._advancing = False
        self._arm_wakeup()
        return self._tasks_run - before

    def shutdown(self) -> None:
        """Cancel the wakeup and drop every task without running it."""
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
        self._wakeup_ms = _NEVER
        self._closed = True
        queue, self._queue = self._queue, []
        for _, _, bucket in queue:
            bucket.flush(_drop)

    # -- internals ---------------------------------------------------------------------

    def _reinsert(self, entry: TimerTaskEntry) -> None:
        # A task run during this flush may have shut the timer down: drop the rest.
        if not self._closed:
            self._add_entry(entry)

    def _add_entry(self, entry: TimerTaskEntry) -> None:
        if not self._wheel.add(entry) and not entry.cancelled:
            task = entry.timer_task
            assert task is not None
            self._run(task)

    def _run(self, task: TimerTask) -> None:
        self._tasks_run += 1
        try:
            task.run()
        except Exception:
            # One failing task must not stop the timer from expiring the others.
            self._logger.exception("timer task %r failed", task)

    def _enqueue(self, bucket: TimerTaskList) -> None:
        expiration = bucket.expiration_ms
        heapq.heappush(self._queue, (expiration, next(self._sequence), bucket))
        if expiration < self._wakeup_ms and not self._advancing:
            self._schedule(expiration)

    def _arm_wakeup(self) -> None:
        """Point the wakeup at the earliest bucket that still holds tasks."""
        queue = self._queue
        while queue:
            expiration, _, bucket = queue[0]
            if bucket.expiration_ms == expiration and not bucket.is_empty:
                break
            heapq.heappop(queue)
            if bucket.expiration_ms == expiration:
                # Emptied by cancels: forget it; the next add re-queues it.
                bucket.expiration_ms = -1
        if not queue:
            if self._wakeup is not None:
                self._wakeup.cancel()
                self._wakeup = None
            self._wakeup_ms = _NEVER
        elif queue[0][0] < self._wakeup_ms:
            self._schedule(queue[0][0])

    def _schedule(self, expiration_ms: int) -> None:
        loop = self._loop
        if loop is None:
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop: driven by advance_clock
        if self._wakeup is not None:
            self._wakeup.cancel()
        delay_s = max(0, expiration_ms - self._clock()) / 1000.0
        self._wakeup = loop.call_at(loop.time() + delay_s, self._on_wakeup)
        self._wakeup_ms = expiration_ms

    def _on_wakeup(self) -> None:
        target = self._wakeup_ms
        self._wakeup = None
        self._wakeup_ms = _NEVER
        now = self._clock()
        # The loop's clock and ours may round differently; trust that the wakeup time has
        # come rather than re-arming for a fraction of a millisecond.
        if target != _NEVER and target > now:
            now = target
        self.advance_clock(now)


def _drop(entry: TimerTaskEntry) -> None:
    """Flush callback of shutdown: forget the entry."""
