"""Producer state in the log (Kafka's ProducerStateManager): idempotent appends checked
from the batch headers (duplicates, epochs, sequences), snapshots, recovery from a
snapshot and from the log, truncation and expiry."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from kernel.log.log import Log
from kernel.log.log_config import LogConfig
from kernel.log.producer_state import ProducerStateManager, list_snapshots
from kernel.log.validator import AppendOrigin
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import SimpleRecord, build_batch, iter_batches, read_batch_header
from tests.unit.log_helpers import crash_log

NOW = 1_700_000_000_000
DAY_MS = 86_400_000


def batch(pid: int = 1000, epoch: int = 0, seq: int = 0, n: int = 2, ts: int = NOW,
          **kw: Any) -> bytes:
    return build_batch(
        [SimpleRecord(value=b"v%d" % i, key=b"k%d" % i, timestamp=ts) for i in range(n)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw,
    )


def open_log(path: Path, **kw: Any) -> Log:
    config = kw.pop("config", {})
    return Log.open(path / "topic-0", LogConfig(**config), now_ms=kw.pop("now_ms", NOW), **kw)


def append(log: Log, data: bytes, now_ms: int = NOW) -> Any:
    return log.append_as_leader(data, leader_epoch=0, now_ms=now_ms)


def error_of(log: Log, data: bytes) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        append(log, data)
    return e.value.error_code


def batch_count(log: Log) -> int:
    data = log.read(log.log_start_offset, 1 << 30).records
    return sum(1 for _ in iter_batches(bytes(data)))


def test_in_sequence_batches_append_and_the_state_keeps_the_last_five(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(7):
        assert append(log, batch(seq=2 * i)).first_offset == 2 * i
    entry = log.producer_state.last_entry(1000)
    assert entry is not None and entry.producer_epoch == 0
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] \
        == [(2 * i, 2 * i + 1, 2 * i, 2 * i + 1) for i in range(2, 7)]
    assert entry.last_timestamp == NOW


def test_a_retried_batch_is_acknowledged_with_its_original_offsets_and_not_appended(
        tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(5):
        append(log, batch(seq=2 * i))
    # every one of the last 5 batches is recognised, the oldest too
    for i in range(5):
        info = append(log, batch(seq=2 * i))
        assert info.duplicate
        assert (info.first_offset, info.last_offset) == (2 * i, 2 * i + 1)
        assert info.log_append_time == NOW  # Kafka answers the batch's timestamp
    assert log.log_end_offset == 10
    assert batch_count(log) == 5
    # past the last 5 it is no longer a duplicate but out of order
    append(log, batch(seq=10))
    assert error_of(log, batch(seq=0)) == ErrorCode.out_of_order_sequence_number


def test_a_sequence_gap_is_out_of_order_and_nothing_is_appended(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(seq=0))
    assert error_of(log, batch(seq=3)) == ErrorCode.out_of_order_sequence_number
    # a range overlapping the last batch without matching it is out of order too
    assert error_of(log, batch(seq=1)) == ErrorCode.out_of_order_sequence_number
    assert log.log_end_offset == 2
    assert append(log, batch(seq=2)).first_offset == 2


def test_an_older_epoch_is_invalid_producer_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(epoch=3, seq=0))
    assert error_of(log, batch(epoch=2, seq=2)) == ErrorCode.invalid_producer_epoch
    assert log.log_end_offset == 2


def test_a_new_epoch_starts_at_sequence_zero(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(epoch=0, seq=0))
    assert error_of(log, batch(epoch=1, seq=2)) == ErrorCode.out_of_order_sequence_number
    assert append(log, batch(epoch=1, seq=0)).first_offset == 2
    entry = log.producer_state.last_entry(1000)
    assert entry is not None and entry.producer_epoch == 1 and len(entry.batches) == 1
    # the old epoch's batches are forgotten: its retry is now an old epoch
    assert error_of(log, batch(epoch=0, seq=0)) == ErrorCode.invalid_producer_epoch


def test_an_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    # Kafka since KIP-360: no UNKNOWN_PRODUCER_ID for a producer the partition forgot
    log = open_log(tmp_path)
    assert append(log, batch(seq=42)).first_offset == 0
    assert append(log, batch(seq=44)).first_offset == 2
    assert error_of(log, batch(seq=47)) == ErrorCode.out_of_order_sequence_number


def test_sequences_wrap_at_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(seq=2**31 - 2, n=2))
    entry = log.producer_state.last_entry(1000)
    assert entry is not None and entry.last_seq == 2**31 - 1
    assert append(log, batch(seq=0)).first_offset == 2


def test_producers_are_independent_and_non_idempotent_batches_are_not_tracked(
        tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(pid=1, seq=0))
    append(log, batch(pid=2, seq=0))
    append(log, batch(pid=-1, epoch=-1, seq=-1))
    append(log, batch(pid=-1, epoch=-1, seq=-1))  # the same bytes again: appended
    append(log, batch(pid=1, seq=2))
    assert append(log, batch(pid=2, seq=0)).duplicate
    assert error_of(log, batch(pid=2, seq=4)) == ErrorCode.out_of_order_sequence_number
    assert sorted(log.producer_state.producers) == [1, 2]
    assert log.log_end_offset == 10


def test_several_batches_of_one_producer_in_one_append_are_checked_in_order(
        tmp_path: Path) -> None:
    # Clients send one batch per partition; other writers may append several.
    log = open_log(tmp_path)
    two = batch(seq=0) + batch(seq=2)
    append_coordinator = log.append_as_leader(two, leader_epoch=0, now_ms=NOW,
                                              origin=AppendOrigin.COORDINATOR)
    assert append_coordinator.last_offset == 3
    entry = log.producer_state.last_entry(1000)
    assert entry is not None and [b.last_seq for b in entry.batches] == [1, 3]
    # an older epoch within one append is refused as a whole
    bad = batch(epoch=1, seq=0) + batch(epoch=0, seq=2)
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(bad, leader_epoch=0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)
    assert e.value.error_code == ErrorCode.invalid_producer_epoch
    assert log.log_end_offset == 4
    entry = log.producer_state.last_entry(1000)
    assert entry is not None and entry.producer_epoch == 0


def test_a_follower_append_updates_the_state_without_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(batch(seq=5, base_offset=0))
    log.append_as_follower(batch(seq=9, base_offset=2))  # a gap: the leader checked it
    entry = log.producer_state.last_entry(1000)
    assert entry is not None and entry.last_seq == 10


def test_a_clean_close_snapshots_and_reopening_restores_the_state(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(3):
        append(log, batch(seq=2 * i))
    log.close()
    assert list_snapshots(tmp_path / "topic-0") == [6]
    again = open_log(tmp_path, had_clean_shutdown=True)
    # the snapshot keeps the last batch of each producer, as Kafka's does
    info = append(again, batch(seq=4))
    assert info.duplicate and info.first_offset == 4
    assert error_of(again, batch(seq=7)) == ErrorCode.out_of_order_sequence_number
    assert append(again, batch(seq=6)).first_offset == 6


def test_a_roll_snapshots_and_recovery_replays_the_batches_after_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(pid=1, seq=0))
    log.roll()
    append(log, batch(pid=2, seq=0))
    append(log, batch(pid=1, seq=2))
    assert list_snapshots(tmp_path / "topic-0") == [2]
    crash_log(log)
    again = open_log(tmp_path, recovery_point=0)
    assert sorted(again.producer_state.producers) == [1, 2]
    assert append(again, batch(pid=1, seq=2)).duplicate
    assert append(again, batch(pid=2, seq=0)).duplicate
    assert error_of(again, batch(pid=1, seq=6)) == ErrorCode.out_of_order_sequence_number


def test_the_flush_past_a_roll_fsyncs_the_roll_s_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A roll writes its snapshot unsynced on the event loop; the flush that moves the
    recovery point past it syncs it, as Kafka's roll schedules flushProducerStateSnapshot."""
    log = open_log(tmp_path)
    append(log, batch(pid=1, seq=0))
    log.roll()
    append(log, batch(pid=1, seq=2))
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    log.flush(up_to_offset=2)
    assert f"{2:020d}.snapshot" in synced
    synced.clear()
    log.flush()  # the recovery point is past the snapshot now: not synced again
    assert not any(name.endswith(".snapshot") for name in synced)


def test_recovery_without_a_snapshot_rebuilds_from_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(3):
        append(log, batch(seq=2 * i))
    crash_log(log)
    again = open_log(tmp_path, recovery_point=0)
    entry = again.producer_state.last_entry(1000)
    assert entry is not None and [b.last_seq for b in entry.batches] == [1, 3, 5]
    assert append(again, batch(seq=0)).duplicate


def test_a_corrupt_snapshot_is_dropped_and_the_log_replayed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(seq=0))
    log.close()
    path = tmp_path / "topic-0" / f"{2:020d}.snapshot"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    again = open_log(tmp_path, had_clean_shutdown=True)
    assert not path.exists()
    assert append(again, batch(seq=0)).duplicate


def test_snapshots_above_the_log_end_are_deleted_at_load(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(seq=0))
    log.producer_state.take_snapshot(50)  # a snapshot the recovered log never reached
    crash_log(log)
    again = open_log(tmp_path, recovery_point=0)
    assert list_snapshots(tmp_path / "topic-0") == []
    assert append(again, batch(seq=0)).duplicate


def test_truncation_rebuilds_the_state_below_the_truncation_point(tmp_path: Path) -> None:
    now = int(time.time() * 1000)  # truncation drops the producers expired by the clock
    log = open_log(tmp_path)
    append(log, batch(seq=0, ts=now), now)  # within message.timestamp.after.max.ms
    log.roll()
    append(log, batch(seq=2, ts=now), now)
    append(log, batch(seq=4, ts=now), now)
    log.roll()
    append(log, batch(seq=6, ts=now), now)
    assert list_snapshots(tmp_path / "topic-0") == [2, 6]
    log.truncate_to(4)  # replays the batch at 2 after the snapshot at 2
    assert list_snapshots(tmp_path / "topic-0") == [2]
    entry = log.producer_state.last_entry(1000)
    assert entry is not None and entry.last_seq == 3
    assert append(log, batch(seq=2)).duplicate
    log.truncate_to(2)
    entry = log.producer_state.last_entry(1000)
    assert entry is not None and entry.last_seq == 1
    log.truncate_fully_and_start_at(10)
    assert log.producer_state.producers == {}
    assert list_snapshots(tmp_path / "topic-0") == []


def test_snapshots_go_with_their_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(3):
        append(log, batch(seq=2 * i))
        log.roll()
    assert list_snapshots(tmp_path / "topic-0") == [2, 4, 6]
    log.delete_records_before(4)
    assert list_snapshots(tmp_path / "topic-0") == [4, 6]


def test_idle_producers_expire(tmp_path: Path) -> None:
    log = open_log(tmp_path, producer_id_expiration_ms=DAY_MS)
    append(log, batch(pid=1, seq=0, ts=NOW))
    append(log, batch(pid=2, seq=0, ts=NOW + 1000))
    assert log.remove_expired_producers(NOW + DAY_MS - 1) == 0
    assert log.remove_expired_producers(NOW + DAY_MS) == 1
    assert sorted(log.producer_state.producers) == [2]
    # an expired producer is unknown again: any sequence is accepted
    assert append(log, batch(pid=1, seq=40)).first_offset == 4


def test_expired_producers_are_not_loaded_from_a_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(pid=1, seq=0, ts=NOW - 2 * DAY_MS))
    append(log, batch(pid=2, seq=0, ts=NOW))
    log.close()
    again = open_log(tmp_path, had_clean_shutdown=True)
    assert sorted(again.producer_state.producers) == [2]


def test_a_snapshot_file_has_kafkas_layout(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path, "t-0")
    _, updates = state.prepare_append(
        [read_batch_header(batch(pid=7, epoch=2, seq=3, n=4))], AppendOrigin.REPLICATION)
    state.complete_append(updates, 4)
    path = state.take_snapshot()
    assert path is not None and path.name == "00000000000000000004.snapshot"
    data = path.read_bytes()
    assert data[:2] == b"\x00\x01" and len(data) == 2 + 4 + 4 + 46
    (entry,) = ProducerStateManager.read_snapshot(path)
    assert (entry.producer_id, entry.producer_epoch, entry.last_seq) == (7, 2, 6)
    assert (entry.batches[-1].first_offset, entry.batches[-1].last_offset) == (0, 3)

