"""The replica manager on real logs in a temporary directory, without a broker: its one
append path (checks, the log_appended hook before the high watermark moves, wake-ups),
Produce's append (handle_produce_append: answered at once, or waiting for the ISR),
the leadership events it publishes after applying a cluster image, the log's open
transactions holding back the last stable offset, and the coordinator partition writer
built on it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from kio.schema.errors import ErrorCode

from kernel.cluster import ClusterImage, PartitionState, TopicImage
from kernel.config import BrokerConfig
from kernel.coordination import CoordinatorPartitionWriter
from kernel.hookspecs import hookimpl
from kernel.log import AppendOrigin, LogManager
from kernel.plugins import PluginFacade
from kernel.protocol.errors import KafkaError
from kernel.protocol.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    build_control_batch,
)
from kernel.purgatory import DelayedOperation, Purgatory, Timer
from kernel.replica.leadership import LeadershipChange, Role
from kernel.replica.manager import ReplicaManager
from kernel.replica.produce_append import ProducePartitionStatus, TransactionSupportedOperation

BROKER = 1
TOPIC_ID = uuid.UUID(int=7)


class Observer:
    """A plugin that records what the append path tells it, and when."""

    def __init__(self) -> None:
        self.replicas: ReplicaManager | None = None
        self.events: list[tuple[Any, ...]] = []

    @hookimpl
    def kafkernel_log_appended(self, topic: str, partition: int, base_offset: int,
                               last_offset: int) -> None:
        assert self.replicas is not None
        p = self.replicas.get_partition(topic, partition)
        assert p is not None
        self.events.append(("appended", base_offset, last_offset, p.high_watermark))

    @hookimpl
    def kafkernel_high_watermark_changed(self, topic: str, partition: int,
                                         high_watermark: int) -> None:
        self.events.append(("high watermark", high_watermark))


class Replicas:
    def __init__(self, tmp_path: Path) -> None:
        self.observer = Observer()
        self.timer = Timer()
        self.produce = Purgatory[Any]("Produce", self.timer)
        self.fetch = Purgatory[Any]("Fetch", self.timer)
        self.delete_records = Purgatory[Any]("DeleteRecords", self.timer)
        self.logs = LogManager([tmp_path], BrokerConfig())
        self.logs.load()
        self.manager = ReplicaManager(
            BROKER, self.logs, self.produce, self.fetch, self.delete_records,
            PluginFacade((), "test", [self.observer]), structlog.get_logger(),
        )
        self.observer.replicas = self.manager
        self.image: ClusterImage | None = None

    def apply(self, topics: dict[str, dict[int, PartitionState]]) -> None:
        images = {name: TopicImage(name, uuid.uuid5(TOPIC_ID, name), parts)
                  for name, parts in topics.items()}
        new = ClusterImage("cluster", BROKER, {}, images,
                           {t.topic_id: t for t in images.values()})
        self.manager.apply_image(self.image, new)
        self.image = new

    def close(self) -> None:
        self.timer.shutdown()
        self.logs.close()


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    r = Replicas(tmp_path)
    yield r
    r.close()


def state(leader: int = BROKER, epoch: int = 0, isr: tuple[int, ...] = (BROKER,),
          partition: int = 0) -> PartitionState:
    return PartitionState(partition, (BROKER, 2), isr, leader, epoch)


def batch(*values: bytes) -> bytes:
    return build_batch([SimpleRecord(value=v, key=b"k", timestamp=1) for v in values])


class Waiter(DelayedOperation):
    """A fetch-like operation that completes once ``condition()`` holds."""

    def __init__(self, condition: Any) -> None:
        super().__init__(60_000)
        self.condition = condition
        self.completed = False

    def try_complete(self) -> bool:
        return self.force_complete() if self.condition() else False

    def on_complete(self) -> None:
        self.completed = True

    def on_expiration(self) -> None:
        pass


def test_one_append_path_hooks_before_the_high_watermark_moves(replicas: Replicas) -> None:
    replicas.apply({"t": {0: state()}})
    p = replicas.manager.get_partition("t", 0)
    assert p is not None and p.is_leader
    info = replicas.manager.append_records(p, batch(b"a", b"b"), 1, 1_000)
    assert (info.first_offset, info.last_offset, p.high_watermark) == (0, 1, 2)
    # The hook sees the records before the high watermark passes them.
    assert replicas.observer.events == [("appended", 0, 1, 0), ("high watermark", 2)]
    assert replicas.logs.get_log("t", 0) is p.log and p.log.log_end_offset == 2


def test_an_append_waiting_for_followers_wakes_only_fetches(replicas: Replicas) -> None:
    replicas.apply({"t": {0: state(isr=(BROKER, 2))}})
    p = replicas.manager.get_partition("t", 0)
    assert p is not None
    # A follower's long poll waits for the log end; a consumer's for the high watermark.
    follower = Waiter(lambda: p.log.log_end_offset > 0)
    consumer = Waiter(lambda: p.high_watermark > 0)
    replicas.fetch.try_complete_else_watch(follower, [p.key])
    replicas.fetch.try_complete_else_watch(consumer, [p.key])
    replicas.manager.append_records(p, batch(b"a"), -1, 1_000)
    assert follower.completed and not consumer.completed
    assert p.high_watermark == 0 and replicas.observer.events == [("appended", 0, 0, 0)]
    replicas.manager.follower_fetched(p, 2, 1, 0)
    assert consumer.completed and p.high_watermark == 1


def test_appends_refused_append_nothing(replicas: Replicas) -> None:
    replicas.apply({"t": {0: state(isr=(BROKER,))}, "f": {0: state(leader=2)}})
    leader = replicas.manager.get_partition("t", 0)
    follower = replicas.manager.get_partition("f", 0)
    assert leader is not None and follower is not None
    with pytest.raises(KafkaError) as info:
        replicas.manager.append_records(follower, batch(b"a"), 1, 1_000)
    assert info.value.error_code == ErrorCode.not_leader_or_follower
    replicas.logs.update_topic_config("t", {"min.insync.replicas": "2"})
    with pytest.raises(KafkaError) as info:
        replicas.manager.append_records(leader, batch(b"a"), -1, 1_000)
    assert info.value.error_code == ErrorCode.not_enough_replicas
    with pytest.raises(KafkaError) as info:
        replicas.manager.append_records(leader, b"\0" * 70, 1, 1_000)
    assert info.value.error_code == ErrorCode.corrupt_message
    assert leader.log.log_end_offset == 0 and replicas.observer.events == []


def produce(replicas: Replicas, statuses: list[ProducePartitionStatus], acks: int,
            timeout_ms: int = 60_000) -> Any:
    assert replicas.image is not None
    return replicas.manager.handle_produce_append(
        statuses, acks, timeout_ms, 1_000, replicas.image, None,
        TransactionSupportedOperation.ADD_PARTITION)


def test_produce_append_answers_at_once_without_a_wait(replicas: Replicas) -> None:
    replicas.apply({"t": {0: state()}, "f": {0: state(leader=2)}})
    ok, follower, absent, refused = (
        ProducePartitionStatus("t", 0, batch(b"a", b"b")),
        ProducePartitionStatus("f", 0, batch(b"a")),
        ProducePartitionStatus("absent", 0, batch(b"a")),
        ProducePartitionStatus("t", 0, batch(b"a"), error=ErrorCode.topic_authorization_failed))
    # acks=1 with nothing to flush: no coroutine, every status final.
    assert produce(replicas, [ok, follower, absent, refused], 1) is None
    assert (ok.error, ok.base_offset, ok.required_offset, ok.log_start_offset) == (
        ErrorCode.none, 0, 2, 0)
    assert follower.error == ErrorCode.not_leader_or_follower
    assert absent.error == ErrorCode.unknown_topic_or_partition
    # A status the handler refused is left alone and appends nothing.
    assert refused.base_offset == -1 and ok.partition is not None
    assert ok.partition.log_end_offset == 2


def test_produce_append_with_acks_all_waits_for_the_isr(replicas: Replicas) -> None:
    replicas.apply({"t": {0: state(isr=(BROKER, 2))}})
    p = replicas.manager.get_partition("t", 0)
    assert p is not None

    async def scenario() -> tuple[ErrorCode, ErrorCode]:
        replicated = ProducePartitionStatus("t", 0, batch(b"a"))
        waiting = produce(replicas, [replicated], -1)
        assert waiting is not None
        task = asyncio.ensure_future(waiting)
        await asyncio.sleep(0.05)
        assert not task.done() and replicated.error == ErrorCode.none
        replicas.manager.follower_fetched(p, 2, 1, 0)  # the follower has offset 0
        await asyncio.wait_for(task, 5)
        unreplicated = ProducePartitionStatus("t", 0, batch(b"b"))
        late = produce(replicas, [unreplicated], -1, timeout_ms=20)
        assert late is not None
        await asyncio.wait_for(late, 5)
        return replicated.error, unreplicated.error

    assert asyncio.run(scenario()) == (ErrorCode.none, ErrorCode.request_timed_out)


def test_leadership_events_follow_the_image(replicas: Replicas) -> None:
    heard: list[LeadershipChange] = []
    replicas.apply({"t": {0: state(), 1: state(leader=2, partition=1)}})
    # A new listener hears the current roles first.
    replicas.manager.add_leadership_listener(heard.append)
    assert heard == [LeadershipChange("t", 0, Role.LEADER, 0),
                     LeadershipChange("t", 1, Role.FOLLOWER, 0)]
    heard.clear()
    # An ISR change is no change of role; a new epoch or a new role is.
    replicas.apply({"t": {0: state(isr=(BROKER, 2)), 1: state(leader=2, partition=1)}})
    assert heard == []
    replicas.apply({"t": {0: state(leader=2, epoch=1), 1: state(epoch=1, partition=1)}})
    assert heard == [LeadershipChange("t", 0, Role.FOLLOWER, 1),
                     LeadershipChange("t", 1, Role.LEADER, 1)]
    # The replica has its new role when the event is heard.
    p = replicas.manager.get_partition("t", 1)
    assert p is not None and p.is_leader and p.leader_epoch == 1
    heard.clear()
    replicas.apply({})
    assert heard == [LeadershipChange("t", 0, Role.DELETED, -1),
                     LeadershipChange("t", 1, Role.DELETED, -1)]
    replicas.manager.remove_leadership_listener(heard.append)
    heard.clear()
    replicas.apply({"t": {0: state()}})
    assert heard == []


def test_a_failing_listener_hides_nothing_from_the_others(replicas: Replicas) -> None:
    heard: list[LeadershipChange] = []

    def failing(change: LeadershipChange) -> None:
        raise RuntimeError("listener bug")

    replicas.manager.add_leadership_listener(failing)
    replicas.manager.add_leadership_listener(heard.append)
    replicas.apply({"t": {0: state()}})
    assert heard == [LeadershipChange("t", 0, Role.LEADER, 0)]
    assert replicas.manager.get_partition("t", 0) is not None


def txn_batch(pid: int, *values: bytes) -> bytes:
    return build_batch([SimpleRecord(value=v, key=b"k", timestamp=1) for v in values],
                       producer_id=pid, producer_epoch=0, base_sequence=0,
                       is_transactional=True)


def test_the_log_holds_the_last_stable_offset_until_a_replicated_marker(
    replicas: Replicas
) -> None:
    replicas.apply({"t": {0: state(isr=(BROKER, 2))}})
    p = replicas.manager.get_partition("t", 0)
    assert p is not None
    manager = replicas.manager
    manager.append_records(p, batch(b"a", b"b"), 1, 1_000)          # 0-1
    manager.append_records(p, txn_batch(7, b"c"), 1, 1_000)         # 2, opens at 2
    manager.follower_fetched(p, 2, 3, 0)
    assert (p.high_watermark, p.last_stable_offset) == (3, 2)
    # A READ_COMMITTED long poll waiting past the held offset is woken once the high
    # watermark passes the marker, not when the marker is appended.
    read_committed = Waiter(lambda: p.last_stable_offset > 2)
    replicas.fetch.try_complete_else_watch(read_committed, [p.key])
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=7, producer_epoch=0,
                                 coordinator_epoch=0, timestamp=1)
    manager.append_records(p, marker, 1, 1_000, origin=AppendOrigin.COORDINATOR)  # 3
    assert (p.high_watermark, p.last_stable_offset) == (3, 2)
    assert p.log.producer_state.ongoing_txns == {}
    assert not read_committed.completed
    manager.follower_fetched(p, 2, 4, 0)
    assert read_committed.completed and p.last_stable_offset == p.high_watermark == 4


def test_the_coordinator_partition_writer(replicas: Replicas) -> None:
    tp = ("__state", 0)
    replicas.apply({"__state": {0: state(isr=(BROKER, 2))}})
    writer = CoordinatorPartitionWriter(replicas.manager)
    heard: list[LeadershipChange] = []
    writer.add_leadership_listener(heard.append)
    assert heard == [LeadershipChange("__state", 0, Role.LEADER, 0)]
    p = replicas.manager.get_partition(*tp)
    assert p is not None

    async def scenario() -> list[tuple[str, bool]]:
        done: list[tuple[str, bool]] = []
        assert writer.append(tp, batch(b"a", b"b")) == 2
        assert writer.high_watermark(tp) == 0
        first = writer.wait_until_committed(tp, 1, 60_000, lambda c: done.append(("1", c)))
        second = writer.wait_until_committed(tp, 2, 60_000, lambda c: done.append(("2", c)))
        expiring = writer.wait_until_committed(tp, 2, 20, lambda c: done.append(("t", c)))
        await asyncio.sleep(0.1)
        assert done == [("t", False)] and not first.is_completed
        # One move of the high watermark ends both waits, in the order they started.
        replicas.manager.follower_fetched(p, 2, 2, 0)
        assert first.is_completed and second.is_completed and expiring.is_completed
        now = writer.wait_until_committed(tp, 2, 60_000, lambda c: done.append(("now", c)))
        assert now.is_completed
        return done

    assert asyncio.run(scenario()) == [("t", False), ("1", True), ("2", True), ("now", True)]
    assert (writer.log_start_offset(tp), writer.log_end_offset(tp)) == (0, 2)
    assert bytes(writer.read(tp, 0, 1)) == bytes(p.log.read(0, 1 << 20).records)
    # min.insync.replicas applies: the coordinators write with acks=all.
    replicas.logs.update_topic_config("__state", {"min.insync.replicas": "3"})
    with pytest.raises(KafkaError) as info:
        writer.append(tp, batch(b"c"))
    assert info.value.error_code == ErrorCode.not_enough_replicas
    replicas.apply({})
    assert heard[-1] == LeadershipChange("__state", 0, Role.DELETED, -1)
    with pytest.raises(KafkaError):
        writer.high_watermark(tp)


def test_only_the_coordinator_origin_appends_control_batches(replicas: Replicas) -> None:
    replicas.apply({"t": {0: state()}})
    p = replicas.manager.get_partition("t", 0)
    assert p is not None
    marker = build_control_batch(ControlRecordType.COMMIT, producer_id=5, producer_epoch=0,
                                 coordinator_epoch=0, timestamp=1)
    with pytest.raises(KafkaError) as refused:
        replicas.manager.append_records(p, marker, 1, 1_000)
    assert refused.value.error_code == ErrorCode.invalid_record
    assert p.log.log_end_offset == 0
    info = replicas.manager.append_records(p, marker, 1, 1_000,
                                           origin=AppendOrigin.COORDINATOR)
    assert (info.first_offset, info.has_control, p.high_watermark) == (0, True, 1)
