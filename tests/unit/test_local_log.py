"""One partition's segment list (Kafka's LocalLog), through its log: appends and reads
across segments, open files, the active segment's reserved blocks, read limits, deleted
segments' files, segment and directory names."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from kernel.log.local_log import MAX_OPEN_INACTIVE_SEGMENTS, parse_topic_partition
from kernel.log.log import Log, LogCallbacks
from kernel.log.log_config import LogConfig
from kernel.log.segment import PREALLOCATE_BYTES
from kernel.protocol.records import read_batch_header
from tests.unit.test_log import NOW, batch, offsets_in, open_log, read_all

# -- appends and reads -----------------------------------------------------------------


def test_append_and_read_across_rolls(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2_000, index_interval_bytes=300)
    infos = [log.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW) for _ in range(40)]
    assert [i.first_offset for i in infos] == list(range(0, 200, 5))
    assert log.log_end_offset == 200 and len(log.segments) > 5
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    assert read_all(log) == list(range(200))
    for offset in (0, 3, 4, 5, 77, 199):  # the batch holding the offset comes first
        data = log.read(offset, 1).records
        header = read_batch_header(data)
        assert header.base_offset <= offset <= header.last_offset
    assert log.read(200, 100).records == b""  # at the log end: nothing yet
    log.close()


def open_files_under(directory: Path) -> set[str]:
    """Files of ``directory`` this process holds: open descriptors and mappings (an
    index may hold only its mapping, as Java's do)."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            held.add(os.readlink(f"/proc/self/fd/{fd}"))
    with open("/proc/self/maps") as maps:
        held.update(line.split(maxsplit=5)[-1].strip() for line in maps
                    if len(line.split(maxsplit=5)) == 6)
    return {Path(p).name for p in held if Path(p).parent == directory}


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads Linux's /proc")
def test_inactive_segments_close_their_files(tmp_path: Path) -> None:
    """Kafka's lazy indexes: an appended-to active segment keeps its files open; a read
    of an old segment opens them, and only the last few read stay open, so open files
    do not grow with segments (the broker's budget bounds them across partitions)."""
    log = open_log(tmp_path, segment_bytes=2_000, index_interval_bytes=300)
    # an idle partition holds no file: the first append opens the log file and creates
    # the indexes
    assert open_files_under(log.dir) == set()
    assert (log.dir / "00000000000000000000.log").exists()
    assert not (log.dir / "00000000000000000000.index").exists()
    for _ in range(200):
        log.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW)
    assert len(log.segments) >= 40
    active = log.active_segment.base_offset
    assert open_files_under(log.dir) == {f"{active:020d}{s}"
                                         for s in (".log", ".index", ".timeindex")}
    assert read_all(log) == list(range(1000))  # every old segment read, in order
    held = open_files_under(log.dir)
    assert len(held) <= 3 * (1 + MAX_OPEN_INACTIVE_SEGMENTS)
    assert {name[:20] for name in held} == {
        f"{s.base_offset:020d}" for s in log.segments[-1 - MAX_OPEN_INACTIVE_SEGMENTS:]
    }
    # a closed segment opens again on use: indexes, timestamps and data
    middle = log.segments[len(log.segments) // 2]
    assert not middle.files_open
    found = log.fetch_offset_for_timestamp(NOW + 2)
    assert found is not None and found.offset == 2
    assert log.read(middle.base_offset + 3, 1).records
    assert middle.files_open
    assert len(open_files_under(log.dir)) <= 3 * (1 + MAX_OPEN_INACTIVE_SEGMENTS)
    log.flush()  # fsyncs the closed segments' files by name
    assert log.recovery_point == 1000
    log.close()
    assert open_files_under(log.dir) == set()
    reopened = open_log(tmp_path, segment_bytes=2_000, index_interval_bytes=300)
    assert read_all(reopened) == list(range(1000))
    reopened.close()
    idle = open_log(tmp_path, "idle-0")
    idle.close()
    idle = open_log(tmp_path, "idle-0")  # restarted idle: still no file, and appends
    assert open_files_under(idle.dir) == set()
    for _ in range(3):
        idle.append_as_leader(batch(5), leader_epoch=1, now_ms=NOW)
    assert read_all(idle) == list(range(15))
    idle.close()


def test_reads_stop_at_max_bytes_and_at_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sizes = [len(log_append(log, batch(5))) for _ in range(10)]
    data = log.read(0, sizes[0] + sizes[1] + 10).records
    assert offsets_in(data) == list(range(10))
    assert len(data) == sizes[0] + sizes[1]  # the part of the third batch is not sent
    first = log.read(0, 10, min_one_batch=False)  # a first batch larger than the limit
    assert first.first_entry_incomplete and len(first.records) == 10
    limited = log.read(0, 1 << 20, max_offset_exclusive=20).records
    assert offsets_in(limited) == list(range(20))
    assert log.read(20, 1 << 20, max_offset_exclusive=20).records == b""
    assert log.read(25, 1 << 20, max_offset_exclusive=20).records == b""


def test_high_watermark_in_an_older_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1_500)
    for _ in range(20):
        log_append(log, batch(5))
    hw = 15
    seen = []
    offset = 0
    while True:
        data = log.read(offset, 1 << 20, max_offset_exclusive=hw).records
        if not data:
            break
        got = offsets_in(data)
        seen += got
        offset = got[-1] + 1
    assert seen == list(range(15))


def log_append(log: Log, data: bytes) -> bytes:
    info = log.append_as_leader(data, leader_epoch=0, now_ms=NOW)
    return log.read(info.first_offset, len(data)).records


def test_active_segment_reserves_blocks_past_its_end_without_growing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    written = sum(len(log_append(log, batch(5))) for _ in range(10))
    active = log.active_segment
    stat = os.stat(active.log_path)
    assert stat.st_size == written == active.size  # readers and recovery see the data only
    assert stat.st_blocks * 512 >= written + PREALLOCATE_BYTES
    assert read_all(log) == list(range(50))
    log.roll(log.log_end_offset, NOW)
    stat = os.stat(active.log_path)
    assert stat.st_size == written and stat.st_blocks * 512 < written + PREALLOCATE_BYTES
    log_append(log, batch(5))
    log.close()
    rolled = os.stat(log.active_segment.log_path)
    assert rolled.st_blocks * 512 < PREALLOCATE_BYTES  # close gives the blocks back too


def test_preallocate_reserves_the_whole_segment_when_it_is_created(tmp_path: Path) -> None:
    """Kafka's preallocate: a new segment's segment.bytes of blocks at once; here without
    growing the file (FALLOC_FL_KEEP_SIZE), so recovery sees only what was written."""
    size = 4 * PREALLOCATE_BYTES
    log = open_log(tmp_path, preallocate=True, segment_bytes=size)
    stat = os.stat(log.active_segment.log_path)
    assert stat.st_size == 0 and stat.st_blocks * 512 >= size
    log_append(log, batch(5))
    log.roll(log.log_end_offset, NOW)
    rolled = os.stat(log.segments[0].log_path)
    assert rolled.st_size == log.segments[0].size and rolled.st_blocks * 512 < size
    assert os.stat(log.active_segment.log_path).st_blocks * 512 >= size
    log.close()
    plain = open_log(tmp_path, "plain-0", segment_bytes=size)
    assert os.stat(plain.active_segment.log_path).st_blocks * 512 < size
    plain.close()


def test_min_one_batch_returns_a_batch_larger_than_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    big = batch(50, size=200)
    log.append_as_leader(big, 0, NOW)
    log.append_as_leader(batch(1), 0, NOW)
    info = log.read(0, 100, min_one_batch=True)
    assert len(info.records) == len(big) and offsets_in(info.records) == list(range(50))
    assert not info.first_entry_incomplete
    partial = log.read(0, 100, min_one_batch=False)
    assert len(partial.records) == 100 and partial.first_entry_incomplete
    assert offsets_in(partial.records) == []


# -- deletion --------------------------------------------------------------------------


def test_deleted_segments_wait_renamed_for_their_delay(tmp_path: Path) -> None:
    """As Kafka: a deleted segment's files get the .deleted suffix at once and are
    removed by the owner after file.delete.delay.ms; a start-up removes leftovers."""
    waiting: list[tuple[list[Path], int]] = []
    log = Log.open(tmp_path / "topic-0", LogConfig(segment_bytes=1_000, file_delete_delay_ms=1234),
                   now_ms=NOW, callbacks=LogCallbacks(
                       delete_files_later=lambda paths, ms: waiting.append((paths, ms))))
    for i in range(20):
        log.append_as_leader(batch(5, ts=NOW - 100_000 + 1_000 * i), 0, NOW)
    first = log.segments[0]
    stem = first.log_path.stem
    assert log.delete_records_before(log.segments[2].base_offset) > 0
    assert len(waiting) == 2 and {ms for _, ms in waiting} == {1234}
    renamed = sorted(p.name for p in waiting[0][0])
    assert renamed == sorted(f"{stem}{suffix}.deleted"
                             for suffix in (".log", ".index", ".timeindex"))
    assert all(p.exists() for paths, _ in waiting for p in paths)
    assert not first.log_path.exists()
    assert read_all(log) == list(range(log.log_start_offset, 100))
    log.close()
    reopened = open_log(tmp_path)
    assert not any(p.exists() for paths, _ in waiting for p in paths)
    assert read_all(reopened) == list(range(reopened.log_start_offset, 100))


# -- names -----------------------------------------------------------------------------


def test_partition_directory_names() -> None:
    assert parse_topic_partition("my-topic-12") == ("my-topic", 12)
    for bad in ("nodash", "topic-", "-3", "topic-x"):
        with pytest.raises(ValueError):
            parse_topic_partition(bad)


def test_segment_files_are_named_by_base_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1_000)
    for _ in range(10):
        log.append_as_leader(batch(5), 0, NOW)
    log.close()
    names = sorted(p.name for p in log.dir.iterdir() if p.suffix == ".log")
    assert names[0] == "00000000000000000000.log"
    assert all(len(n) == len("00000000000000000000.log") for n in names)
    for segment in log.segments[:-1]:
        assert segment.index_path.stat().st_size % 8 == 0  # trimmed
