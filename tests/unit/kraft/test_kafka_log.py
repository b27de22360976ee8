"""The Raft log on Kafka's segments (raft/kafka_log.py) keeps the rules of the in-memory
log the simulator proves the core with: epochs, validation of a follower's position,
leader and follower appends, truncation, flush; and it writes what Kafka writes (a
LeaderChange control batch, metadata batches stamped with the epoch)."""

from __future__ import annotations

from pathlib import Path

from kio.schema.leader_change_message.v0.data import LeaderChangeMessage

from plugins.metadata_kraft.raft.kafka_log import KafkaRaftLog
from plugins.metadata_kraft.raft.log import InMemoryRaftLog, Validation
from plugins.metadata_kraft.records.schema import NoOpRecord
from plugins.metadata_kraft.records.serde import (
    ApiMessageAndVersion,
    decode_batches,
    encode_value,
)

NOOP = encode_value(ApiMessageAndVersion(NoOpRecord(), 0))


def _fill(log: KafkaRaftLog | InMemoryRaftLog) -> None:
    """Epoch 1: LeaderChange at 0, records 1-2; epoch 3: LeaderChange at 3, records 4-6."""
    log.append_leader_change(1, 1, [1, 2, 3], [1, 2])
    log.append_as_leader([NOOP, NOOP], 1)
    log.append_leader_change(3, 2, [1, 2, 3], [2, 3])
    log.append_as_leader([NOOP], 3)
    log.append_as_leader([NOOP, NOOP], 3)


def test_epochs_and_validation_follow_the_in_memory_rules(tmp_path: Path) -> None:
    ours, model = KafkaRaftLog.open(tmp_path / "m-0"), InMemoryRaftLog()
    assert ours.validate(0, 0) == model.validate(0, 0) == Validation.valid()
    assert ours.end_offset_for_epoch(2) == model.end_offset_for_epoch(2)
    _fill(ours)
    _fill(model)
    assert (ours.end_offset, ours.last_fetched_epoch) == (model.end_offset, 3) == (7, 3)
    for epoch in range(0, 6):
        assert ours.end_offset_for_epoch(epoch) == model.end_offset_for_epoch(epoch), epoch
        for offset in range(0, 9):
            assert ours.validate(offset, epoch) == model.validate(offset, epoch), \
                (offset, epoch)
    ours.close()


def test_leader_batches_are_kafkas_and_a_follower_appends_them(tmp_path: Path) -> None:
    leader = KafkaRaftLog.open(tmp_path / "leader" / "m-0")
    _fill(leader)
    batches = decode_batches(leader.read(0, 1 << 20))
    assert [(b.base_offset, b.epoch, b.is_control) for b in batches] == [
        (0, 1, True), (1, 1, False), (3, 3, True), (4, 3, False), (5, 3, False)]
    change = batches[2].records[0]
    assert isinstance(change, LeaderChangeMessage)
    assert change.leader_id == 2 and [v.voter_id for v in change.granting_voters] == [2, 3]
    assert leader.read(7, 1 << 20) == b""

    follower = KafkaRaftLog.open(tmp_path / "follower" / "m-0")
    offset = 0
    while offset < leader.end_offset:
        assert follower.append_as_follower(leader.read(offset, 1)) > offset
        offset = follower.end_offset
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    assert follower.last_fetched_epoch == 3
    leader.close()
    follower.close()


def test_truncate_flush_and_reopen(tmp_path: Path) -> None:
    log = KafkaRaftLog.open(tmp_path / "m-0")
    _fill(log)
    assert log.flushed_offset == 0
    log.flush(7)
    assert log.flushed_offset == 7
    log.truncate_to(3)  # back into epoch 1: epoch 3 is forgotten
    assert (log.end_offset, log.last_fetched_epoch, log.flushed_offset) == (3, 1, 3)
    assert log.validate(4, 3) == Validation("diverging", 1, 3)
    log.close()
    again = KafkaRaftLog.open(tmp_path / "m-0")
    assert (again.end_offset, again.last_fetched_epoch, again.flushed_offset) == (3, 1, 3)
    again.close()
