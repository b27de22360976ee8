"""Transactions in the log (Kafka's ProducerStateManager, UnifiedLog, TransactionIndex):
transactional batches open a producer's transaction, markers from the coordinator end
it, the last stable offset waits for open transactions and for the high watermark to
pass a marker, aborted transactions go to the segment's ``.txnindex`` and are collected
for READ_COMMITTED fetches; all of it survives a clean close, a crash and truncation."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from kernel.log.log import Log
from kernel.log.log_config import LogConfig
from kernel.log.txn_index import AbortedTxn
from kernel.log.validator import AppendOrigin
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    build_control_batch,
)
from tests.unit.log_helpers import crash_log

NOW = 1_700_000_000_000
ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def data(pid: int, seq: int = 0, n: int = 2, epoch: int = 0, txn: bool = True) -> bytes:
    return build_batch(
        [SimpleRecord(value=b"v%d" % i, key=b"k", timestamp=NOW) for i in range(n)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn,
    )


def open_log(path: Path, **kw: Any) -> Log:
    return Log.open(path / "topic-0", LogConfig(), now_ms=NOW, **kw)


def append(log: Log, records: bytes) -> Any:
    return log.append_as_leader(records, leader_epoch=0, now_ms=NOW)


def marker(log: Log, pid: int, kind: ControlRecordType, epoch: int = 0,
           coordinator_epoch: int = 0) -> Any:
    batch = build_control_batch(kind, producer_id=pid, producer_epoch=epoch,
                                coordinator_epoch=coordinator_epoch, timestamp=NOW)
    return log.append_as_leader(batch, leader_epoch=0, now_ms=NOW,
                                origin=AppendOrigin.COORDINATOR)


def error_of(call: Any, *args: Any, **kw: Any) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        call(*args, **kw)
    return e.value.error_code


def test_open_transactions_hold_the_last_stable_offset_until_their_marker_is_replicated(
        tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(-1, txn=False))              # 0-1, no producer
    append(log, data(1))                          # 2-3, producer 1 opens at 2
    append(log, data(2))                          # 4-5, producer 2 opens at 4
    append(log, data(1, seq=2))                   # 6-7, still producer 1's transaction
    assert log.producer_state.ongoing_txns == {2: 1, 4: 2}
    assert [log.last_stable_offset(hw) for hw in (1, 8)] == [1, 2]
    assert marker(log, 1, COMMIT).first_offset == 8
    # Decided, but the marker is not below the high watermark yet: still unstable.
    assert log.last_stable_offset(8) == 2
    log.on_high_watermark_updated(9)
    assert log.last_stable_offset(9) == 4         # producer 2's transaction is open
    marker(log, 2, ABORT)                         # 9
    log.on_high_watermark_updated(10)
    assert log.last_stable_offset(10) == 10
    assert log.producer_state.first_unstable_offset is None


def test_an_abort_is_indexed_with_the_last_stable_offset_at_its_marker(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))                          # 0-1
    append(log, data(2))                          # 2-3
    marker(log, 1, ABORT)                         # 4: producer 2 still open from 2
    marker(log, 2, ABORT)                         # 5
    marker(log, 2, ABORT)                         # 6: empty transaction, not indexed
    segment = log.active_segment
    assert segment.txn_index.entries == [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 5, 6)]
    raw = segment.txn_index.path.read_bytes()
    assert len(raw) == 2 * 34
    assert struct.unpack_from(">hqqqq", raw) == (0, 1, 0, 4, 2)
    assert log.collect_aborted_transactions(0, 7) == segment.txn_index.entries
    assert log.collect_aborted_transactions(5, 7) == [AbortedTxn(2, 2, 5, 6)]
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(1, 0, 4, 2)]


def test_aborted_transactions_are_collected_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))                          # 0-1
    log.roll()
    append(log, data(2))                          # 2-3
    marker(log, 1, ABORT)                         # 4
    log.roll()
    marker(log, 2, ABORT)                         # 5
    assert log.collect_aborted_transactions(0, 6) == [
        AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 5, 6)]
    # From the first segment on: its own index is empty, the later ones hold the aborts.
    assert log.collect_aborted_transactions(1, 2) == [AbortedTxn(1, 0, 4, 2)]


def test_kafkas_transaction_state_errors(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1, epoch=1))
    # A non-transactional batch while the producer's transaction is open.
    assert error_of(append, log, data(1, seq=2, epoch=1, txn=False)) \
        == ErrorCode.invalid_txn_state
    marker(log, 1, COMMIT, epoch=1, coordinator_epoch=3)
    # A zombie coordinator, then an older producer epoch.
    assert error_of(marker, log, 1, ABORT, epoch=1, coordinator_epoch=2) \
        == ErrorCode.transaction_coordinator_fenced
    assert error_of(marker, log, 1, ABORT, epoch=0, coordinator_epoch=3) \
        == ErrorCode.invalid_producer_epoch
    # A marker with no transaction open is written (the coordinator's retry), and a
    # bumped epoch resets the producer's sequences.
    marker(log, 1, ABORT, epoch=2, coordinator_epoch=3)
    assert append(log, data(1, seq=0, epoch=2)).first_offset == 4
    assert log.producer_state.ongoing_txns == {4: 1}
    assert log.log_end_offset == 6


def test_a_client_cannot_write_a_marker(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))
    batch = build_control_batch(ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                                timestamp=NOW)
    assert error_of(append, log, batch) == ErrorCode.invalid_record
    assert log.producer_state.ongoing_txns == {0: 1}


def test_a_clean_close_keeps_open_transactions_and_aborted_ones(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))                          # 0-1
    marker(log, 1, ABORT)                         # 2
    append(log, data(2))                          # 3-4, open
    log.close()
    again = open_log(tmp_path, had_clean_shutdown=True)
    assert again.producer_state.ongoing_txns == {3: 2}
    assert again.last_stable_offset(5) == 3
    assert again.collect_aborted_transactions(0, 5) == [AbortedTxn(1, 0, 2, 3)]


def test_a_crash_with_an_open_transaction_rebuilds_it_and_the_txn_index(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))                          # 0-1
    log.roll()                                    # snapshot at 2: producer 1 open at 0
    append(log, data(2))                          # 2-3
    marker(log, 1, ABORT)                         # 4
    append(log, data(3))                          # 5-6, open
    crash_log(log)
    index = tmp_path / "topic-0" / "00000000000000000002.txnindex"
    index.unlink()                                # lost with the crash
    again = open_log(tmp_path, recovery_point=0)
    assert again.producer_state.ongoing_txns == {2: 2, 5: 3}
    again.on_high_watermark_updated(7)
    assert again.last_stable_offset(7) == 2
    assert again.collect_aborted_transactions(0, 7) == [AbortedTxn(1, 0, 4, 2)]
    assert index.exists()
    marker(again, 2, ABORT)                       # 7
    assert again.collect_aborted_transactions(0, 8) == [
        AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 7, 5)]


def test_recovery_does_not_duplicate_index_entries(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))
    marker(log, 1, ABORT)
    crash_log(log)
    again = open_log(tmp_path, recovery_point=0)
    assert again.collect_aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]


def test_truncation_drops_the_aborts_and_transactions_above_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))                          # 0-1
    marker(log, 1, ABORT)                         # 2
    append(log, data(2))                          # 3-4
    marker(log, 2, ABORT)                         # 5
    assert log.truncate_to(5)
    assert log.collect_aborted_transactions(0, 6) == [AbortedTxn(1, 0, 2, 3)]
    assert log.producer_state.ongoing_txns == {3: 2}
    log.on_high_watermark_updated(5)  # the replayed abort at 2 is replicated
    assert log.last_stable_offset(5) == 3
    assert log.truncate_to(3)
    assert log.producer_state.ongoing_txns == {}


def test_a_replica_takes_markers_and_indexes_aborts(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    append(leader, data(1))
    marker(leader, 1, ABORT)
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(leader.read(0, 1 << 20).records, now_ms=NOW)
    assert follower.collect_aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]
    assert follower.producer_state.ongoing_txns == {}


def test_a_txnindex_goes_with_its_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))                          # 0-1
    marker(log, 1, ABORT)                         # 2
    log.roll()
    append(log, data(-1, txn=False))              # 3-4
    index = log.segments[0].txn_index.path
    assert index.exists()
    assert log.delete_records_before(3) == 3
    assert not index.exists()
    assert log.collect_aborted_transactions(3, 5) == []


def test_a_torn_txnindex_entry_is_dropped_before_the_next_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))
    marker(log, 1, ABORT)
    log.close()
    index = tmp_path / "topic-0" / "00000000000000000000.txnindex"
    with open(index, "ab") as f:
        f.write(b"\x00" * 10)                     # half an entry: a crash mid-write
    again = open_log(tmp_path, had_clean_shutdown=True)
    assert again.collect_aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)]
    append(again, data(1, seq=2))                 # 3-4
    marker(again, 1, ABORT)                       # 5
    again.close()
    assert index.stat().st_size == 2 * 34
    last = open_log(tmp_path, had_clean_shutdown=True)
    assert last.collect_aborted_transactions(0, 6) == [
        AbortedTxn(1, 0, 2, 3), AbortedTxn(1, 3, 5, 6)]


def test_an_unreadable_marker_is_refused_and_nothing_is_appended(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, data(1))
    bad = build_batch([SimpleRecord(key=b"\x00", value=b"", timestamp=NOW)], producer_id=1,
                      producer_epoch=0, is_transactional=True, is_control=True)
    assert error_of(log.append_as_leader, bad, leader_epoch=0, now_ms=NOW,
                    origin=AppendOrigin.COORDINATOR) == ErrorCode.corrupt_message
    assert log.log_end_offset == 2 and log.producer_state.ongoing_txns == {0: 1}


def test_only_a_batch_that_opens_a_transaction_needs_verification(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    state = log.producer_state
    assert state.needs_verification(7, 0)
    append(log, data(7))
    assert not state.needs_verification(7, 0)  # its transaction is open here
    assert state.needs_verification(7, 1)  # a new epoch opens a new one
    marker(log, 7, COMMIT)
    assert state.needs_verification(7, 0)


def test_a_marker_drops_the_verification_guard(tmp_path: Path) -> None:
    """Kafka's VerificationGuard: a batch verified before its transaction's abort, but
    appended after the marker, must not open a new transaction."""
    log = open_log(tmp_path)
    state = log.producer_state
    guard = state.start_verification(7)
    assert state.start_verification(7) is guard  # concurrent requests share it
    assert state.is_verified(7, guard)
    # The transaction wrote nothing here, yet its marker still ends the verification.
    marker(log, 7, ABORT)
    assert not state.is_verified(7, guard)
    again = state.start_verification(7)
    append(log, data(7))
    assert not state.is_verified(7, again)  # the transaction started: the guard is spent
