"""The broker-wide budget of segments with open files (kernel/log/open_segments.py):
many partitions' logs share one, appends and reads go on across evictions of the
active segments, and what an evicted active segment held (indexes, timestamps,
reserved blocks, a slice being sent) survives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernel.log.file_records import FileRecords
from kernel.log.log import Log, LogCallbacks
from kernel.log.log_config import LogConfig
from kernel.log.open_segments import MIN_OPEN_SEGMENTS, OpenSegments
from tests.unit.test_local_log import open_files_under
from tests.unit.test_log import NOW, batch, read_all

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"),
                                reason="reads Linux's /proc")


def open_logs(tmp_path: Path, budget: OpenSegments, count: int,
              had_clean_shutdown: bool = False, **config: int) -> list[Log]:
    callbacks = LogCallbacks(open_segments=budget)
    return [Log.open(tmp_path / f"t{i}-0", LogConfig(**config), now_ms=NOW,
                     callbacks=callbacks, had_clean_shutdown=had_clean_shutdown)
            for i in range(count)]


def held_segments(logs: list[Log]) -> int:
    return sum(1 for log in logs for s in log.segments if s.files_open)


def test_many_partitions_hold_at_most_the_budget(tmp_path: Path) -> None:
    budget = OpenSegments(MIN_OPEN_SEGMENTS)
    logs = open_logs(tmp_path, budget, 3 * MIN_OPEN_SEGMENTS, index_interval_bytes=100)
    assert held_segments(logs) == 0  # idle partitions hold nothing
    for round_ in range(3):
        for log in logs:
            log.append_as_leader(batch(5, ts=NOW + 10 * round_), leader_epoch=1, now_ms=NOW)
        assert held_segments(logs) <= MIN_OPEN_SEGMENTS == len(budget)
        # files of the process under these logs: at most what the budget allows
        assert sum(len(open_files_under(log.dir)) for log in logs) <= 3 * MIN_OPEN_SEGMENTS
    assert budget.evictions > 0
    # the most recently appended-to ones are the ones still open
    assert all(log.active_segment.files_open for log in logs[-MIN_OPEN_SEGMENTS:])
    assert not logs[0].active_segment.files_open
    for log in logs:  # every evicted active segment reads back, indexes reopened
        assert read_all(log) == list(range(15))
        assert log.active_segment.offset_index.entries > 0
        assert log.active_segment.max_timestamp_so_far == NOW + 24
    assert held_segments(logs) <= MIN_OPEN_SEGMENTS
    for log in logs:
        log.close()
    assert len(budget) == 0
    # a clean restart after the evictions (no recovery: the files are trusted), then an
    # unclean one: the same records, timestamps and indexes
    for clean in (True, False):
        reopened = open_logs(tmp_path, OpenSegments(MIN_OPEN_SEGMENTS), 3 * MIN_OPEN_SEGMENTS,
                             index_interval_bytes=100, had_clean_shutdown=clean)
        for log in reopened:
            assert read_all(log) == list(range(15 if clean else 20))
            assert log.active_segment.max_timestamp_so_far == NOW + 24
            found = log.fetch_offset_for_timestamp(NOW + 23)
            assert found is not None and found.offset == 13
            if clean:
                log.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW)
                assert read_all(log) == list(range(20))
            log.close()


def test_evicted_active_segment_gives_back_reserved_blocks(tmp_path: Path) -> None:
    budget = OpenSegments(MIN_OPEN_SEGMENTS)
    logs = open_logs(tmp_path, budget, MIN_OPEN_SEGMENTS + 1)
    first = logs[0]
    first.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW)
    segment = first.active_segment
    blocks_open = os.stat(segment.log_path).st_blocks
    for log in logs[1:]:
        log.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW)
    assert not segment.files_open
    st = os.stat(segment.log_path)
    assert st.st_size == segment.size
    if blocks_open * 512 > st.st_size + (1 << 20):  # the file system reserved blocks
        assert st.st_blocks * 512 < st.st_size + (1 << 20)  # and they were given back
    first.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW)
    assert read_all(first) == list(range(10))
    for log in logs:
        log.close()


def test_a_slice_being_sent_outlives_the_eviction(tmp_path: Path) -> None:
    budget = OpenSegments(MIN_OPEN_SEGMENTS)
    logs = open_logs(tmp_path, budget, MIN_OPEN_SEGMENTS + 1)
    first = logs[0]
    for _ in range(40):
        first.append_as_leader(batch(5, size=100), leader_epoch=1, now_ms=NOW)
    records = first.read(0, 1 << 20, zero_copy=True).records
    assert isinstance(records, FileRecords)
    expected = first.read(0, 1 << 20).records
    for log in logs[1:]:  # evicts the first log's active segment
        log.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW)
    assert not first.active_segment.files_open
    assert records.read() == bytes(expected)  # the descriptor is still the slice's
    # reopening takes the slice's file back rather than a new descriptor
    first.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW)
    assert first.active_segment._file is not None
    assert first.active_segment._file.fd == records.fd
    records.release()
    assert read_all(first) == list(range(205))
    for log in logs:
        log.close()


def test_capacity_can_shrink_and_never_falls_below_the_minimum(tmp_path: Path) -> None:
    budget = OpenSegments()
    logs = open_logs(tmp_path, budget, 2 * MIN_OPEN_SEGMENTS)
    for log in logs:
        log.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW)
    assert held_segments(logs) == 2 * MIN_OPEN_SEGMENTS  # no budget: nothing closes
    budget.capacity = 1
    assert budget.capacity == MIN_OPEN_SEGMENTS
    assert held_segments(logs) == MIN_OPEN_SEGMENTS
    for log in logs:
        assert read_all(log) == list(range(5))
        log.close()


def test_an_evicted_active_segment_keeps_its_max_timestamp_over_a_clean_restart(
    tmp_path: Path,
) -> None:
    """No index entry was due (a few small batches): the time index entry a close writes
    is written when the budget closes the active segment's files."""
    logs = open_logs(tmp_path, OpenSegments(MIN_OPEN_SEGMENTS), MIN_OPEN_SEGMENTS + 1)
    for log in logs:
        log.append_as_leader(batch(2, ts=NOW + 100), leader_epoch=1, now_ms=NOW)
    first = logs[0]
    assert not first.active_segment.files_open
    for log in logs:
        log.close()
    reopened = open_logs(tmp_path, OpenSegments(MIN_OPEN_SEGMENTS), 1, had_clean_shutdown=True)
    assert reopened[0].active_segment.max_timestamp_so_far == NOW + 101
    reopened[0].close()
