"""Opening a partition's log (Kafka's LogLoader): recovery truncates a torn tail and
what follows it, rescans only after the recovery point, rebuilds indexes and leader
epochs; a clean start reads no segment data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kernel.log import segment_recovery
from kernel.log.loader import bytes_to_recover
from kernel.log.log import Log
from kernel.log.log_config import LogConfig
from kernel.log.segment import LogSegment
from tests.unit.log_helpers import crash_log
from tests.unit.test_log import NOW, batch, leader_batch_at, open_log, read_all


def test_recovery_truncates_garbage_and_a_half_written_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=5_000, index_interval_bytes=200)
    for _ in range(30):
        log.append_as_leader(batch(5), 0, NOW)
    recovery_point = log.recovery_point
    active = log.active_segment
    good_size = active.size
    half = batch(5)[:70]
    crash_log(log)
    with open(active.log_path, "ab") as f:
        f.write(leader_batch_at(150)[:-20] + b"\x00garbage" * 30 + half)
    recovered = Log.open(tmp_path / "topic-0", LogConfig(segment_bytes=5_000,
                         index_interval_bytes=200), recovery_point=recovery_point, now_ms=NOW)
    assert recovered.log_end_offset == 150
    assert recovered.active_segment.size == good_size
    assert os.path.getsize(active.log_path) == good_size
    assert read_all(recovered) == list(range(150))
    recovered.append_as_leader(batch(5), 0, NOW)
    assert read_all(recovered) == list(range(155))


def test_recovery_only_rescans_after_the_recovery_point(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=100_000, index_interval_bytes=200)
    log = Log.open(tmp_path / "t-0", config, now_ms=NOW)
    for _ in range(40):
        log.append_as_leader(batch(5), 0, NOW)
    log.flush()
    position = log.convert_to_offset_metadata(50).relative_position_in_segment
    path = log.active_segment.log_path
    crash_log(log)
    with open(path, "r+b") as f:  # rot a byte of flushed data before the recovery point
        f.seek(position + 100)
        byte = f.read(1)
        f.seek(position + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    again = Log.open(tmp_path / "t-0", config, recovery_point=190, now_ms=NOW)
    assert again.log_end_offset == 200  # not re-validated: the flushed part is trusted
    crash_log(again)
    from_zero = Log.open(tmp_path / "t-0", config, recovery_point=0, now_ms=NOW)
    assert from_zero.log_end_offset == 50  # a full scan stops at the rotten batch


def test_recovery_deletes_segments_after_a_truncated_one(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1_000)
    log = Log.open(tmp_path / "t-0", config, now_ms=NOW)
    for _ in range(20):
        log.append_as_leader(batch(5), 0, NOW)
    second = log.segments[1]
    crash_log(log)
    with open(second.log_path, "r+b") as f:
        f.truncate(second.size - 3)
    again = Log.open(tmp_path / "t-0", config, recovery_point=0, now_ms=NOW)
    assert again.active_segment.base_offset == second.base_offset
    assert len(again.segments) == 2
    assert read_all(again) == list(range(again.log_end_offset))


def test_bytes_to_recover_are_the_segments_from_the_recovery_point(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2_000), now_ms=NOW)
    for _ in range(40):
        log.append_as_leader(batch(5), 0, NOW)
    sizes = [s.size for s in log.segments]
    third = log.segments[2]
    crash_log(log)
    assert len(sizes) > 4
    assert bytes_to_recover(log.dir, 0) == sum(sizes)
    assert bytes_to_recover(log.dir, third.base_offset) == sum(sizes[2:])
    assert bytes_to_recover(log.dir, third.base_offset + 1) == sum(sizes[2:])
    assert bytes_to_recover(log.dir, 10**9) == sizes[-1]
    (tmp_path / "empty").mkdir()
    assert bytes_to_recover(tmp_path / "empty", 0) == 0


def test_recovery_reports_what_it_revalidates_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """on_recovered hears of every byte recovery re-validated, in one call per chunk
    read (never per batch), and of nothing it trusted: the flushed part before the
    recovery point's index entry, a torn tail, segments after it."""
    monkeypatch.setattr(segment_recovery, "RECOVERY_CHUNK_BYTES", 4096)
    config = LogConfig(segment_bytes=20_000, index_interval_bytes=1_000)
    log = Log.open(tmp_path / "t-0", config, now_ms=NOW)
    for _ in range(200):
        log.append_as_leader(batch(5), 0, NOW)
    sizes = [s.size for s in log.segments]
    crash_log(log)
    assert len(sizes) >= 4
    reported: list[int] = []
    again = Log.open(log.dir, config, recovery_point=0, now_ms=NOW,
                     on_recovered=reported.append)
    assert sum(reported) == sum(sizes) == bytes_to_recover(log.dir, 0)
    batches = sum(sizes) // len(batch(5))
    assert sum(sizes) // 4096 <= len(reported) < batches // 2  # per chunk, not per batch

    # From a recovery point inside the last segment: only from its index entry on.
    last = again.active_segment
    point = again.log_end_offset - 50
    crash_log(again)
    reported.clear()
    planned = bytes_to_recover(log.dir, point)
    assert planned == sizes[-1]
    Log.open(log.dir, config, recovery_point=point, now_ms=NOW,
             on_recovered=reported.append)
    assert 0 < sum(reported) < planned / 2

    # A torn tail: what was valid before it is reported, the garbage is not.
    crash_log(Log.open(log.dir, config, now_ms=NOW, had_clean_shutdown=True))
    with open(last.log_path, "ab") as f:
        f.write(b"\x00torn" * 300)
    reported.clear()
    Log.open(log.dir, config, recovery_point=0, now_ms=NOW, on_recovered=reported.append)
    assert sum(reported) == sum(sizes)


def test_clean_start_reads_no_segment_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = LogConfig(segment_bytes=200_000, index_interval_bytes=4096)
    log = Log.open(tmp_path / "t-0", config, now_ms=NOW)
    for _ in range(1_200):
        log.append_as_leader(batch(10, size=100), 0, NOW)
    assert log.size > 1_000_000 and len(log.segments) > 5
    log.close()

    read_bytes = 0
    real_pread = os.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        nonlocal read_bytes
        data = real_pread(fd, n, offset)
        read_bytes += len(data)
        return data

    def no_recovery(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("a clean start must not recover")

    monkeypatch.setattr(os, "pread", counting_pread)
    monkeypatch.setattr(LogSegment, "recover", no_recovery)
    again = Log.open(tmp_path / "t-0", config, had_clean_shutdown=True, now_ms=NOW)
    assert again.log_end_offset == 12_000 and again.recovery_point == 12_000
    assert read_bytes <= 2 * 16 * 1024  # the active segment's tail after its last index entry
    assert all(s._fd < 0 for s in again.segments[:-1])  # old segments are not even opened


def test_epochs_survive_recovery(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(5), 1, NOW)
    log.append_as_leader(batch(5), 4, NOW)
    crash_log(log)
    (log.dir / "leader-epoch-checkpoint").unlink()
    again = Log.open(log.dir, LogConfig(), recovery_point=0, now_ms=NOW)
    assert again.end_offset_for_epoch(1) == (1, 5)
