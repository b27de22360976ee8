"""The coordinator runtime with a toy key-value shard (nothing of the group coordinator)
over an in-memory partition writer, no broker: records reach the log and come back by
replay on the next load, responses wait for the high watermark, the commit timeout,
parked requests complete from later writes, timers fire as operations, a failed append
rebuilds the shard from the log, and leadership events load and unload shards, also
while a write waits. The kernel's writer over the replica manager is tested in
test_replica_manager.py; the group coordinator runs the runtime on real brokers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass
from typing import Any

import pytest
import structlog
from kio.schema.errors import ErrorCode

from kernel.coordination import CoordinatorError, CoordinatorRuntime, TransactionResult
from kernel.protocol.errors import KafkaError
from kernel.protocol.records import iter_batches, iter_records
from kernel.purgatory import Timer
from kernel.testing.partition_writer import InMemoryPartitionWriter

TOPIC = "__toy_state"
TP = (TOPIC, 0)


@dataclass(frozen=True)
class Schedule:
    key: Hashable
    delay_ms: int


@dataclass(frozen=True)
class Cancel:
    key: Hashable


@dataclass(frozen=True)
class Done:
    reply_to: Hashable
    response: Any


@dataclass(frozen=True)
class Result:
    records: tuple[tuple[bytes, bytes | None], ...] = ()
    response: Any = None
    completions: tuple[Done, ...] = ()
    timers: tuple[Schedule | Cancel, ...] = ()


@dataclass(frozen=True)
class TxnResult(Result):
    """Records a producer writes inside its transaction."""

    producer_id: int = -1
    producer_epoch: int = -1
    transactional_id: str | None = None


class KeyValueShard:
    """Keys and values; ``wait`` parks until its key is written."""

    def __init__(self, partition: int) -> None:
        self.values: dict[bytes, bytes] = {}
        self.waiting: dict[bytes, list[Hashable]] = {}
        # (offset, producer id, producer epoch, key) of each record replayed at load.
        self.replayed: list[tuple[int, int, int, bytes]] = []
        # A producer's transactional writes, applied when its commit marker comes.
        self.pending: dict[int, dict[bytes, bytes | None]] = {}
        # (offset, producer id, producer epoch, result) of each marker replayed.
        self.markers: list[tuple[int, int, int, TransactionResult]] = []

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: bytes, value: bytes | None) -> None:
        self.replayed.append((offset, producer_id, producer_epoch, key))
        if producer_id >= 0:
            self.pending.setdefault(producer_id, {})[key] = value
        else:
            self._set(key, value)

    def replay_end_transaction(self, offset: int, producer_id: int, producer_epoch: int,
                               result: TransactionResult) -> None:
        self.markers.append((offset, producer_id, producer_epoch, result))
        writes = self.pending.pop(producer_id, {})
        if result is TransactionResult.COMMIT:
            for key, value in writes.items():
                self._set(key, value)

    def put_in_transaction(self, producer_id: int, producer_epoch: int, key: bytes,
                           value: bytes) -> TxnResult:
        self.pending.setdefault(producer_id, {})[key] = value
        return TxnResult(records=((key, value),), response="pending",
                         producer_id=producer_id, producer_epoch=producer_epoch,
                         transactional_id="txn")

    def _set(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.values.pop(key, None)
        else:
            self.values[key] = value

    def on_loaded(self) -> Result:
        return Result()

    def on_unloaded(self) -> Result:
        return Result(completions=tuple(Done(r, "unloaded") for rs in self.waiting.values()
                                        for r in rs))

    def on_timer(self, key: Any) -> Result:
        return self.put(key, b"fired")

    def put(self, key: bytes, value: bytes | None) -> Result:
        self._set(key, value)
        woken = self.waiting.pop(key, [])
        return Result(records=((key, value),), response="ok",
                      completions=tuple(Done(r, value) for r in woken))

    def wait(self, key: bytes, reply_to: Hashable) -> Result:
        if key in self.values:
            return Result(response=self.values[key])
        self.waiting.setdefault(key, []).append(reply_to)
        return Result()

    def arm(self, key: bytes, delay_ms: int) -> Result:
        return Result(response="armed", timers=(Schedule(key, delay_ms),))

    def disarm(self, key: bytes) -> Result:
        return Result(response="disarmed", timers=(Cancel(key),))


Runtime = CoordinatorRuntime[KeyValueShard]


def run(scenario: Callable[[InMemoryPartitionWriter, Timer], Coroutine[Any, Any, None]],
        *, auto_commit: bool = True) -> None:
    writer = InMemoryPartitionWriter(auto_commit=auto_commit)
    timer = Timer()

    async def main() -> None:
        try:
            await asyncio.wait_for(scenario(writer, timer), 10)
        finally:
            timer.shutdown()

    asyncio.run(main())


def runtime(writer: InMemoryPartitionWriter, timer: Timer, **kwargs: Any) -> Runtime:
    r: Runtime = CoordinatorRuntime(writer, timer, TOPIC, KeyValueShard,
                                    logger=structlog.get_logger(), **kwargs)
    r.start()
    return r


async def leading(writer: InMemoryPartitionWriter, timer: Timer,
                  **kwargs: Any) -> tuple[Runtime, KeyValueShard]:
    """A runtime over TP, led by this broker in epoch 0, once its shard has loaded."""
    writer.become_leader(TP, 0)
    r = runtime(writer, timer, **kwargs)
    return r, await active(r)


async def active(r: Runtime, partition: int = 0) -> KeyValueShard:
    for _ in range(1000):
        shard = r.loaded_shards().get(partition)
        if shard is not None:
            return shard
        await asyncio.sleep(0)
    raise AssertionError(f"partition {partition} did not load: {r.partition_states()}")


async def settle() -> None:
    """Let scheduled callbacks (timer expiries, load tasks) run."""
    for _ in range(10):
        await asyncio.sleep(0)


def logged_records(writer: InMemoryPartitionWriter) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for _, batch in iter_batches(writer.records(TP))
            for r in iter_records(batch)]


async def error_of(awaitable: Awaitable[Any]) -> ErrorCode:
    with pytest.raises(CoordinatorError) as info:
        await awaitable
    return info.value.error_code


def test_writes_reach_the_log_and_come_back_on_the_next_load() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, _ = await leading(writer, timer)
        assert await r.write(0, lambda s, _: s.put(b"a", b"1")) == "ok"
        assert await r.write(0, lambda s, _: s.put(b"b", b"2")) == "ok"
        assert await r.write(0, lambda s, _: s.put(b"a", None)) == "ok"
        assert logged_records(writer) == [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"a", None)]
        await r.stop()
        assert writer.listeners == 0

        again = runtime(writer, timer, load_chunk_bytes=1)  # one batch per read
        shard = await active(again)
        assert shard.values == {b"b": b"2"}
        # Each record comes back with its offset; the runtime writes without a producer id.
        assert shard.replayed == [(0, -1, -1, b"a"), (1, -1, -1, b"b"), (2, -1, -1, b"a")]
        assert await again.write(0, lambda s, r: s.wait(b"b", r)) == b"2"
        # The next write continues the log.
        await again.write(0, lambda s, _: s.put(b"c", b"3"))
        assert logged_records(writer)[-1] == (3, b"c", b"3")
        await again.stop()

    run(scenario)


def test_requests_before_the_load_ends_and_without_leadership() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        writer.become_leader(TP, 0)
        r = runtime(writer, timer)
        # The load runs as a task: nothing is served before it ends.
        with pytest.raises(CoordinatorError) as info:
            r.write(0, lambda s, _: s.put(b"x", b"1"))
        assert info.value.error_code == ErrorCode.coordinator_load_in_progress
        assert r.partition_states() == {0: "loading"}
        await active(r)
        with pytest.raises(CoordinatorError) as info:
            r.write(7, lambda s, _: s.put(b"x", b"1"))
        assert info.value.error_code == ErrorCode.not_coordinator
        # A follower's partition is never loaded.
        writer.become_follower((TOPIC, 1), 0)
        await settle()
        assert r.partition_states() == {0: "active"}
        await r.stop()

    run(scenario)


def test_responses_wait_for_the_high_watermark_and_reads_for_earlier_writes() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, _ = await leading(writer, timer)
        first = r.write(0, lambda s, _: s.put(b"a", b"1"))
        second = r.write(0, lambda s, _: s.put(b"b", b"2"))
        read = r.read(0, lambda s: dict(s.values))
        await settle()
        assert not first.done() and not second.done() and not read.done()
        writer.commit(TP, 1)  # the first record only
        await settle()
        assert first.done() and await first == "ok"
        assert not second.done() and not read.done()
        writer.commit(TP)
        assert await second == "ok"
        assert await read == {b"a": b"1", b"b": b"2"}
        await r.stop()

    run(scenario, auto_commit=False)


def test_records_above_the_high_watermark_are_replayed_and_waited_for() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, _ = await leading(writer, timer)
        pending = r.write(0, lambda s, _: s.put(b"a", b"1"))
        await r.stop()
        assert await error_of(pending) == ErrorCode.not_coordinator

        # As Kafka's loader: the new shard has the uncommitted record, so what it
        # answers waits until that record is committed.
        again = runtime(writer, timer)
        assert (await active(again)).values == {b"a": b"1"}
        read = again.read(0, lambda s: s.values[b"a"])
        await settle()
        assert not read.done()
        writer.commit(TP)
        assert await read == b"1"
        await again.stop()

    run(scenario, auto_commit=False)


def test_a_write_not_committed_in_time_fails_with_request_timed_out() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, _ = await leading(writer, timer, commit_timeout_ms=50)
        assert await error_of(r.write(0, lambda s, _: s.put(b"a", b"1"))) \
            == ErrorCode.request_timed_out
        # The shard stays loaded; the next commit answers later writes.
        later = r.write(0, lambda s, _: s.put(b"b", b"2"))
        writer.commit(TP)
        assert await later == "ok"
        await r.stop()

    run(scenario, auto_commit=False)


def test_a_parked_request_completes_from_a_later_write() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, _ = await leading(writer, timer)
        parked = r.write(0, lambda s, h: s.wait(b"k", h))
        await settle()
        assert not parked.done()
        assert await r.write(0, lambda s, _: s.put(b"k", b"v")) == "ok"
        assert await parked == b"v"
        await r.stop()

    run(scenario)


def test_timers_fire_as_operations_and_cancel() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, shard = await leading(writer, timer)
        woken = r.write(0, lambda s, h: s.wait(b"t1", h))
        assert await r.write(0, lambda s, _: s.arm(b"t1", 30)) == "armed"
        assert await r.write(0, lambda s, _: s.arm(b"t2", 30)) == "armed"
        assert await r.write(0, lambda s, _: s.disarm(b"t2")) == "disarmed"
        # Re-arming replaces: t3 fires once, after the second delay.
        await r.write(0, lambda s, _: s.arm(b"t3", 10_000))
        await r.write(0, lambda s, _: s.arm(b"t3", 0))
        assert await woken == b"fired"
        await asyncio.sleep(0.1)
        assert shard.values == {b"t1": b"fired", b"t3": b"fired"}
        # An armed timer of an unloaded shard never fires.
        await r.write(0, lambda s, _: s.arm(b"t4", 20))
        await r.stop()
        await asyncio.sleep(0.06)
        assert b"t4" not in shard.values

    run(scenario)


def test_a_failed_append_rebuilds_the_shard_from_the_log() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, _ = await leading(writer, timer)
        assert await r.write(0, lambda s, _: s.put(b"kept", b"1")) == "ok"
        parked = r.write(0, lambda s, h: s.wait(b"never", h))
        writer.refuse_next_append(KafkaError(ErrorCode.message_too_large, "too large"))
        assert await error_of(r.write(0, lambda s, _: s.put(b"huge", b"x"))) \
            == ErrorCode.message_too_large
        # Parked requests were answered by the unloaded shard; the new one has only the log.
        assert await parked == "unloaded"
        assert (await active(r)).values == {b"kept": b"1"}
        assert await r.write(0, lambda s, _: s.put(b"after", b"2")) == "ok"
        await r.stop()

    run(scenario)


def test_leadership_moving_mid_write_answers_not_coordinator() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, _ = await leading(writer, timer)
        parked = r.write(0, lambda s, h: s.wait(b"k", h))
        pending = r.write(0, lambda s, _: s.put(b"a", b"1"))
        writer.become_follower(TP, 1)
        assert await parked == "unloaded"
        assert await error_of(pending) == ErrorCode.not_coordinator
        assert r.partition_states() == {}
        with pytest.raises(CoordinatorError) as info:
            r.write(0, lambda s, _: s.put(b"x", b"1"))
        assert info.value.error_code == ErrorCode.not_coordinator

        # Leader again in a later epoch: loaded afresh, with the uncommitted record.
        writer.become_leader(TP, 2)
        assert (await active(r)).values == {b"a": b"1"}
        # A new epoch while leading reloads too; the same epoch again does not.
        shard = await active(r)
        writer.become_leader(TP, 2)
        assert await active(r) is shard
        writer.become_leader(TP, 3)
        assert await active(r) is not shard
        await r.stop()

    run(scenario, auto_commit=False)


def test_deleting_the_partition_unloads_the_shard() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, _ = await leading(writer, timer)
        parked = r.write(0, lambda s, h: s.wait(b"k", h))
        pending = r.write(0, lambda s, _: s.put(b"a", b"1"))
        writer.delete(TP)
        assert await parked == "unloaded"
        assert await error_of(pending) == ErrorCode.not_coordinator
        with pytest.raises(CoordinatorError) as info:
            r.write(0, lambda s, _: s.put(b"x", b"1"))
        assert info.value.error_code == ErrorCode.not_coordinator
        await r.stop()

    run(scenario, auto_commit=False)


def logged_batches(writer: InMemoryPartitionWriter) -> list[tuple[int, int, bool, bool]]:
    """(producer id, producer epoch, transactional, control) of each batch of TP."""
    return [(h.producer_id, h.producer_epoch, h.is_transactional, h.is_control)
            for h, _ in iter_batches(writer.records(TP))]


def test_a_transactional_write_is_a_batch_of_its_producer_until_the_marker() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, shard = await leading(writer, timer)
        assert await r.write(0, lambda s, _: s.put(b"a", b"1")) == "ok"
        assert await r.write(0, lambda s, _: s.put_in_transaction(40, 2, b"b", b"2")) \
            == "pending"
        assert await r.write(0, lambda s, _: s.put_in_transaction(41, 0, b"c", b"3")) \
            == "pending"
        assert logged_batches(writer) == [(-1, -1, False, False), (40, 2, True, False),
                                          (41, 0, True, False)]
        assert shard.values == {b"a": b"1"}

        await r.complete_transaction(0, 40, 2, 9, TransactionResult.COMMIT)
        await r.complete_transaction(0, 41, 0, 9, TransactionResult.ABORT)
        # The markers are control batches of their producers, replayed to the live shard
        # at their offsets.
        assert logged_batches(writer)[3:] == [(40, 2, True, True), (41, 0, True, True)]
        assert shard.markers == [(3, 40, 2, TransactionResult.COMMIT),
                                 (4, 41, 0, TransactionResult.ABORT)]
        assert shard.values == {b"a": b"1", b"b": b"2"}
        assert shard.pending == {}
        await r.stop()

        # A load replays the same: the records with their producer, then the markers.
        again = runtime(writer, timer)
        reloaded = await active(again)
        assert reloaded.replayed == [(0, -1, -1, b"a"), (1, 40, 2, b"b"), (2, 41, 0, b"c")]
        assert reloaded.markers == shard.markers
        assert reloaded.values == shard.values
        await again.stop()

    run(scenario)


def test_a_transaction_marker_is_answered_once_committed() -> None:
    async def scenario(writer: InMemoryPartitionWriter, timer: Timer) -> None:
        r, shard = await leading(writer, timer, commit_timeout_ms=50)
        r.write(0, lambda s, _: s.put_in_transaction(40, 0, b"b", b"2"))
        done = r.complete_transaction(0, 40, 0, 1, TransactionResult.COMMIT, 5_000)
        await settle()
        # Applied to the shard at once, answered only once the marker is committed; the
        # caller's timeout (5 s) is the marker's, not the runtime's commit timeout.
        assert shard.values == {b"b": b"2"} and not done.done()
        await asyncio.sleep(0.1)
        assert not done.done()
        writer.commit(TP)
        assert await done is None
        # Not led here, or refused by the log: the error, and the shard saw nothing.
        with pytest.raises(CoordinatorError) as info:
            r.complete_transaction(3, 40, 0, 1, TransactionResult.COMMIT)
        assert info.value.error_code == ErrorCode.not_coordinator
        writer.refuse_next_append(KafkaError(ErrorCode.transaction_coordinator_fenced, "old"))
        with pytest.raises(CoordinatorError) as info:
            r.complete_transaction(0, 40, 0, 0, TransactionResult.ABORT)
        assert info.value.error_code == ErrorCode.transaction_coordinator_fenced
        assert len(shard.markers) == 1
        await r.stop()

    run(scenario, auto_commit=False)
