"""The coordinator runtime with a toy key-value shard (nothing of the group coordinator),
on a real broker: records reach the log and come back by replay after a restart,
responses wait for the high watermark, parked requests complete from later writes,
timers fire as operations, a failed append rebuilds the shard from the log, and
deleting the topic unloads it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.cluster import BrokerRegistration, NewTopic
from kernel.coordination import CoordinatorError, CoordinatorRuntime, TransactionResult
from kernel.testing.embedded import EmbeddedBroker

TOPIC = "__toy_state"


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


class KeyValueShard:
    """Keys and values; ``wait`` parks until its key is written."""

    def __init__(self, partition: int) -> None:
        self.values: dict[bytes, bytes] = {}
        self.waiting: dict[bytes, list[Hashable]] = {}
        # (offset, producer id, producer epoch, key) of each record replayed at load.
        self.replayed: list[tuple[int, int, int, bytes]] = []

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: bytes, value: bytes | None) -> None:
        self.replayed.append((offset, producer_id, producer_epoch, key))
        self._set(key, value)

    def replay_end_transaction(self, offset: int, producer_id: int, producer_epoch: int,
                               result: TransactionResult) -> None:
        pass

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


class Toy:
    """A runtime over TOPIC on an embedded broker, driven from the test thread."""

    def __init__(self, broker: EmbeddedBroker, *, commit_timeout_ms: int = 5000,
                 replicas: tuple[int, ...] = (1,), configs: dict[str, str] | None = None) -> None:
        self.broker = broker
        self.commit_timeout_ms = commit_timeout_ms
        self.runtime = self.on_loop(lambda: self._start(replicas, configs or {}))

    async def _start_async(self, replicas: tuple[int, ...],
                           configs: dict[str, str]) -> CoordinatorRuntime[KeyValueShard]:
        kernel = self.broker.broker
        assert kernel is not None
        if kernel.metadata.image.topic(TOPIC) is None:
            await kernel.metadata.create_topics([NewTopic(
                TOPIC, 1, len(replicas), configs={"cleanup.policy": "compact", **configs},
                assignments={0: replicas}, internal=True,
            )])
        runtime = CoordinatorRuntime(kernel, TOPIC, KeyValueShard,
                                     commit_timeout_ms=self.commit_timeout_ms)
        runtime.start()
        return runtime

    def _start(self, replicas: tuple[int, ...], configs: dict[str, str]) -> Any:
        return self._start_async(replicas, configs)

    def on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the broker's loop; await what it returns if awaitable."""

        async def run() -> Any:
            value = fn()
            if asyncio.isfuture(value) or asyncio.iscoroutine(value):
                return await value
            return value

        return self.broker.call(run())

    def submit(self, op: Callable[[KeyValueShard, Hashable], Result]) -> asyncio.Future[Any]:
        """Start a write; returns its future without waiting."""

        async def run() -> asyncio.Future[Any]:
            return self.runtime.write(0, op)

        return self.broker.call(run())

    def result(self, future: asyncio.Future[Any], timeout: float = 5.0) -> Any:
        async def run() -> Any:
            return await asyncio.wait_for(asyncio.shield(future), timeout)

        return self.broker.call(run(), timeout + 5)

    def write(self, op: Callable[[KeyValueShard, Hashable], Result]) -> Any:
        return self.result(self.submit(op))

    def wait_active(self) -> KeyValueShard:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            shards = self.on_loop(self.runtime.loaded_shards)
            if 0 in shards:
                return shards[0]
            time.sleep(0.01)
        raise AssertionError("the shard did not load")

    def stop(self) -> None:
        if self.broker.broker is not None and self.broker._loop is not None:
            self.on_loop(self.runtime.stop)


@pytest.fixture
def toy(broker: EmbeddedBroker) -> Iterator[Toy]:
    t = Toy(broker)
    t.wait_active()
    yield t
    t.stop()


def log_end_offset(broker: EmbeddedBroker) -> int:
    assert broker.broker is not None
    partition = broker.broker.replicas.get_partition(TOPIC, 0)
    assert partition is not None
    return int(partition.log.log_end_offset)


def test_writes_reach_the_log_and_come_back_after_a_restart(
    broker: EmbeddedBroker, toy: Toy
) -> None:
    assert toy.write(lambda s, _: s.put(b"a", b"1")) == "ok"
    assert toy.write(lambda s, _: s.put(b"b", b"2")) == "ok"
    assert toy.write(lambda s, _: s.put(b"a", None)) == "ok"
    assert log_end_offset(broker) == 3
    toy.stop()
    broker.restart()
    again = Toy(broker)
    shard = again.wait_active()
    assert shard.values == {b"b": b"2"}
    # Each record comes back with its offset; the runtime writes without a producer id.
    assert shard.replayed == [(0, -1, -1, b"a"), (1, -1, -1, b"b"), (2, -1, -1, b"a")]
    assert again.write(lambda s, r: s.wait(b"b", r)) == b"2"
    again.stop()


def test_requests_before_the_load_ends_and_without_leadership(broker: EmbeddedBroker) -> None:
    toy = Toy(broker)

    async def racing_the_load() -> ErrorCode:
        runtime: CoordinatorRuntime[KeyValueShard] = CoordinatorRuntime(
            broker.broker, TOPIC, KeyValueShard)  # type: ignore[arg-type]
        runtime.start()
        try:
            runtime.write(0, lambda s, _: s.put(b"x", b"1"))
        except CoordinatorError as e:
            return e.error_code
        finally:
            await runtime.stop()
        raise AssertionError("a write before the load must fail")

    assert broker.call(racing_the_load()) == ErrorCode.coordinator_load_in_progress
    toy.wait_active()
    with pytest.raises(CoordinatorError) as info:
        toy.on_loop(lambda: toy.runtime.write(7, lambda s, _: s.put(b"x", b"1")))
    assert info.value.error_code == ErrorCode.not_coordinator
    toy.stop()


def test_a_parked_request_completes_from_a_later_write(toy: Toy) -> None:
    parked = toy.submit(lambda s, r: s.wait(b"k", r))
    time.sleep(0.05)
    assert not parked.done()
    assert toy.write(lambda s, _: s.put(b"k", b"v")) == "ok"
    assert toy.result(parked) == b"v"


def test_timers_fire_as_operations_and_cancel(toy: Toy) -> None:
    woken = toy.submit(lambda s, r: s.wait(b"t1", r))
    assert toy.write(lambda s, _: s.arm(b"t1", 30)) == "armed"
    assert toy.write(lambda s, _: s.arm(b"t2", 30)) == "armed"
    assert toy.write(lambda s, _: s.disarm(b"t2")) == "disarmed"
    # Re-arming replaces: t3 fires once, after the second delay.
    toy.write(lambda s, _: s.arm(b"t3", 10_000))
    toy.write(lambda s, _: s.arm(b"t3", 0))
    assert toy.result(woken) == b"fired"
    time.sleep(0.1)
    assert toy.wait_active().values == {b"t1": b"fired", b"t3": b"fired"}


def test_responses_wait_for_the_high_watermark(broker: EmbeddedBroker) -> None:
    assert broker.broker is not None
    backend: Any = broker.broker.metadata
    # A follower that never fetches: the high watermark stays until we move it.
    broker.call(backend.register_broker(BrokerRegistration(2, "127.0.0.1", 1)))
    toy = Toy(broker, replicas=(1, 2), commit_timeout_ms=300)
    toy.wait_active()
    partition = broker.broker.replicas.get_partition(TOPIC, 0)
    assert partition is not None and partition.isr == (1, 2)

    pending = toy.submit(lambda s, _: s.put(b"a", b"1"))
    # Reads wait for what was written before them, too.
    (read,) = toy.on_loop(lambda: (toy.runtime.read(0, lambda s: dict(s.values)),))
    time.sleep(0.1)
    assert not pending.done() and not read.done()
    toy.on_loop(lambda: partition.update_follower_fetch_state(
        2, partition.log.log_end_offset, partition.log.log_start_offset))
    assert toy.result(pending) == "ok"
    assert toy.result(read) == {b"a": b"1"}

    never = toy.submit(lambda s, _: s.put(b"b", b"2"))
    with pytest.raises(CoordinatorError) as info:
        toy.result(never)
    assert info.value.error_code == ErrorCode.request_timed_out
    toy.stop()


def test_a_failed_append_rebuilds_the_shard_from_the_log(broker: EmbeddedBroker) -> None:
    toy = Toy(broker, configs={"max.message.bytes": "2000"})
    toy.wait_active()
    assert toy.write(lambda s, _: s.put(b"kept", b"1")) == "ok"
    parked = toy.submit(lambda s, r: s.wait(b"never", r))
    with pytest.raises(CoordinatorError) as info:
        toy.write(lambda s, _: s.put(b"huge", b"x" * 5000))
    assert info.value.error_code == ErrorCode.message_too_large
    # Parked requests were answered by the unloaded shard; the new one has only the log.
    assert toy.result(parked) == "unloaded"
    assert toy.wait_active().values == {b"kept": b"1"}
    assert toy.write(lambda s, _: s.put(b"after", b"2")) == "ok"
    toy.stop()


def test_deleting_the_topic_unloads_the_shard(broker: EmbeddedBroker, toy: Toy) -> None:
    parked = toy.submit(lambda s, r: s.wait(b"k", r))
    assert broker.broker is not None
    broker.call(broker.broker.metadata.delete_topics([TOPIC]))
    assert toy.result(parked) == "unloaded"
    with pytest.raises(CoordinatorError) as info:
        toy.on_loop(lambda: toy.runtime.write(0, lambda s, _: s.put(b"x", b"1")))
    assert info.value.error_code == ErrorCode.not_coordinator
