"""The leader's snapshot answers in the sans-io core (Kafka 4.3.1's KafkaRaftClient):
Fetch answers SnapshotId at offset 0 and below the oldest snapshot's epoch, and
FetchSnapshot serves slices of a snapshot file with Kafka's errors; and the controller
quorum's snapshot files are found again when the log reopens."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch_snapshot.v1 import request as fs_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64

from plugins.metadata_kraft.raft import messages as m
from plugins.metadata_kraft.raft.core import Flush, RaftNode, Respond
from plugins.metadata_kraft.raft.kafka_log import KafkaRaftLog
from plugins.metadata_kraft.raft.log import InMemoryRaftLog, Validation
from plugins.metadata_kraft.raft.quorum_store import ElectionRecord
from plugins.metadata_kraft.raft.state import Leader, RaftConfig, VoterSet
from plugins.metadata_kraft.snapshots import SnapshotId, write_snapshot

SNAPSHOT = bytes(range(256)) * 4  # what the file holds does not matter to the leader


def _leader() -> tuple[RaftNode, InMemoryRaftLog]:
    """The leader of a one-voter quorum at epoch 1 with six records, snapshot 4-1."""
    log = InMemoryRaftLog()
    node = RaftNode(node_id=1, voters=VoterSet(frozenset({1})), log=log,
                    election=ElectionRecord(), now_ms=0, rng=random.Random(0),
                    cluster_id="kraft")
    actions = node.on_tick(10**4)
    assert isinstance(node.quorum.state, Leader)
    assert any(isinstance(a, Flush) for a in actions)
    node.append([b"a", b"b", b"c", b"d", b"e"], 10**4)
    log.flush(log.end_offset)
    node.on_flushed(10**4)
    log.snapshots[(4, 1)] = SNAPSHOT
    return node, log


def _answer(node: RaftNode, request: Any) -> Any:
    (response,) = [a.response for a in node.on_request(7, request, 10**4)
                   if isinstance(a, Respond)]
    return response


def _fetch(node: RaftNode, offset: int, last_epoch: int) -> Any:
    response = _answer(node, m.fetch_request("kraft", 5, 1, offset, last_epoch, 0, 1 << 20))
    return response.responses[0].partitions[0]


def test_fetch_from_offset_zero_answers_the_latest_snapshot_not_bootstrap() -> None:
    node, log = _leader()
    part = _fetch(node, 0, 0)
    assert (part.snapshot_id.end_offset, part.snapshot_id.epoch) == (4, 1)
    assert not part.records and part.diverging_epoch.epoch == -1
    del log.snapshots[(4, 1)]
    log.snapshots[(0, 0)] = SNAPSHOT  # the bootstrap snapshot is never answered
    part = _fetch(node, 0, 0)
    assert part.snapshot_id.epoch == -1 and part.records


def test_fetch_in_an_epoch_older_than_the_oldest_snapshot_answers_the_latest() -> None:
    node, log = _leader()
    log.snapshots[(5, 1)] = SNAPSHOT
    part = _fetch(node, 3, 0)
    assert (part.snapshot_id.end_offset, part.snapshot_id.epoch) == (5, 1)
    part = _fetch(node, 3, 1)  # inside the log in the snapshot's epoch: records
    assert part.snapshot_id.epoch == -1 and part.records


def test_validation_below_the_log_start_is_the_latest_snapshot() -> None:
    _, log = _leader()
    assert log.validate(0, 0) == Validation.valid()  # an empty follower, log from 0
    assert log.validate(2, 0) == Validation("snapshot", 1, 4)
    assert log.validate(6, 1) == Validation.valid()


def _fetch_snapshot(node: RaftNode, end_offset: int = 4, epoch: int = 1, position: int = 0,
                    max_bytes: int = 100, leader_epoch: int = 1, topic: str = m.METADATA_TOPIC,
                    cluster_id: str | None = "kraft") -> Any:
    part = fs_req.PartitionSnapshot(
        partition=i32(0), current_leader_epoch=i32(leader_epoch),
        snapshot_id=fs_req.SnapshotId(end_offset=i64(end_offset), epoch=i32(epoch)),
        position=i64(position))
    return _answer(node, m.FetchSnapshotRequest(
        cluster_id=cluster_id, replica_id=BrokerId(5), max_bytes=i32(max_bytes),
        topics=(fs_req.TopicSnapshot(name=TopicName(topic), partitions=(part,)),)))


def test_fetch_snapshot_serves_slices_of_max_bytes() -> None:
    node, _ = _leader()
    data = b""
    while len(data) < len(SNAPSHOT):
        part = _fetch_snapshot(node, position=len(data), max_bytes=300).topics[0].partitions[0]
        assert part.error_code is ErrorCode.none
        assert (part.size, part.position) == (len(SNAPSHOT), len(data))
        assert (part.snapshot_id.end_offset, part.snapshot_id.epoch) == (4, 1)
        assert part.current_leader.leader_id == 1
        assert 0 < len(part.unaligned_records) <= 300
        data += bytes(part.unaligned_records)
    assert data == SNAPSHOT


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"end_offset": 3}, ErrorCode.snapshot_not_found),
    ({"end_offset": 0, "epoch": 0}, ErrorCode.snapshot_not_found),  # bootstrap: never
    ({"position": len(SNAPSHOT)}, ErrorCode.position_out_of_range),
    ({"position": -1}, ErrorCode.position_out_of_range),
    ({"leader_epoch": 0}, ErrorCode.fenced_leader_epoch),
    ({"leader_epoch": 2}, ErrorCode.unknown_leader_epoch),
    ({"topic": "orders"}, ErrorCode.unknown_topic_or_partition),
])
def test_fetch_snapshot_errors(kwargs: dict[str, Any], error: ErrorCode) -> None:
    node, log = _leader()
    log.snapshots[(0, 0)] = SNAPSHOT
    answer = _fetch_snapshot(node, **kwargs)
    assert answer.error_code is ErrorCode.none
    part = answer.topics[0].partitions[0]
    assert part.error_code is error
    assert not part.unaligned_records


def test_fetch_snapshot_with_another_cluster_id_is_refused_at_the_top() -> None:
    node, _ = _leader()
    answer = _fetch_snapshot(node, cluster_id="other")
    assert (answer.error_code, answer.topics) == (ErrorCode.inconsistent_cluster_id, ())


def test_fetch_snapshot_to_a_follower_is_not_leader() -> None:
    node = RaftNode(node_id=2, voters=VoterSet(frozenset({1, 2, 3})), log=InMemoryRaftLog(),
                    election=ElectionRecord(1, 1, None), now_ms=0, rng=random.Random(0),
                    cluster_id="kraft")
    part = _fetch_snapshot(node).topics[0].partitions[0]
    assert part.error_code is ErrorCode.not_leader_or_follower
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (1, 1)


def test_the_kafka_log_finds_its_snapshots_again(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    log = KafkaRaftLog.open(directory)
    assert log.latest_snapshot() is None
    write_snapshot(directory, SnapshotId(7, 2), [], last_contained_log_timestamp=0)
    (directory / "00000000000000000009-0000000002.checkpoint.part").write_bytes(b"torn")
    log.add_snapshot(SnapshotId(7, 2))
    size = log.snapshot_size((7, 2))
    assert size is not None and log.read_snapshot((7, 2), 0, 10) == (size, (
        directory / SnapshotId(7, 2).filename).read_bytes()[:10])
    log.close()
    again = KafkaRaftLog.open(directory)  # a crash's .part is removed, the snapshot kept
    assert again.latest_snapshot() == (7, 2)
    assert not list(directory.glob("*.part"))
    again.close()


def test_a_fetch_snapshot_asking_for_everything_gets_fetch_snapshot_max_bytes() -> None:
    """A peer's MaxBytes does not size the leader's read: its own
    controller.quorum.fetch.snapshot.max.bytes does (the slices still add up)."""
    node, _ = _leader()
    node.config = RaftConfig(fetch_snapshot_max_bytes=300)
    data = b""
    while len(data) < len(SNAPSHOT):
        part = _fetch_snapshot(node, position=len(data),
                               max_bytes=2**31 - 1).topics[0].partitions[0]
        assert part.error_code is ErrorCode.none
        assert 0 < len(part.unaligned_records) <= 300
        data += bytes(part.unaligned_records)
    assert data == SNAPSHOT


def test_a_fetch_asking_for_everything_reads_at_most_fetch_max_bytes() -> None:
    log = InMemoryRaftLog()
    node = RaftNode(node_id=1, voters=VoterSet(frozenset({1})), log=log,
                    election=ElectionRecord(), now_ms=0, rng=random.Random(0),
                    cluster_id="kraft", config=RaftConfig(fetch_max_bytes=64))
    node.on_tick(10**4)
    for _ in range(20):
        node.append([b"x" * 40], 10**4)
    log.flush(log.end_offset)
    node.on_flushed(10**4)
    request = m.fetch_request("kraft", 5, 1, 1, 1, 0, 2**31 - 1)
    part = _answer(node, request).responses[0].partitions[0]
    # Whole batches, at least one, within the leader's limit: not the 20 appended.
    assert 0 < len(bytes(part.records)) <= 64 + 100
