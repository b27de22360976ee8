"""Loading a coordinator partition, without a broker: the runtime's replay walks a
log's bytes and hands the shard every record of a data batch with its offset and its
batch's producer id and epoch, and every transaction marker of a control batch."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.coordination import TransactionResult
from kernel.coordination.runtime import replay_batches
from kernel.protocol.compression import Compression
from kernel.protocol.errors import KafkaError
from kernel.protocol.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    build_control_batch,
)
from plugins.coordinator.records import OffsetCommitValue, offset_commit_record
from plugins.coordinator.shard import GroupCoordinatorShard

PID, EPOCH = 4000, 7


class RecordingShard:
    """Keeps what the runtime replays, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: bytes, value: bytes | None) -> None:
        self.calls.append(("record", offset, producer_id, producer_epoch, key, value))

    def replay_end_transaction(self, offset: int, producer_id: int, producer_epoch: int,
                               result: TransactionResult) -> None:
        self.calls.append(("marker", offset, producer_id, producer_epoch, result))


def records(*pairs: tuple[bytes, bytes | None]) -> list[SimpleRecord]:
    return [SimpleRecord(key=k, value=v) for k, v in pairs]


def mixed_log() -> bytes:
    """Offsets 0-1 plain, 2-3 a committed transaction (zstd) and its marker at 4, 5 a
    transaction's record, 6 its abort marker, 7 a control record that is no marker."""
    return b"".join((
        build_batch(records((b"a", b"1"), (b"b", None)), base_offset=0),
        build_batch(records((b"c", b"3"), (b"d", b"4")), base_offset=2, producer_id=PID,
                    producer_epoch=EPOCH, base_sequence=0, is_transactional=True,
                    compression=Compression.ZSTD),
        build_control_batch(ControlRecordType.COMMIT, producer_id=PID, producer_epoch=EPOCH,
                            coordinator_epoch=0, timestamp=0, base_offset=4),
        build_batch(records((b"e", b"5")), base_offset=5, producer_id=PID + 1,
                    producer_epoch=0, base_sequence=0, is_transactional=True),
        build_control_batch(ControlRecordType.ABORT, producer_id=PID + 1, producer_epoch=0,
                            coordinator_epoch=0, timestamp=0, base_offset=6),
        # Kafka's LEADER_CHANGE control record (type 2): not a transaction marker.
        build_batch(records((b"\x00\x00\x00\x02", b"")), base_offset=7, is_control=True),
    ))


def test_data_records_and_transaction_markers_are_replayed_in_log_order() -> None:
    shard = RecordingShard()
    assert replay_batches(shard, mixed_log(), 0) == (8, 7)
    assert shard.calls == [
        ("record", 0, -1, -1, b"a", b"1"),
        ("record", 1, -1, -1, b"b", None),
        ("record", 2, PID, EPOCH, b"c", b"3"),
        ("record", 3, PID, EPOCH, b"d", b"4"),
        ("marker", 4, PID, EPOCH, TransactionResult.COMMIT),
        ("record", 5, PID + 1, 0, b"e", b"5"),
        ("marker", 6, PID + 1, 0, TransactionResult.ABORT),
    ]


def test_a_read_that_starts_inside_a_batch_skips_the_records_before_it() -> None:
    shard = RecordingShard()
    assert replay_batches(shard, mixed_log(), 3) == (8, 4)
    assert [c[1] for c in shard.calls] == [3, 4, 5, 6]


def test_a_partial_batch_at_the_end_waits_for_the_next_read() -> None:
    log = mixed_log()
    first = build_batch(records((b"a", b"1"), (b"b", None)), base_offset=0)
    shard = RecordingShard()
    assert replay_batches(shard, log[:len(first) + 10], 0) == (2, 2)
    assert replay_batches(shard, b"", 2) == (2, 0)


def test_a_control_record_with_a_short_key_fails_the_load() -> None:
    bad = build_batch(records((b"\x00", b"")), is_control=True)
    with pytest.raises(KafkaError) as e:
        replay_batches(RecordingShard(), bad, 0)
    assert e.value.error_code == ErrorCode.corrupt_message


def test_the_group_shard_applies_transactional_commits_at_their_commit_marker() -> None:
    """The group coordinator keeps a transactional commit pending until its producer's
    marker, which the replay hands it (test_group_txn_offsets.py covers the rest)."""
    def commit(offset: int) -> tuple[bytes, bytes | None]:
        return offset_commit_record("g", "t", 0, OffsetCommitValue(
            offset=offset, metadata="", commit_timestamp=1, leader_epoch=-1,
            expire_timestamp=-1))

    open_transaction = b"".join((
        build_batch(records(commit(10)), base_offset=0),
        build_batch(records(commit(20)), base_offset=1, producer_id=PID, producer_epoch=EPOCH,
                    base_sequence=0, is_transactional=True),
    ))
    log = open_transaction + build_control_batch(
        ControlRecordType.COMMIT, producer_id=PID, producer_epoch=EPOCH, coordinator_epoch=0,
        timestamp=0, base_offset=2)
    shard = GroupCoordinatorShard()
    assert replay_batches(shard, log, 0) == (3, 3)
    shard.on_loaded()
    assert shard.offsets("g")[("t", 0)].offset == 20
    pending = GroupCoordinatorShard()
    assert replay_batches(pending, open_transaction, 0) == (2, 2)
    assert pending.offsets("g")[("t", 0)].offset == 10
