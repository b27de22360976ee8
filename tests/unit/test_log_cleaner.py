"""The log cleaner on real logs: what a clean keeps (Kafka's rules), the swap's crash
safety at every step, and coordination with truncation; each test with the offset map
in C (kernel/log/_cleaner.c) and in Python."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from kernel.config import BrokerConfig, replace_settings
from kernel.log import offset_map
from kernel.log.cleaner import LogCleaningAbortedError
from kernel.log.log import Log
from kernel.log.log_cleaner import LogCleaner
from kernel.log.log_config import LogConfig
from kernel.log.manager import LogManager
from kernel.log.validator import AppendOrigin
from kernel.protocol.records import (
    DELETE_HORIZON_FLAG,
    RECORD_BATCH_OVERHEAD,
    ControlRecordType,
    SimpleRecord,
    build_batch,
    build_control_batch,
    decode_batches,
)

NOW = 1_700_000_000_000
TP = ("t", 0)
COMPACT = LogConfig(cleanup_policy=("compact",), segment_bytes=1024,
                    delete_retention_ms=1000, index_interval_bytes=128)


@pytest.fixture(autouse=True, params=["c", "python"])
def offset_map_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "c":
        if offset_map._COffsetMap is None:
            pytest.fail("kernel/log/_cleaner.c is not built (`pip install -e .` needs gcc)")
    else:
        monkeypatch.setattr(offset_map, "_COffsetMap", None)
    return str(request.param)


class Clock:
    def __init__(self) -> None:
        self.ms = NOW

    def __call__(self) -> int:
        return self.ms


def open_log(tmp: Path, config: LogConfig = COMPACT) -> Log:
    return Log.open(tmp / "t-0", config, now_ms=NOW)


def cleaner_for(log: Log, clock: Clock, **settings: Any) -> LogCleaner:
    config = replace_settings(BrokerConfig(), settings) if settings else BrokerConfig()
    return LogCleaner(config, lambda: {TP: log}, time_ms=clock)


def put(log: Log, key: bytes, value: bytes | None, **kw: Any) -> None:
    batch = build_batch([SimpleRecord(key=key, value=value, timestamp=NOW)], **kw)
    log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)


def batches(log: Log) -> list[Any]:
    out: list[Any] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = bytes(log.read(offset, 1 << 20).records)
        decoded = decode_batches(data)
        if not decoded:
            break
        out.extend(decoded)
        offset = decoded[-1].header.last_offset + 1
    return out


def records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in batches(log) for r in b.records]


def workload(log: Log, rounds: int = 40) -> dict[bytes, tuple[int, bytes | None]]:
    """Updates to 5 keys, key-0 deleted at the end; returns key -> (offset, value)."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for i in range(rounds):
        for k in range(5):
            key = b"key-%d" % k
            value: bytes | None = b"v%d-%d" % (k, i)
            if k == 0 and i == rounds - 1:
                value = None
            put(log, key, value)
            latest[key] = (log.log_end_offset - 1, value)
    log.roll()
    return latest


def test_a_clean_keeps_the_latest_record_of_each_key_at_its_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    latest = workload(log)
    before = log.log_end_offset
    segments_before = len(log.segments)
    cleaner = cleaner_for(log, Clock())
    assert cleaner.clean_filthiest_log()
    expected = sorted((o, k, v) for k, (o, v) in latest.items())
    assert records(log) == expected  # the tombstone stays until its horizon
    assert log.log_end_offset == before
    assert len(log.segments) == segments_before  # groups are sized before the clean
    assert cleaner.manager.checkpoint(tmp_path, TP) == log.active_segment.base_offset
    # a consumer inside a removed range continues at the next retained offset
    assert decode_batches(bytes(log.read(1, 1 << 20).records))[0].records[0].offset >= 1
    assert not cleaner.clean_filthiest_log()  # nothing dirty now
    latest = workload(log, rounds=4)
    assert cleaner.clean_filthiest_log()
    assert len(log.segments) <= 4  # the small cleaned segments were merged
    expected = sorted((o, k, v) for k, (o, v) in latest.items())
    assert records(log) == expected
    reopened = Log.open(log.dir, COMPACT, now_ms=NOW)
    assert records(reopened) == expected
    assert not [p for p in os.listdir(log.dir) if p.endswith((".cleaned", ".swap"))]


def test_tombstones_go_in_a_clean_after_their_delete_horizon(tmp_path: Path) -> None:
    config = dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=0.0)
    log = open_log(tmp_path, config)
    latest = workload(log)
    clock = Clock()
    cleaner = cleaner_for(log, clock)
    assert cleaner.clean_filthiest_log()
    tombstone = [b for b in batches(log) if any(r.value is None for r in b.records)]
    assert tombstone and tombstone[0].header.attributes & DELETE_HORIZON_FLAG
    horizon = NOW + config.delete_retention_ms
    assert tombstone[0].header.first_timestamp == horizon
    for now, value in ((horizon - 1, b"x"), (horizon, b"y")):
        put(log, b"key-1", value)
        log.roll()
        clock.ms = now
        assert cleaner.clean_filthiest_log()
        keys = {k for _, k, _ in records(log)}
        assert (b"key-0" in keys) is (now < horizon)
    assert {k for _, k, _ in records(log)} == set(latest) - {b"key-0"}


def test_the_last_batch_of_a_producer_stays_empty_and_aborted_records_go(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    for seq in range(3):  # idempotent producer 7: its last batch is superseded below
        put(log, b"k", b"p%d" % seq, producer_id=7, producer_epoch=0, base_sequence=seq)
    last_of_7 = log.log_end_offset - 1
    put(log, b"a", b"aborted", producer_id=9, producer_epoch=0, base_sequence=0,
        is_transactional=True)
    abort = build_control_batch(ControlRecordType.ABORT, producer_id=9, producer_epoch=0,
                                coordinator_epoch=0, timestamp=NOW)
    log.append_as_leader(abort, leader_epoch=0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)
    put(log, b"k", b"latest")
    log.roll()
    log.on_high_watermark_updated(log.log_end_offset)  # the marker is stable
    assert cleaner_for(log, Clock()).clean_filthiest_log()
    kept = batches(log)
    empty = [b for b in kept if b.header.producer_id == 7]
    assert [(b.header.last_offset, b.records) for b in empty] == [(last_of_7, ())]
    assert empty[0].header.base_sequence == 2
    assert b"aborted" not in [v for _, _, v in records(log)]
    # the marker stays (its transaction's batch was seen in this clean), indexed
    assert any(b.header.is_control for b in kept)
    assert log.collect_aborted_transactions(0, log.log_end_offset)
    assert [v for _, k, v in records(log) if k == b"k"] == [b"latest"]


def test_a_full_offset_map_cleans_up_to_where_it_got(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(200):
        put(log, b"key-%d" % i, b"v")
    log.roll()
    # 24 bytes a slot: room for 90 keys at the 0.9 load factor
    cleaner = cleaner_for(log, Clock(), **{"log.cleaner.dedupe.buffer.size": 2400})
    assert cleaner.clean_filthiest_log()
    checkpoint = cleaner.manager.checkpoint(tmp_path, TP)
    assert checkpoint is not None and 90 <= checkpoint < 200
    assert [o for o, _, _ in records(log)] == list(range(200))


def test_truncation_aborts_a_clean_and_the_swap_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    workload(log)
    cleaner = cleaner_for(log, Clock())
    ltc = cleaner.manager.grab_filthiest_compacted_log(NOW)
    assert ltc is not None
    cleaner.abort_and_pause_cleaning(TP)  # what truncation does first
    assert cleaner.manager.cleaning_state(TP) == "LogCleaningAborted"
    log.truncate_to(50)
    cleaner.resume_cleaning(TP)
    with pytest.raises(LogCleaningAbortedError):
        cleaner._cleaners[0].clean(ltc)
    cleaner.manager.done_cleaning(TP, tmp_path, None)
    assert cleaner.manager.cleaning_state(TP) is None
    assert [o for o, _, _ in records(log)] == list(range(50))
    assert not [p for p in os.listdir(log.dir) if p.endswith(".cleaned")]


SWAP_STEPS = 9  # 4 renames to .swap, old segments deleted, 4 renames into place


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", range(SWAP_STEPS))
def test_a_crash_at_each_step_of_a_swap_leaves_old_or_new_contents(
    tmp_path: Path, step: int,
) -> None:
    log = open_log(tmp_path)
    latest = workload(log)
    put(log, b"txn", b"v", producer_id=9, producer_epoch=0, base_sequence=0,
        is_transactional=True)
    abort = build_control_batch(ControlRecordType.ABORT, producer_id=9, producer_epoch=0,
                                coordinator_epoch=0, timestamp=NOW)
    log.append_as_leader(abort, leader_epoch=0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)
    log.roll()
    old = records(log)
    seen: list[str] = []

    def crash_at(name: str) -> None:
        seen.append(name)
        if len(seen) == step + 1:
            raise Crash(name)

    cleaner = cleaner_for(log, Clock())
    cleaner.after_swap_step = crash_at
    with pytest.raises(Crash):
        cleaner.clean_filthiest_log()
    log.flush()
    reopened = Log.open(log.dir, COMPACT, now_ms=NOW, recovery_point=log.recovery_point)
    got = records(reopened)
    assert got in (old, _cleaned_view(old, latest)) or _consistent(got, old, latest)
    names = os.listdir(log.dir)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    # the reopened log cleans to the end state
    clean_again = cleaner_for(reopened, Clock())
    clean_again.clean_filthiest_log()
    final = {r.key: r.value for b in batches(reopened) if not b.header.is_control
             for r in b.records}
    assert final == {k: v for k, (_, v) in latest.items()}


def _cleaned_view(old: list[Any], latest: dict[bytes, tuple[int, bytes | None]]) -> list[Any]:
    keep = {o for o, _ in latest.values()}
    return [r for r in old if r[0] in keep]


def _consistent(got: list[Any], old: list[Any],
                latest: dict[bytes, tuple[int, bytes | None]]) -> bool:
    """Offsets increase, every record is one of the originals, and every key's latest
    record is there: old contents for some segments, new for others."""
    offsets = [o for o, _, _ in got]
    return (offsets == sorted(set(offsets)) and set(got) <= set(old)
            and all((o, k, v) in got for k, (o, v) in latest.items()))


def test_the_log_managers_cleaner_thread_cleans_in_the_background(tmp_path: Path) -> None:
    config = replace_settings(BrokerConfig(), {"log.cleaner.backoff.ms": 20})

    async def scenario() -> None:
        manager = LogManager([tmp_path], config, time_ms=lambda: NOW)
        await manager.start()
        log = manager.get_or_create_log("t", 0, COMPACT)
        latest = workload(log)
        for _ in range(200):
            if manager.cleaner is not None and manager.cleaner.runs:
                break
            await asyncio.sleep(0.02)  # the loop stays free while the thread cleans
        assert records(log) == sorted((o, k, v) for k, (o, v) in latest.items())
        log.truncate_to(10)  # the cleaner's checkpoint moves back with it
        assert manager.cleaner is not None
        assert manager.cleaner.manager.checkpoint(tmp_path, TP) == 10
        await manager.stop()

    asyncio.run(scenario())


class Warnings:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def warning(self, message: str, **_: Any) -> None:
        self.messages.append(message)


@pytest.mark.parametrize("at, byte", [
    (16, b"\x01"),  # the first batch's magic: its header cannot be read
    (RECORD_BATCH_OVERHEAD, b"\x7f"),  # its first record's length: the records walk fails
])
def test_a_corrupt_segment_is_left_as_it_is_and_not_cleaned_again(
    tmp_path: Path, at: int, byte: bytes,
) -> None:
    """A batch the cleaner cannot walk (a byte changed on disk under the log, in a batch
    header or among its records, which the C walk reads) ends that log's clean with one
    warning; the log keeps its segments and the cleaner does not come back to it."""
    log = open_log(tmp_path)
    workload(log)
    first = log.segments[0]
    with open(first.log_path, "r+b") as segment:
        segment.seek(at)
        segment.write(byte)
    segments = log.segments
    logger = Warnings()
    cleaner = LogCleaner(BrokerConfig(), lambda: {TP: log}, time_ms=Clock(), logger=logger)
    assert cleaner.clean_filthiest_log()
    assert log.segments == segments
    assert logger.messages == ["cleaning t-0 failed; it is not cleaned again"]
    assert not cleaner.clean_filthiest_log()
