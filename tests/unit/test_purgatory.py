"""DelayedOperation and Purgatory: completion exactly once, watch keys, expiry, purge."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.purgatory import DelayedOperation, DelayedResponse, Purgatory, Timer


class FakeClock:
    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class MockOperation(DelayedOperation):
    """Completes once ``ready`` is set (like a fetch once min_bytes are there)."""

    def __init__(self, delay_ms: int, ready: bool = False) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.tries = 0
        self.completions = 0
        self.expirations = 0

    def try_complete(self) -> bool:
        self.tries += 1
        return self.force_complete() if self.ready else False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expirations += 1


def make(purge_interval: int = 1000) -> tuple[Purgatory[MockOperation], FakeClock]:
    clock = FakeClock(1_000)
    timer = Timer(clock=clock)
    return Purgatory("Fetch", timer, purge_interval=purge_interval), clock


def advance(purgatory: Purgatory[MockOperation], clock: FakeClock, now_ms: int) -> None:
    clock.now_ms = now_ms
    purgatory.timer.advance_clock(now_ms)


def test_completes_at_once_without_watching() -> None:
    purgatory, _ = make()
    op = MockOperation(500, ready=True)
    assert purgatory.try_complete_else_watch(op, [("topic", 0)])
    assert op.is_completed and op.completions == 1
    assert purgatory.watched_count == 0
    assert purgatory.num_delayed == 0
    assert purgatory.timer.size == 0


def test_watch_key_completion() -> None:
    purgatory, _ = make()
    op = MockOperation(500)
    keys: list[Hashable] = [("topic", 0), ("topic", 1)]
    assert not purgatory.try_complete_else_watch(op, keys)
    assert op.tries == 1  # one event-loop thread: nothing changes while watching
    assert purgatory.watched(("topic", 0)) == 1
    assert purgatory.watched(("topic", 1)) == 1
    assert purgatory.watched_count == 2
    assert purgatory.num_delayed == 1
    assert purgatory.timer.size == 1

    assert purgatory.check_and_complete(("topic", 0)) == 0
    assert purgatory.check_and_complete(("other", 0)) == 0
    op.ready = True
    assert purgatory.check_and_complete(("topic", 0)) == 1
    assert op.completions == 1 and op.expirations == 0
    assert purgatory.num_delayed == 0
    assert purgatory.timer.size == 0  # its timeout was cancelled
    # Still in the other key's list until that key is checked (or purged).
    assert purgatory.watched(("topic", 0)) == 0
    assert purgatory.watched(("topic", 1)) == 1
    assert purgatory.check_and_complete(("topic", 1)) == 0
    assert purgatory.watched_count == 0
    assert op.completions == 1


def test_many_operations_on_one_key_group_id() -> None:
    purgatory, _ = make()
    ops = [MockOperation(1000) for _ in range(10)]
    for op in ops:
        assert not purgatory.try_complete_else_watch(op, ["my-group"])
    for op in ops[::2]:
        op.ready = True
    assert purgatory.check_and_complete("my-group") == 5
    assert purgatory.watched("my-group") == 5
    assert purgatory.num_delayed == 5


def test_operation_expires() -> None:
    purgatory, clock = make()
    op = MockOperation(500)
    purgatory.try_complete_else_watch(op, [("t", 0)])
    advance(purgatory, clock, 1_499)
    assert not op.is_completed
    advance(purgatory, clock, 1_500)
    assert op.is_completed
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.num_delayed == 0
    op.ready = True
    assert purgatory.check_and_complete(("t", 0)) == 0
    assert op.completions == 1
    assert purgatory.watched_count == 0


def test_expirations_in_timeout_order() -> None:
    purgatory, clock = make()
    order: list[int] = []

    class Op(MockOperation):
        def on_expiration(self) -> None:
            order.append(self.delay_ms)

    for delay in (300, 100, 5000, 200, 40_000):
        purgatory.try_complete_else_watch(Op(delay), ["k"])
    advance(purgatory, clock, 100_000)
    assert order == [100, 200, 300, 5000, 40_000]


def test_force_complete_exactly_once_against_expiry() -> None:
    purgatory, clock = make()
    op = MockOperation(100)
    purgatory.try_complete_else_watch(op, ["k"])
    assert op.force_complete()
    assert not op.force_complete()
    advance(purgatory, clock, 10_000)
    assert (op.completions, op.expirations) == (1, 0)

    expired = MockOperation(100)
    purgatory.try_complete_else_watch(expired, ["k"])
    advance(purgatory, clock, 20_000)
    assert not expired.force_complete()
    expired.ready = True
    assert not expired.try_complete()
    expired.run()  # a second expiry is a no-op too
    assert (expired.completions, expired.expirations) == (1, 1)


def test_zero_timeout_expires_at_once() -> None:
    purgatory, _ = make()
    op = MockOperation(0)
    assert not purgatory.try_complete_else_watch(op, ["k"])
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.num_delayed == 0


def test_an_operation_tried_once_is_parked_until_a_key_is_checked() -> None:
    purgatory, _ = make()

    class SecondTime(MockOperation):
        def try_complete(self) -> bool:
            self.tries += 1
            return self.force_complete() if self.tries == 2 else False

    op = SecondTime(500)
    assert not purgatory.try_complete_else_watch(op, ["a", "b"])
    assert purgatory.num_delayed == 1 and purgatory.timer.size == 1
    assert purgatory.check_and_complete("b") == 1
    assert op.completions == 1
    assert purgatory.num_delayed == 0
    assert purgatory.timer.size == 0


def test_operation_completed_inside_check_can_trigger_more_checks() -> None:
    purgatory, _ = make()
    second = MockOperation(500)

    class Cascade(MockOperation):
        def on_complete(self) -> None:
            super().on_complete()
            second.ready = True
            purgatory.check_and_complete("k")  # re-entry on the same key

    first = Cascade(500)
    purgatory.try_complete_else_watch(first, ["k"])
    purgatory.try_complete_else_watch(second, ["k"])
    first.ready = True
    assert purgatory.check_and_complete("k") == 1  # second was completed by the re-entry
    assert first.completions == 1 and second.completions == 1
    assert purgatory.watched("k") == 0
    assert purgatory.watched_count == 0


def test_purge_of_completed_operations() -> None:
    purgatory, _ = make(purge_interval=9)
    # Each op watches its own partition and a shared key; completing through the own key
    # leaves it in the shared key's list until a purge.
    ops = []
    for i in range(10):
        op = MockOperation(60_000)
        purgatory.try_complete_else_watch(op, [("t", i), "shared"])
        ops.append(op)
    for i, op in enumerate(ops):
        op.ready = True
        assert purgatory.check_and_complete(("t", i)) == 1
    assert purgatory.watched("shared") == 10
    assert purgatory.num_delayed == 0
    # Kafka's rule: estimated total (10 + 1) - delayed (1) > purge interval (9) purges.
    pending = MockOperation(60_000)
    purgatory.try_complete_else_watch(pending, ["shared"])
    assert purgatory.watched("shared") == 1
    assert purgatory.watched_count == 1
    assert purgatory.num_delayed == 1


def test_purge_completed_directly() -> None:
    purgatory, clock = make()
    for _ in range(3):
        purgatory.try_complete_else_watch(MockOperation(10), ["a", "b"])
    advance(purgatory, clock, 2_000)
    assert purgatory.watched_count == 6
    assert purgatory.purge_completed() == 6
    assert purgatory.watched_count == 0
    assert purgatory.watched("a") == 0


def test_watch_keys_required() -> None:
    purgatory, _ = make()
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(MockOperation(10), [])


def test_duplicate_key_watched_once() -> None:
    purgatory, _ = make()
    purgatory.try_complete_else_watch(MockOperation(10), ["a", "a"])
    assert purgatory.watched("a") == 1
    assert purgatory.watched_count == 1


def test_purgatories_sharing_a_timer_count_their_own() -> None:
    clock = FakeClock(0)
    timer = Timer(clock=clock)
    produce: Purgatory[MockOperation] = Purgatory("Produce", timer)
    fetch: Purgatory[MockOperation] = Purgatory("Fetch", timer)
    produce.try_complete_else_watch(MockOperation(100), [("t", 0)])
    fetch.try_complete_else_watch(MockOperation(100), [("t", 0)])
    fetch.try_complete_else_watch(MockOperation(200), [("t", 0)])
    assert (produce.num_delayed, fetch.num_delayed, timer.size) == (1, 2, 3)
    clock.now_ms = 150
    timer.advance_clock()
    assert (produce.num_delayed, fetch.num_delayed, timer.size) == (0, 1, 1)
    produce.shutdown()  # a shared timer keeps running for the others
    clock.now_ms = 250
    timer.advance_clock()
    assert fetch.num_delayed == 0


def test_shutdown_cancels_without_completing() -> None:
    purgatory, clock = make()
    op = MockOperation(100)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    purgatory.shutdown()
    assert purgatory.num_delayed == 0
    assert purgatory.watched_count == 0
    assert purgatory.timer.size == 0
    advance(purgatory, clock, 100_000)
    assert op.completions == 0
    with pytest.raises(RuntimeError):
        purgatory.try_complete_else_watch(MockOperation(100), ["a"])


@settings(max_examples=300, deadline=None)
@given(
    actions=st.lists(
        st.sampled_from(["ready", "check", "force", "tick", "tick_far", "run"]),
        max_size=12,
    )
)
def test_completion_happens_exactly_once(actions: list[str]) -> None:
    """Whatever races between completion and expiry, on_complete runs once at most,
    and on_expiration only if the timer won."""
    purgatory, clock = make()
    op = MockOperation(100)
    wins = int(purgatory.try_complete_else_watch(op, ["k"]))
    for action in actions:
        if action == "ready":
            op.ready = True
        elif action == "check":
            wins += purgatory.check_and_complete("k")
        elif action == "force":
            wins += int(op.force_complete())
        elif action == "tick":
            advance(purgatory, clock, clock.now_ms + 40)
        elif action == "tick_far":
            advance(purgatory, clock, clock.now_ms + 1_000)
        else:
            op.run()
        assert op.completions == (1 if op.is_completed else 0)
        assert op.expirations <= op.completions
        assert purgatory.num_delayed == (0 if op.is_completed else 1)
        assert purgatory.timer.size == purgatory.num_delayed
    assert wins + op.expirations == op.completions


# -- on a real event loop ---------------------------------------------------------------


class Ready(DelayedResponse):
    """What a handler parks: completes once ``ready`` is set and its key checked."""

    def __init__(self, delay_ms: int, ready: bool = False) -> None:
        super().__init__(delay_ms)
        self.ready = ready

    def try_complete(self) -> bool:
        return self.force_complete() if self.ready else False


def test_a_handler_waits_for_completion_expiry_or_its_own_cancellation() -> None:
    async def main() -> None:
        purgatory: Purgatory[Ready] = Purgatory("Fetch", Timer())

        await asyncio.wait_for(Ready(10_000, ready=True).wait_in(purgatory, [("t", 0)]), 1)
        assert purgatory.num_delayed == 0  # completed at once, never parked

        early = Ready(10_000)
        waiting = asyncio.ensure_future(early.wait_in(purgatory, [("t", 1)]))
        await asyncio.sleep(0.01)
        assert not waiting.done() and purgatory.num_delayed == 1
        early.ready = True
        assert purgatory.check_and_complete(("t", 1)) == 1
        await asyncio.wait_for(waiting, 1)

        expiring = Ready(50)
        await asyncio.wait_for(expiring.wait_in(purgatory, [("t", 2)]), 5)
        assert expiring.is_completed and not expiring.ready

        # The connection went away: the wait is cancelled and so is the timeout.
        abandoned = Ready(10_000)
        waiting = asyncio.ensure_future(abandoned.wait_in(purgatory, [("t", 3)]))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not abandoned.is_completed
        assert purgatory.num_delayed == 0 and purgatory.timer.size == 0
        purgatory.shutdown()

    asyncio.run(main())
