"""Fetched records kept in the segment file (FileRecords): a zero-copy read returns the
same whole batches as a read of the bytes, at every start and size, and the file stays
open for a slice that waits to be sent after its segment let go of it."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from kernel.log.file_records import FileRecords, next_offset_after
from kernel.log.log import Log
from kernel.log.log_config import LogConfig
from kernel.log.segment import ZERO_COPY_MIN_BYTES
from kernel.protocol.records import SimpleRecord, build_batch, whole_batches

NOW = 1_700_000_000_000


def _log(path: Path, sizes: list[int], **config: object) -> Log:
    """A log of one batch per entry of ``sizes`` (records of that many bytes, 1-5 each)."""
    log = Log.open(path / "t-0", LogConfig(**config), now_ms=NOW)
    rng = random.Random(7)
    for size in sizes:
        n = rng.randint(1, 5)
        log.append_as_leader(build_batch(
            [SimpleRecord(value=bytes([65 + i]) * size, key=b"k", timestamp=NOW)
             for i in range(n)]), 0, NOW)
    return log


def _bytes(records: object) -> bytes:
    return records.read() if isinstance(records, FileRecords) else bytes(records)  # type: ignore[call-overload]


@pytest.mark.parametrize("sizes", [
    [300] * 400,  # small batches: many per index entry
    [20_000] * 40,  # batches larger than the index interval: an entry each
    [random.Random(1).choice([50, 900, 9_000, 70_000]) for _ in range(120)],
])
def test_zero_copy_reads_the_same_whole_batches(tmp_path: Path, sizes: list[int]) -> None:
    log = _log(tmp_path, sizes)
    rng = random.Random(3)
    end = log.log_end_offset
    sliced = 0
    for _ in range(300):
        start = rng.randrange(end)
        max_bytes = rng.choice([1, 1_000, 40_000, 70_000, 150_000, 1 << 20])
        first = rng.random() < 0.5
        plain = log.read(start, max_bytes, min_one_batch=first)
        zero = log.read(start, max_bytes, min_one_batch=first, zero_copy=True)
        assert zero.first_entry_incomplete == plain.first_entry_incomplete
        if plain.first_entry_incomplete:
            assert zero.records == b""  # a fetch sends none of it: not even read
            continue
        data = _bytes(zero.records)
        assert data == bytes(plain.records), (start, max_bytes)
        assert whole_batches(data)[0] == len(data)
        assert next_offset_after(zero.records) == next_offset_after(plain.records)
        if isinstance(zero.records, FileRecords):
            sliced += 1
            assert len(zero.records) >= ZERO_COPY_MIN_BYTES
            # the span of offsets: every offset is a record here (nothing compacted)
            assert zero.records_count == plain.records_count
            zero.records.release()
    assert sliced > 10
    log.close()


def test_a_slice_keeps_its_file_open_after_the_segment_closes_it(tmp_path: Path) -> None:
    log = _log(tmp_path, [60_000] * 40, segment_bytes=1 << 20)
    segment = log.segments[0]
    info = log.read(0, 1 << 20, zero_copy=True)
    records = info.records
    assert isinstance(records, FileRecords)
    expected = records.read()
    fd = records.fd
    segment.close_files()  # as the log does for segments beyond the few it keeps open
    other = os.open(os.devnull, os.O_RDONLY)  # would take a closed descriptor's number
    try:
        assert other != fd
        assert records.read() == expected
    finally:
        os.close(other)
    records.release()
    with pytest.raises(OSError):
        os.fstat(fd)  # the last holder let go: closed
    records.release()  # a second release does nothing
    assert log.read(0, 1 << 20).records == expected  # the segment opens it again
    log.close()


def test_a_slice_outlives_a_deleted_segment(tmp_path: Path) -> None:
    log = _log(tmp_path, [60_000] * 40, segment_bytes=1 << 20)
    records = log.read(0, 1 << 20, zero_copy=True).records
    assert isinstance(records, FileRecords)
    expected = records.read()
    log.segments[0].delete()
    assert records.read() == expected  # unlinked, still readable through the slice
    fd = records.fd
    del records  # collected unsent: released
    with pytest.raises(OSError):
        os.fstat(fd)
    log.close()


def test_a_segment_opened_again_takes_back_the_file_a_slice_holds(tmp_path: Path) -> None:
    """Clients that never read their answers must not make a segment hold a descriptor
    per answer: reopened, it takes back the one still held instead of opening another."""
    log = _log(tmp_path, [60_000] * 40, segment_bytes=1 << 20)
    segment = log.segments[0]
    held = []
    for _ in range(5):
        records = log.read(0, 1 << 20, zero_copy=True).records
        assert isinstance(records, FileRecords)
        held.append(records)
        segment.close_files()
    assert len({r.fd for r in held}) == 1
    fd = held[0].fd
    for r in held:
        r.release()
    with pytest.raises(OSError):
        os.fstat(fd)
    log.close()


def test_a_fetch_answer_keeps_even_small_slices_by_reference(tmp_path: Path) -> None:
    """A fetch of many partitions with a few KB each must not copy them into the frame
    either: that is what a client that never reads would make the broker hold."""
    from kio.schema.errors import ErrorCode

    from kernel.protocol.build import make, response_module
    from kernel.protocol.codec import encode_response_frame

    log = _log(tmp_path, [1_500] * 20)
    records = log.read(0, 5_000, zero_copy=True).records
    assert isinstance(records, FileRecords) and len(records) < 32 * 1024
    m = response_module(1, 12)
    body = make(m.FetchResponse, throttle_time=__import__("datetime").timedelta(0),
                error_code=ErrorCode.none, session_id=0, responses=(make(
                    m.FetchableTopicResponse, topic="t", partitions=(make(
                        m.PartitionData, partition_index=0, error_code=ErrorCode.none,
                        high_watermark=20, last_stable_offset=20, log_start_offset=0,
                        aborted_transactions=None, preferred_read_replica=-1,
                        records=records),)),))
    frame = encode_response_frame(1, 12, 7, body)
    assert frame.files and any(c is records for c in frame.chunks)
    assert frame.size == len(frame.to_bytes())
    log.close()
