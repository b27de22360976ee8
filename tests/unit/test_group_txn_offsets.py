"""Transactional offset commits (TxnOffsetCommit) in the group shard, without sockets:
pending per producer until the marker, materialised on COMMIT and dropped on ABORT, live
and at load; OffsetFetch's require_stable; Kafka's validation; the race with a plain
commit for the same partition (the later record in the log wins)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.txn_offset_commit.v4.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

from kernel.coordination import TransactionResult
from kernel.coordination.runtime import replay_batches
from kernel.protocol.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    build_control_batch,
)
from plugins.coordinator.shard import GroupCoordinatorShard
from tests.unit.group_driver import CONFIG, GROUP, Runtime, ctx, encodes

PID, EPOCH = 4000, 2
TP = ("orders", 0)


class TxnRuntime(Runtime):
    """The driver, keeping each write as the batch the runtime would append (with its
    producer) and each marker, so the log can be loaded into a fresh shard."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[tuple[Any, ...]] = []

    def apply(self, result: Any, handle: Any = None) -> Any:
        if result.records:
            self.batches.append(("data", result.producer_id, result.producer_epoch,
                                 result.records))
        return super().apply(result, handle)

    def txn_commit(self, offsets: dict[tuple[str, int], int], *, producer_id: int = PID,
                   member_id: str = "", generation: int = -1, group: str = GROUP,
                   metadata: str = "") -> dict[tuple[str, int], ErrorCode]:
        topics: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset,
                committed_metadata=metadata))
        request = TxnOffsetCommitRequest(
            transactional_id="txn", group_id=group, producer_id=producer_id,
            producer_epoch=EPOCH, generation_id=generation, member_id=member_id,
            group_instance_id=None, topics=tuple(
                TxnOffsetCommitRequestTopic(name=t, partitions=tuple(p))
                for t, p in topics.items()))
        result = self.shard.commit_transactional_offsets(ctx(4), request)
        encodes(result.response)
        if result.records:
            assert (result.producer_id, result.producer_epoch,
                    result.transactional_id) == (producer_id, EPOCH, "txn")
        response = self.apply(result)
        return {(t.name, p.partition_index): p.error_code
                for t in response.topics for p in t.partitions}

    def marker(self, result: TransactionResult, producer_id: int = PID) -> None:
        self.batches.append(("marker", producer_id, EPOCH, result))
        # The runtime replays a marker it wrote at its offset; live order is what counts.
        self.shard.replay_end_transaction(self.end_offset() - 1, producer_id, EPOCH, result)

    def end_offset(self) -> int:
        return sum(len(b[3]) if b[0] == "data" else 1 for b in self.batches)

    def stable_fetch(self, group: str = GROUP,
                     topics: dict[str, list[int]] | None = None) -> dict[Any, Any]:
        request = OffsetFetchRequestGroup(group_id=group, topics=None if topics is None else tuple(
            OffsetFetchRequestTopics(name=t, partition_indexes=tuple(p))
            for t, p in topics.items()))
        response = self.apply(self.shard.fetch_offsets(ctx(9), request, require_stable=True))
        assert response.error_code == ErrorCode.none
        return {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                for t in response.topics for p in t.partitions}

    def log_bytes(self) -> bytes:
        out = []
        offset = 0
        for batch in self.batches:
            if batch[0] == "data":
                _, pid, epoch, records = batch
                out.append(build_batch(
                    [SimpleRecord(key=k, value=v) for k, v in records], base_offset=offset,
                    producer_id=pid, producer_epoch=epoch, is_transactional=pid >= 0))
                offset += len(records)
            else:
                _, pid, epoch, result = batch
                kind = (ControlRecordType.COMMIT if result is TransactionResult.COMMIT
                        else ControlRecordType.ABORT)
                out.append(build_control_batch(kind, producer_id=pid, producer_epoch=epoch,
                                               coordinator_epoch=0, timestamp=0,
                                               base_offset=offset))
                offset += 1
        return b"".join(out)

    def loaded_copy(self) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(CONFIG)
        replay_batches(shard, self.log_bytes(), 0)
        shard.on_loaded()
        return shard


def test_transactional_offsets_are_pending_until_the_commit_marker() -> None:
    rt = TxnRuntime()
    rt.commit("", -1, {TP: 5})
    assert rt.txn_commit({TP: 10, ("orders", 1): 11}) == {TP: ErrorCode.none,
                                                         ("orders", 1): ErrorCode.none}
    # The records go out as the producer's batch; the group sees the old offsets, and a
    # consumer asking for stable offsets is told to retry.
    assert rt.batches[-1][:3] == ("data", PID, EPOCH)
    assert rt.fetch() == {TP: (5, "")}
    assert rt.shard.pending_offsets(PID) == {GROUP: {TP: 10, ("orders", 1): 11}}
    assert rt.stable_fetch(topics={"orders": [0, 1, 2]}) == {
        TP: (-1, ErrorCode.unstable_offset_commit),
        ("orders", 1): (-1, ErrorCode.unstable_offset_commit),
        ("orders", 2): (-1, ErrorCode.none)}
    assert rt.stable_fetch() == {TP: (-1, ErrorCode.unstable_offset_commit)}

    rt.marker(TransactionResult.COMMIT)
    assert rt.fetch() == {TP: (10, ""), ("orders", 1): (11, "")}
    assert rt.stable_fetch() == {TP: (10, ErrorCode.none), ("orders", 1): (11, ErrorCode.none)}
    assert rt.shard.pending_offsets(PID) == {}


def test_an_abort_marker_drops_the_pending_offsets() -> None:
    rt = TxnRuntime()
    rt.commit("", -1, {TP: 5})
    rt.txn_commit({TP: 10})
    rt.marker(TransactionResult.ABORT)
    assert rt.fetch() == {TP: (5, "")}
    assert rt.stable_fetch() == {TP: (5, ErrorCode.none)}
    # A marker for a producer with nothing pending here changes nothing.
    rt.marker(TransactionResult.COMMIT, producer_id=PID + 9)
    assert rt.fetch() == {TP: (5, "")}


def test_the_later_record_wins_when_plain_and_transactional_commits_race() -> None:
    rt = TxnRuntime()
    rt.txn_commit({TP: 10})
    rt.commit("", -1, {TP: 7})  # written after the transactional one
    rt.marker(TransactionResult.COMMIT)
    assert rt.fetch() == {TP: (7, "")}

    rt.commit("", -1, {("orders", 1): 7})
    rt.txn_commit({("orders", 1): 10}, producer_id=PID + 1)  # written after the plain one
    rt.marker(TransactionResult.COMMIT, producer_id=PID + 1)
    assert rt.fetch() == {TP: (7, ""), ("orders", 1): (10, "")}
    # A load of the same log comes to the same offsets, by the records' offsets.
    assert dict(rt.loaded_copy().offsets(GROUP)) == dict(rt.shard.offsets(GROUP))


def test_a_load_keeps_open_transactions_pending_until_their_marker() -> None:
    rt = TxnRuntime()
    rt.commit("", -1, {TP: 1})
    rt.txn_commit({TP: 10})
    rt.txn_commit({("orders", 1): 20}, producer_id=PID + 1)
    rt.marker(TransactionResult.ABORT, producer_id=PID + 1)

    shard = rt.loaded_copy()
    assert {tp: o.offset for tp, o in shard.offsets(GROUP).items()} == {TP: 1}
    assert shard.pending_offsets(PID) == {GROUP: {TP: 10}}
    assert shard.pending_offsets(PID + 1) == {}
    shard.replay_end_transaction(rt.end_offset(), PID, EPOCH, TransactionResult.COMMIT)
    assert {tp: o.offset for tp, o in shard.offsets(GROUP).items()} == {TP: 10}


def test_txn_offset_commit_validation_as_kafka() -> None:
    rt = TxnRuntime()
    # A group that does not exist: accepted without a generation (a simple group), else
    # ILLEGAL_GENERATION.
    assert rt.txn_commit({TP: 1}, generation=3, member_id="m", group="gone") == {
        TP: ErrorCode.illegal_generation}
    assert rt.shard.group("gone") is None
    assert rt.txn_commit({TP: 1}, group="") == {TP: ErrorCode.invalid_group_id}
    assert rt.txn_commit({TP: 1}, metadata="x" * (CONFIG.offset_metadata_max_bytes + 1)) \
        == {TP: ErrorCode.offset_metadata_too_large}

    (a, _b), generation = rt.stable_group("a", "b")
    assert rt.txn_commit({TP: 2}, member_id="ghost", generation=generation) == {
        TP: ErrorCode.unknown_member_id}
    assert rt.txn_commit({TP: 2}, member_id=a, generation=generation + 1) == {
        TP: ErrorCode.illegal_generation}
    written = len(rt.batches)
    # Unlike OffsetCommit, neither the group's state nor a missing member id (v0-2)
    # refuses a transactional commit.
    assert rt.txn_commit({TP: 2}, member_id=a, generation=generation) == {TP: ErrorCode.none}
    assert rt.txn_commit({TP: 3}) == {TP: ErrorCode.none}
    assert len(rt.batches) == written + 2


def test_a_tombstone_drops_the_pending_offsets_of_its_partition() -> None:
    rt = TxnRuntime()
    rt.txn_commit({TP: 10, ("orders", 1): 11})
    response = rt.apply(rt.shard.delete_offsets(ctx(0), OffsetDeleteRequest(
        group_id=GROUP, topics=(OffsetDeleteRequestTopic(name="orders", partitions=(
            OffsetDeleteRequestPartition(partition_index=0),)),))))
    assert response.error_code == ErrorCode.none
    # Only pending here, yet a tombstone is written (Kafka's rule), and drops it.
    assert rt.batches[-1][1] == -1 and len(rt.batches[-1][3]) == 1
    rt.marker(TransactionResult.COMMIT)
    assert rt.fetch() == {("orders", 1): (11, "")}
