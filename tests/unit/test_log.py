"""One partition's log (Kafka's UnifiedLog): appends and their checks, offsets out of
range, timestamps, rolling, retention, DeleteRecords, truncation, flush, the leader
epoch cache and configs. The segment list's own behaviour is in test_local_log.py,
recovery at open in test_log_loader.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from kernel.config import BrokerConfig
from kernel.log.leader_epoch import LeaderEpochFileCache
from kernel.log.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    LogCallbacks,
    UnexpectedAppendOffsetError,
)
from kernel.log.log_config import LogConfig
from kernel.log.offset_metadata import TimestampAndOffset
from kernel.log.validator import (
    AppendOrigin,
    RecordValidationError,
    validate_and_assign_offsets,
)
from kernel.protocol.compression import Compression
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import (
    SimpleRecord,
    TimestampType,
    build_batch,
    iter_batches,
    iter_records,
    join_chunks,
    read_batch_header,
)

NOW = 1_700_000_000_000


def batch(n: int = 5, ts: int = NOW, size: int = 50, **kw: Any) -> bytes:
    return build_batch(
        [SimpleRecord(value=bytes([65 + i % 26]) * size, key=b"k%d" % i, timestamp=ts + i)
         for i in range(n)],
        **kw,
    )


def open_log(path: Path, name: str = "topic-0", **config: Any) -> Log:
    return Log.open(path / name, LogConfig(**config), now_ms=NOW)


def offsets_in(data: bytes) -> list[int]:
    return [r.offset for _, b in iter_batches(data) for r in iter_records(b)]


def read_all(log: Log, start: int | None = None) -> list[int]:
    offset = log.log_start_offset if start is None else start
    seen: list[int] = []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        got = [o for o in offsets_in(data) if o >= offset]
        assert got, offset
        seen += got
        offset = got[-1] + 1
    return seen


# -- appends ---------------------------------------------------------------------------


def test_offsets_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(5), 0, NOW)
    for bad in (-1, 6, 1_000):
        with pytest.raises(KafkaError) as e:
            log.read(bad, 100)
        assert e.value.error_code == ErrorCode.offset_out_of_range
    assert log.read(5, 100).records == b""


def test_invalid_appends_leave_the_log_unchanged(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=500, segment_bytes=100_000)
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(batch(20), 0, NOW)
    assert e.value.error_code == ErrorCode.message_too_large
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 1
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(bytes(corrupt), 0, NOW)
    assert e.value.error_code == ErrorCode.corrupt_message
    assert log.log_end_offset == 0 and log.active_segment.size == 0


def test_append_larger_than_a_segment_is_record_list_too_large(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1_000)
    data = b"".join(
        join_chunks(validate_and_assign_offsets(
            batch(5), next_offset=5 * i, leader_epoch=0, now_ms=NOW, max_message_bytes=1 << 20
        )[0])
        for i in range(4)
    )
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(data, 0, NOW, origin=AppendOrigin.COORDINATOR)
    assert e.value.error_code == ErrorCode.record_list_too_large


def test_log_append_time_topic(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch(3, ts=5), 0, now_ms=NOW + 42)
    assert info.log_append_time == NOW + 42
    header = read_batch_header(log.read(0, 1 << 20).records)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == NOW + 42


def test_topic_compression_type_recompresses(tmp_path: Path) -> None:
    log = open_log(tmp_path, compression_type="gzip")
    log.append_as_leader(batch(10), 0, NOW)
    data = log.read(0, 1 << 20).records
    assert read_batch_header(data).compression == Compression.GZIP
    assert offsets_in(data) == list(range(10))


@pytest.mark.parametrize(("codec", "low", "high"), [
    ("gzip", 1, 9), ("lz4", 1, 17), ("zstd", -50, 19)])
def test_topic_compression_level_is_the_recompressed_level(
        tmp_path: Path, codec: str, low: int, high: int) -> None:
    """compression.<codec>.level: a batch the broker recompresses for the topic's
    compression.type is compressed at that level (stronger is smaller here)."""
    def stored_size(level: int) -> int:
        log = open_log(tmp_path, f"{codec}{level}-0", compression_type=codec,
                       **{f"compression_{codec}_level": level})
        records = [SimpleRecord(value=b"%d lorem ipsum dolor sit amet " % (i % 97) * 8)
                   for i in range(400)]
        log.append_as_leader(build_batch(records), 0, NOW)
        data = log.read(0, 1 << 24).records
        assert offsets_in(data) == list(range(400))
        return len(data)

    assert stored_size(high) < stored_size(low)


def test_compacted_topic_rejects_records_without_key(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy=("compact",))
    log.append_as_leader(batch(2), 0, NOW)
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(build_batch([SimpleRecord(value=b"x")]), 0, NOW)
    assert e.value.error_code == ErrorCode.invalid_record


# -- rolling ---------------------------------------------------------------------------


def test_roll_on_segment_ms_uses_the_first_batch_timestamp(tmp_path: Path) -> None:
    rolled: list[int] = []
    log = Log.open(
        tmp_path / "t-0", LogConfig(segment_ms=1_000), now_ms=NOW,
        callbacks=LogCallbacks(on_segment_rolled=lambda _log, base: rolled.append(base)),
    )
    log.append_as_leader(batch(2, ts=NOW), 0, NOW)
    log.append_as_leader(batch(2, ts=NOW + 500), 0, NOW)
    assert len(log.segments) == 1
    log.append_as_leader(batch(2, ts=NOW + 1_001), 0, NOW)  # the clock did not move
    assert [s.base_offset for s in log.segments] == [0, 4] and rolled == [4]


def test_segment_jitter_ms_rolls_a_segment_before_segment_ms(tmp_path: Path) -> None:
    """Kafka's rollJitterMs: each new segment draws a jitter below
    min(segment.jitter.ms, segment.ms) and rolls once it is older than segment.ms less it."""
    config = LogConfig(segment_ms=1_000, segment_jitter_ms=10_000)
    for i in range(5):  # a draw of 0 (one in 1,000) would not tell
        log = Log.open(tmp_path / f"t-{i}", config, now_ms=NOW)
        jitter = log.active_segment.roll_jitter_ms
        if jitter > 0:
            break
    assert 0 < jitter < 1_000
    log.append_as_leader(batch(1, ts=NOW), 0, NOW)
    log.append_as_leader(batch(1, ts=NOW + 1_000 - jitter), 0, NOW)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, ts=NOW + 1_001 - jitter), 0, NOW)
    assert len(log.segments) == 2
    draws = {LogConfig(segment_ms=1_000, segment_jitter_ms=500).random_segment_jitter()
             for _ in range(200)}
    assert max(draws) < 500 and len(draws) > 50  # random, below segment.jitter.ms
    assert LogConfig(segment_ms=1_000).random_segment_jitter() == 0


def test_roll_when_the_index_is_full(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_index_bytes=8 * 3, index_interval_bytes=1)
    for _ in range(10):
        log.append_as_leader(batch(1), 0, NOW)
    assert len(log.segments) >= 3
    assert read_all(log) == list(range(10))


# -- timestamps ------------------------------------------------------------------------


def test_timestamps_out_of_the_topic_bounds_are_refused(tmp_path: Path) -> None:
    """message.timestamp.after.max.ms (Kafka 4's default: an hour) and before.max.ms:
    a CreateTime record outside [now - before, now + after] is INVALID_TIMESTAMP, each
    such record named by its index; LogAppendTime topics take the broker's clock."""
    log = open_log(tmp_path, message_timestamp_before_max_ms=60_000)
    hour = 3_600_000
    log.append_as_leader(batch(2, ts=NOW + hour - 1), 0, NOW)  # the last one is at the bound
    for ts, bad in ((NOW + hour, [1]), (NOW - 60_001, [0])):
        with pytest.raises(RecordValidationError) as e:
            log.append_as_leader(batch(2, ts=ts), 0, NOW)
        assert e.value.error_code == ErrorCode.invalid_timestamp
        assert [i for i, _ in e.value.record_errors] == bad
        assert f"within [{NOW - 60_000}, {NOW + hour}]" in e.value.record_errors[0][1]
    compressed = batch(3, ts=NOW + 2 * hour, compression=Compression.GZIP)
    with pytest.raises(RecordValidationError):
        log.append_as_leader(compressed, 0, NOW)
    assert log.log_end_offset == 2
    appended = open_log(tmp_path, "t-1", message_timestamp_type="LogAppendTime")
    appended.append_as_leader(batch(2, ts=NOW + 2 * hour), 0, NOW)
    assert appended.log_end_offset == 2


def test_fetch_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1_200, index_interval_bytes=100)
    for i in range(10):
        log.append_as_leader(batch(5, ts=1_000 + 100 * i), leader_epoch=3 if i < 5 else 4,
                             now_ms=NOW)
    assert len(log.segments) > 2
    assert log.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(-1, 0, 3)
    assert log.fetch_offset_for_timestamp(LATEST_TIMESTAMP) == TimestampAndOffset(-1, 50, 4)
    assert log.fetch_offset_for_timestamp(0) == TimestampAndOffset(1_000, 0, 3)
    assert log.fetch_offset_for_timestamp(1_003) == TimestampAndOffset(1_003, 3, 3)
    assert log.fetch_offset_for_timestamp(1_050) == TimestampAndOffset(1_100, 5, 3)
    assert log.fetch_offset_for_timestamp(1_702) == TimestampAndOffset(1_702, 37, 4)
    assert log.fetch_offset_for_timestamp(1_904) == TimestampAndOffset(1_904, 49, 4)
    assert log.fetch_offset_for_timestamp(1_905) is None
    assert log.fetch_offset_for_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(1_904, 49, 4)


def test_max_timestamp_is_the_first_record_holding_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(3, ts=500), 0, NOW)
    records = [SimpleRecord(value=b"x", timestamp=t) for t in (100, 900, 300)]
    log.append_as_leader(build_batch(records), 0, NOW)
    log.append_as_leader(batch(2, ts=200), 0, NOW)
    assert log.fetch_offset_for_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(900, 4, 0)


# -- retention and DeleteRecords -------------------------------------------------------


def filled(tmp_path: Path, **config: Any) -> Log:
    config.setdefault("segment_bytes", 1_000)
    log = open_log(tmp_path, **config)
    for i in range(20):
        log.append_as_leader(batch(5, ts=NOW - 100_000 + 1_000 * i), 0, NOW)
    return log


def test_retention_by_time_never_deletes_the_active_segment(tmp_path: Path) -> None:
    log = filled(tmp_path, retention_ms=50_000)
    count = len(log.segments)
    assert count > 4
    deleted = log.delete_retention_exceeded(NOW)
    assert deleted > 0 and len(log.segments) == count - deleted
    assert all(NOW - s.largest_timestamp <= 50_000 for s in log.segments[:-1])
    assert log.log_start_offset == log.segments[0].base_offset
    assert read_all(log) == list(range(log.log_start_offset, 100))
    # far in the future everything is old, but the active segment stays
    log.delete_retention_exceeded(NOW + 10**9)
    assert len(log.segments) == 1 and log.log_end_offset == 100
    with pytest.raises(KafkaError):
        log.read(0, 100)


def test_retention_by_size(tmp_path: Path) -> None:
    log = filled(tmp_path, retention_bytes=3_000, retention_ms=-1)
    log.delete_retention_exceeded(NOW)
    assert log.size - log.active_segment.size <= 3_000 or len(log.segments) == 1
    assert log.size > 3_000 - max(s.size for s in log.segments)
    assert read_all(log) == list(range(log.log_start_offset, 100))


def test_retention_stops_at_the_high_watermark(tmp_path: Path) -> None:
    log = filled(tmp_path, retention_ms=0)
    log.delete_retention_exceeded(NOW + 10**9, high_watermark=log.segments[3].base_offset)
    assert log.log_start_offset == log.segments[0].base_offset
    assert len(log.segments) > 1 and log.segments[1].base_offset > log.log_start_offset


def test_compact_only_topics_keep_old_segments(tmp_path: Path) -> None:
    log = filled(tmp_path, retention_ms=0, cleanup_policy=("compact",))
    assert log.delete_retention_exceeded(NOW + 10**9) == 0


def test_delete_records_moves_the_log_start_offset(tmp_path: Path) -> None:
    log = filled(tmp_path)
    segments = len(log.segments)
    assert log.delete_records_before(37) == 37
    assert log.log_start_offset == 37
    assert log.segments[0].base_offset <= 37 < (log.segments[1].base_offset)
    assert len(log.segments) < segments
    with pytest.raises(KafkaError) as e:
        log.read(36, 100)
    assert e.value.error_code == ErrorCode.offset_out_of_range
    assert read_all(log)[0] == 37
    assert log.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 37  # type: ignore[union-attr]
    assert log.delete_records_before(10) == 37  # never backwards
    for bad in (101, -1):
        with pytest.raises(KafkaError) as e:
            log.delete_records_before(bad)
        assert e.value.error_code == ErrorCode.offset_out_of_range
    with pytest.raises(KafkaError):
        log.delete_records_before(60, high_watermark=50)


# -- truncation, followers -------------------------------------------------------------


def test_truncate_to(tmp_path: Path) -> None:
    log = filled(tmp_path)
    log.assign_epoch_start_offset(5, 60)
    assert log.truncate_to(45)
    assert log.log_end_offset == 45 and read_all(log) == list(range(45))
    assert log.latest_epoch == 0
    assert not log.truncate_to(45)
    log.append_as_leader(batch(5), 6, NOW)
    assert read_all(log) == list(range(50))
    assert log.truncate_to(0)
    assert log.log_end_offset == 0 and log.read(0, 100).records == b""


def test_truncating_to_the_log_end_drops_an_epoch_that_has_no_records(
        tmp_path: Path) -> None:
    """A leader that appended nothing in its epoch before losing leadership: the new
    leader never had that epoch, so a follower truncation to the log end must drop it,
    else the follower names it as its last fetched epoch and diverges for ever."""
    log = filled(tmp_path)
    end = log.log_end_offset
    log.assign_epoch_start_offset(7, end)
    assert log.latest_epoch == 7
    assert not log.truncate_to(end)  # nothing to remove from the log itself
    assert log.latest_epoch == 0
    assert log.end_offset_for_epoch(0) == (0, end)


def test_follower_appends(tmp_path: Path) -> None:
    leader = filled(tmp_path, segment_bytes=100_000)
    follower = open_log(tmp_path, name="follower-0")
    data = bytes(leader.read(0, 1 << 20).records)[:2_000]  # ends inside a batch
    info = follower.append_as_follower(data)
    assert info.first_offset == 0 and follower.log_end_offset == info.last_offset + 1
    assert follower.read(0, 1 << 20).records == data[: info.valid_bytes]
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(leader.read(0, 2_000).records)
    # a compacted leader may skip offsets
    later = leader.read(80, 1 << 20).records
    follower.append_as_follower(later)
    assert follower.log_end_offset == 100
    assert follower.latest_epoch == 0


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = filled(tmp_path)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (500, 500, 1)
    assert log.append_as_follower(leader_batch_at(500)).first_offset == 500


def leader_batch_at(offset: int) -> bytes:
    chunks, _ = validate_and_assign_offsets(
        batch(3), next_offset=offset, leader_epoch=2, now_ms=NOW, max_message_bytes=1 << 20
    )
    return join_chunks(chunks)


# -- flush -----------------------------------------------------------------------------


def test_flush_moves_the_recovery_point(tmp_path: Path) -> None:
    needed: list[Log] = []
    log = Log.open(
        tmp_path / "t-0", LogConfig(flush_messages=10, flush_ms=1_000), now_ms=NOW,
        callbacks=LogCallbacks(on_flush_needed=needed.append),
    )
    log.append_as_leader(batch(5), 0, NOW)
    assert not log.needs_flush(NOW) and not needed
    assert log.needs_flush(NOW + 1_000)  # flush.ms
    log.append_as_leader(batch(5), 0, NOW)
    assert log.needs_flush(NOW) and needed == [log]  # flush.messages
    log.flush(5, now_ms=NOW)
    assert log.recovery_point == 5 and log.unflushed_messages == 5
    log.flush(now_ms=NOW)
    assert log.recovery_point == 10 and not log.needs_flush(NOW + 999)


def test_flush_in_a_thread_while_appending(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=3_000)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                log.flush()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for _ in range(300):
            log.append_as_leader(batch(3), 0, NOW)
            assert log.recovery_point <= log.log_end_offset
        log.truncate_to(450)
        for _ in range(10):
            log.append_as_leader(batch(3), 0, NOW)
        log.delete_records_before(300)
        log.delete_retention_exceeded(NOW)
    finally:
        stop.set()
        thread.join()
    assert not errors
    log.flush()
    assert log.recovery_point == log.log_end_offset == 480


# -- leader epochs, last stable offset -------------------------------------------------


def test_leader_epoch_cache(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for epoch in (0, 0, 2, 2, 5):
        log.append_as_leader(batch(5), epoch, NOW)
    cache = log.leader_epoch_cache
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(0, 0), (2, 10), (5, 20)]
    assert log.end_offset_for_epoch(0) == (0, 10)
    assert log.end_offset_for_epoch(1) == (0, 10)
    assert log.end_offset_for_epoch(2) == (2, 20)
    assert log.end_offset_for_epoch(5) == (5, 25)  # the current epoch ends at the log end
    assert log.end_offset_for_epoch(9) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    text = (log.dir / "leader-epoch-checkpoint").read_text()
    assert text == "0\n3\n0 0\n2 10\n5 20\n"
    reloaded = LeaderEpochFileCache(log.dir)
    assert reloaded.entries == cache.entries
    assert cache.epoch_for_offset(15) == 2 and cache.epoch_for_offset(9) == 0
    log.truncate_to(12)
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(0, 0), (2, 10)]
    log.delete_records_before(7)
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(0, 7), (2, 10)]
    assert log.end_offset_for_epoch(0) == (0, 10)


def test_last_stable_offset_is_the_high_watermark_without_open_transactions(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(5), 0, NOW)
    assert [log.last_stable_offset(hw) for hw in (0, 3, 5)] == [0, 3, 5]


def test_epoch_cache_entries_stay_monotonic(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(tmp_path)
    cache.assign(1, 10)
    cache.assign(3, 20)
    cache.assign(2, 15)  # an older epoch later in the log rewrites history after it
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(1, 10), (2, 15)]
    assert cache.end_offset_for(0, 100) == (0, 10)


# -- configuration ---------------------------------------------------------------------


def test_log_config_defaults_follow_the_broker_defaults() -> None:
    assert LogConfig.from_broker(BrokerConfig()) == LogConfig()
    config = LogConfig.from_broker(
        BrokerConfig(), {"segment.bytes": "2048", "cleanup.policy": "compact,delete"}
    )
    assert config.segment_bytes == 2048 and config.compact and config.delete


def test_update_config_accepts_resolved_topic_configs(tmp_path: Path) -> None:
    from kernel.config import resolve_topic_configs

    log = open_log(tmp_path)
    log.update_config(resolve_topic_configs(BrokerConfig(), {"max.message.bytes": "100"}))
    assert log.config.max_message_bytes == 100
    with pytest.raises(KafkaError):
        log.append_as_leader(batch(5), 0, NOW)
