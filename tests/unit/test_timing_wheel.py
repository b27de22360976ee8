"""Hierarchical timing wheel and Timer, driven by a fake clock (no sleeping)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.purgatory import Timer, TimerTask, TimingWheel


class FakeClock:
    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class RecordingTask(TimerTask):
    def __init__(self, delay_ms: int, log: list[RecordingTask], clock: FakeClock) -> None:
        super().__init__(delay_ms)
        self.log = log
        self.expiration_ms = clock() + delay_ms
        self.ran = 0

    def run(self) -> None:
        self.ran += 1
        self.log.append(self)


def make_timer(
    tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0
) -> tuple[Timer, FakeClock]:
    clock = FakeClock(start_ms)
    return Timer(tick_ms=tick_ms, wheel_size=wheel_size, clock=clock), clock


def advance(timer: Timer, clock: FakeClock, now_ms: int) -> int:
    clock.now_ms = now_ms
    return timer.advance_clock(now_ms)


def test_tasks_expire_in_order_of_expiration() -> None:
    timer, clock = make_timer()
    log: list[RecordingTask] = []
    rng = random.Random(7)
    tasks = [RecordingTask(rng.randrange(1, 3000), log, clock) for _ in range(500)]
    for task in tasks:
        timer.add(task)
    assert timer.size == 500
    assert advance(timer, clock, 5000) == 500
    assert [t.expiration_ms for t in log] == sorted(t.expiration_ms for t in tasks)
    assert timer.size == 0


def test_task_runs_at_its_expiration_not_before() -> None:
    timer, clock = make_timer(start_ms=1000)
    log: list[RecordingTask] = []
    task = RecordingTask(250, log, clock)
    timer.add(task)
    for now in range(1000, 1250):
        advance(timer, clock, now)
    assert log == []
    advance(timer, clock, 1250)
    assert log == [task]


def test_step_by_step_and_jump_agree() -> None:
    rng = random.Random(3)
    delays = [rng.randrange(0, 900) for _ in range(200)]
    stepped, jumped = [], []
    for log, step in ((stepped, 1), (jumped, 1000)):
        timer, clock = make_timer(tick_ms=1, wheel_size=8)
        tasks = [RecordingTask(d, log, clock) for d in delays]
        for t in tasks:
            timer.add(t)
        for now in range(step, 1001, step):
            advance(timer, clock, now)
    assert [t.expiration_ms for t in stepped] == [t.expiration_ms for t in jumped]
    assert len(stepped) == 200


def test_overflow_wheels_created_lazily_for_long_delays() -> None:
    timer, clock = make_timer(tick_ms=1, wheel_size=20)
    assert timer.wheel.overflow_wheel is None
    log: list[RecordingTask] = []
    short = RecordingTask(5, log, clock)
    timer.add(short)
    assert timer.wheel.overflow_wheel is None
    far = RecordingTask(1_000_000, log, clock)  # 20, 400, 8000, 160000, 3.2M
    timer.add(far)
    levels = 0
    wheel: TimingWheel | None = timer.wheel
    while wheel is not None:
        levels += 1
        wheel = wheel.overflow_wheel
    assert levels == 5
    # Only a handful of buckets are queued, not one per millisecond of delay.
    advance(timer, clock, 10)
    assert log == [short]
    advance(timer, clock, 999_999)
    assert log == [short]
    advance(timer, clock, 1_000_000)
    assert log == [short, far]


def test_overflow_tasks_cascade_down_with_coarse_steps() -> None:
    timer, clock = make_timer(tick_ms=1, wheel_size=4)
    log: list[RecordingTask] = []
    tasks = [RecordingTask(d, log, clock) for d in (3, 17, 64, 65, 250, 4097)]
    for t in tasks:
        timer.add(t)
    for now in range(0, 5000, 13):
        advance(timer, clock, now)
        assert all(t.expiration_ms <= now for t in log)
        assert all(t.ran or t.expiration_ms > now for t in tasks)
    assert log == tasks


def test_cancel_before_expiry() -> None:
    timer, clock = make_timer()
    log: list[RecordingTask] = []
    keep = RecordingTask(100, log, clock)
    drop = RecordingTask(100, log, clock)
    far = RecordingTask(100_000, log, clock)
    for t in (keep, drop, far):
        timer.add(t)
    drop.cancel()
    far.cancel()
    far.cancel()  # idempotent
    assert timer.size == 1
    advance(timer, clock, 200_000)
    assert log == [keep]
    assert timer.size == 0


def test_cancelled_buckets_arm_no_wakeup() -> None:
    timer, clock = make_timer()
    log: list[RecordingTask] = []
    tasks = [RecordingTask(d, log, clock) for d in (5, 12, 18)]
    for t in tasks:
        timer.add(t)
    tasks[0].cancel()
    tasks[1].cancel()
    advance(timer, clock, 1)
    # The emptied buckets were dropped from the queue: next wakeup is the live task's.
    assert timer.next_expiration_ms == 18
    advance(timer, clock, 18)
    assert log == [tasks[2]]
    assert timer.next_expiration_ms is None


def test_bucket_dropped_while_empty_is_requeued_when_reused() -> None:
    timer, clock = make_timer()
    log: list[RecordingTask] = []
    first = RecordingTask(10, log, clock)
    timer.add(first)
    first.cancel()
    advance(timer, clock, 1)
    assert timer.next_expiration_ms is None
    again = RecordingTask(9, log, clock)  # same bucket, same round
    timer.add(again)
    assert timer.next_expiration_ms == 10
    advance(timer, clock, 10)
    assert log == [again]


def test_task_added_at_expired_time_runs_immediately() -> None:
    timer, clock = make_timer(start_ms=500)
    log: list[RecordingTask] = []
    zero = RecordingTask(0, log, clock)
    timer.add(zero)
    assert log == [zero]
    negative = RecordingTask(-50, log, clock)
    timer.add(negative)
    assert log == [zero, negative]
    # Also after the wheel has moved on.
    advance(timer, clock, 10_000)
    late = RecordingTask(0, log, clock)
    timer.add(late)
    assert log[-1] is late
    assert timer.size == 0


def test_readding_a_task_moves_it() -> None:
    timer, clock = make_timer()
    log: list[RecordingTask] = []
    task = RecordingTask(10, log, clock)
    timer.add(task)
    task.delay_ms = 50
    timer.add(task)
    assert timer.size == 1
    advance(timer, clock, 20)
    assert log == []
    advance(timer, clock, 50)
    assert log == [task]
    assert task.ran == 1


def test_failing_task_does_not_stop_the_timer() -> None:
    timer, clock = make_timer()
    log: list[RecordingTask] = []

    class Boom(TimerTask):
        def run(self) -> None:
            raise RuntimeError("boom")

    timer.add(Boom(5))
    after = RecordingTask(5, log, clock)
    timer.add(after)
    assert advance(timer, clock, 5) == 2
    assert log == [after]


def test_task_added_by_running_task_is_scheduled() -> None:
    timer, clock = make_timer()
    log: list[RecordingTask] = []

    class Chain(TimerTask):
        def run(self) -> None:
            timer.add(RecordingTask(30, log, clock))

    timer.add(Chain(10))
    advance(timer, clock, 10)
    assert timer.size == 1
    advance(timer, clock, 39)
    assert log == []
    advance(timer, clock, 40)
    assert len(log) == 1


def test_shutdown_drops_tasks() -> None:
    timer, clock = make_timer()
    log: list[RecordingTask] = []
    timer.add(RecordingTask(10, log, clock))
    timer.shutdown()
    assert timer.size == 0
    assert advance(timer, clock, 100) == 0
    assert log == []
    with pytest.raises(RuntimeError):
        timer.add(RecordingTask(10, log, clock))


def test_wheel_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        Timer(tick_ms=0)
    with pytest.raises(ValueError):
        Timer(wheel_size=1)


def test_two_timers_share_nothing() -> None:
    a, clock_a = make_timer()
    b, clock_b = make_timer()
    log: list[RecordingTask] = []
    a.add(RecordingTask(10, log, clock_a))
    assert (a.size, b.size) == (1, 0)
    advance(b, clock_b, 100)
    assert log == []
    advance(a, clock_a, 100)
    assert len(log) == 1


@settings(max_examples=200, deadline=None)
@given(
    tick_ms=st.sampled_from([1, 2, 5, 10]),
    wheel_size=st.integers(min_value=2, max_value=24),
    start_ms=st.integers(min_value=0, max_value=10_000),
    steps=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=3000),  # clock step before this round
            st.lists(st.integers(min_value=-5, max_value=60_000), max_size=8),  # delays
            st.lists(st.integers(min_value=0, max_value=50), max_size=3),  # cancels
        ),
        min_size=1,
        max_size=25,
    ),
)
def test_runs_exactly_the_due_tasks_in_order(
    tick_ms: int,
    wheel_size: int,
    start_ms: int,
    steps: list[tuple[int, list[int], list[int]]],
) -> None:
    """A task has run iff its expiration rounded down to the tick is <= now; cancelled
    tasks never run; each advance runs tasks in order of expiration tick."""
    timer, clock = make_timer(tick_ms, wheel_size, start_ms)
    log: list[RecordingTask] = []
    tasks: list[RecordingTask] = []
    cancelled: set[int] = set()

    def tick(ms: int) -> int:
        return ms - ms % tick_ms

    def check(now: int) -> None:
        for i, t in enumerate(tasks):
            due = tick(t.expiration_ms) <= now and i not in cancelled
            assert t.ran == (1 if due else 0), (i, t.expiration_ms, now)
        pending = sum(1 for i, t in enumerate(tasks) if not t.ran and i not in cancelled)
        assert timer.size == pending

    for step, delays, cancels in steps:
        now = clock.now_ms + step
        clock.now_ms = now
        start = len(log)
        timer.advance_clock(now)
        ran = [tick(t.expiration_ms) for t in log[start:]]
        assert ran == sorted(ran)
        check(now)
        for d in delays:
            task = RecordingTask(d, log, clock)
            tasks.append(task)
            timer.add(task)
        for c in cancels:
            if tasks:
                i = c % len(tasks)
                if not tasks[i].ran:
                    cancelled.add(i)
                tasks[i].cancel()
        check(now)
    final = clock.now_ms + 200_000
    clock.now_ms = final
    timer.advance_clock(final)
    check(final)
    assert timer.size == 0


# -- on a real event loop ---------------------------------------------------------------


def test_timer_on_event_loop_expires_tasks_with_one_wakeup_per_bucket() -> None:
    async def main() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        calls = 0
        real_call_at: Callable[..., asyncio.TimerHandle] = loop.call_at

        def counting_call_at(*args: object, **kwargs: object) -> asyncio.TimerHandle:
            nonlocal calls
            calls += 1
            return real_call_at(*args, **kwargs)  # type: ignore[arg-type]

        loop.call_at = counting_call_at  # type: ignore[method-assign]
        timer = Timer()
        done: asyncio.Future[None] = loop.create_future()
        fired: list[int] = []

        class Task(TimerTask):
            def __init__(self, n: int) -> None:
                super().__init__(30)
                self.n = n

            def run(self) -> None:
                fired.append(self.n)
                if len(fired) == 1000:
                    done.set_result(None)

        for n in range(1000):
            timer.add(Task(n))
        await asyncio.wait_for(done, timeout=5)
        assert timer.size == 0
        timer.shutdown()
        return fired, calls

    fired, calls = asyncio.run(main())
    assert sorted(fired) == list(range(1000))
    # 1000 tasks landing in a few buckets: a few call_at, not one per task.
    assert calls < 20
