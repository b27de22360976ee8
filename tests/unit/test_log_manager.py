"""The log manager: loading, clean shutdown marker, checkpoints, recovery after a crash,
creation and deletion, directory locks and the periodic tasks on an event loop."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

import kernel.slices
from kernel.config import BrokerConfig, resolve_topic_configs
from kernel.log.checkpoint import read_offset_checkpoint
from kernel.log.log import Log
from kernel.log.manager import CLEAN_SHUTDOWN_FILE, LogDirInUseError, LogManager
from kernel.log.segment import LogSegment
from kernel.protocol.records import SimpleRecord, build_batch
from tests.unit.log_helpers import crash_log

NOW = 1_700_000_000_000


def batch(n: int = 5, ts: int = NOW) -> bytes:
    return build_batch([SimpleRecord(value=b"v" * 50, key=b"k", timestamp=ts + i)
                        for i in range(n)])


def manager(dirs: list[Path], **kw: Any) -> LogManager:
    config = kw.pop("config", BrokerConfig())
    m = LogManager(dirs, config, time_ms=lambda: NOW, **kw)
    m.load()
    return m


def crash(m: LogManager) -> None:
    """Stop without closing: no marker, indexes untrimmed, locks dropped."""
    for log in m.all_logs():
        crash_log(log)
    m._release_locks()


def test_create_append_close_and_reload_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    logs = [m.get_or_create_log("orders", p) for p in range(4)]
    assert {log.dir.parent for log in logs} == set(dirs)  # spread over the log dirs
    for log in logs:
        for _ in range(3):
            log.append_as_leader(batch(), 0, NOW)
    assert m.get_log("orders", 2) is logs[2] and m.get_log("orders", 9) is None
    m.close()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
        points = read_offset_checkpoint(d / "recovery-point-offset-checkpoint")
        assert set(points.values()) == {15} and len(points) == 2
    text = (dirs[0] / "recovery-point-offset-checkpoint").read_text().splitlines()
    assert text[:2] == ["0", "2"] and text[2].startswith("orders ")

    monkeypatch.setattr(LogSegment, "recover", lambda *a, **k: pytest.fail("recovered"))
    again = manager(dirs)
    assert sorted((log.topic, log.partition, log.log_end_offset) for log in again.all_logs()) == [
        ("orders", p, 15) for p in range(4)
    ]
    for d in dirs:
        assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
    again.close()


def test_unclean_restart_recovers_from_the_recovery_point(tmp_path: Path) -> None:
    m = manager([tmp_path])
    log = m.get_or_create_log("t", 0)
    for _ in range(10):
        log.append_as_leader(batch(), 0, NOW)
    log.flush()
    m.checkpoint_recovery_points()
    path = log.active_segment.log_path
    size = path.stat().st_size
    crash(m)
    with open(path, "ab") as f:
        f.write(b"\x00\x01torn write" * 7)
    again = manager([tmp_path])
    recovered = again.get_log("t", 0)
    assert recovered is not None
    assert recovered.log_end_offset == 50 and path.stat().st_size == size
    again.close()


def test_log_start_offset_is_checkpointed_and_restored(tmp_path: Path) -> None:
    config = BrokerConfig(log_segment_bytes=1_000)
    m = manager([tmp_path], config=config)
    log = m.get_or_create_log("t", 0)
    for _ in range(10):
        log.append_as_leader(batch(), 0, NOW)
    assert log.delete_records_before(23) == 23
    assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint") == {("t", 0): 23}
    crash(m)
    again = manager([tmp_path], config=config)
    restored = again.get_log("t", 0)
    assert restored is not None and restored.log_start_offset == 23
    again.close()


def test_delete_log_removes_the_directory(tmp_path: Path) -> None:
    m = manager([tmp_path])
    log = m.get_or_create_log("gone", 0)
    log.append_as_leader(batch(), 0, NOW)
    assert m.delete_log("gone", 0) and not m.delete_log("gone", 0)
    assert not any(p.name.startswith("gone-0") for p in tmp_path.iterdir())
    (tmp_path / "old-1.abc-delete").mkdir()  # a deletion the last run did not finish
    (tmp_path / "__cluster_metadata-0").mkdir()  # the KRaft plugin's, not ours
    m.close()
    again = manager([tmp_path])
    assert again.all_logs() == []
    assert not (tmp_path / "old-1.abc-delete").exists()
    assert (tmp_path / "__cluster_metadata-0").exists()
    again.close()


def test_delete_log_while_running_removes_the_directories_in_a_worker(
        tmp_path: Path) -> None:
    """Running, the manager renames at once and removes in a worker thread; every
    partition of a deleted topic goes."""

    def left() -> list[str]:
        return [p.name for p in tmp_path.iterdir() if p.name.startswith("gone-")]

    async def scenario() -> None:
        m = LogManager([tmp_path], BrokerConfig(), time_ms=lambda: NOW)
        await m.start()
        for p in range(3):
            m.get_or_create_log("gone", p).append_as_leader(batch(), 0, NOW)
        assert all(m.delete_log("gone", p) for p in range(3))
        assert m.all_logs() == []
        for _ in range(100):
            if not left():
                break
            await asyncio.sleep(0.02)
        assert left() == []
        await m.stop()

    asyncio.run(scenario())


def test_a_log_dir_has_one_owner(tmp_path: Path) -> None:
    m = manager([tmp_path / "x"])
    with pytest.raises(LogDirInUseError):
        manager([tmp_path / "x"])
    other = manager([tmp_path / "y"])  # two brokers in one process share nothing
    m.get_or_create_log("t", 0).append_as_leader(batch(), 0, NOW)
    assert other.get_log("t", 0) is None
    m.close()
    other.close()
    manager([tmp_path / "x"]).close()  # released by close


class RecordingLogger:
    """The manager's logger, keeping each event with its fields."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _record(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    info = warning = error = _record


def _loaded_logs_event(directory: Path) -> dict[str, Any]:
    logger = RecordingLogger()
    m = manager([directory], logger=logger)
    m.get_or_create_log("t", 0).append_as_leader(batch(), 0, NOW)
    crash(m)
    return next(fields for event, fields in logger.events if event == "loaded logs")


def test_loaded_logs_says_whether_the_last_shutdown_was_clean(tmp_path: Path) -> None:
    fresh = _loaded_logs_event(tmp_path)  # nothing to recover: neither clean nor a crash
    assert fresh["logs"] == 0 and "clean_shutdown" not in fresh
    assert _loaded_logs_event(tmp_path)["clean_shutdown"] is False  # after the crash
    manager([tmp_path]).close()
    logger = RecordingLogger()
    manager([tmp_path], logger=logger).close()
    clean = next(fields for event, fields in logger.events if event == "loaded logs")
    assert clean == {"log_dir": str(tmp_path), "logs": 1, "clean_shutdown": True,
                     "seconds": clean["seconds"]}


def test_an_unclean_start_logs_its_recovery_progress(tmp_path: Path) -> None:
    """The plan is each log's segments from its recovery point's; lines and listener
    follow the load to that total; a clean start says nothing of recovery."""
    config = BrokerConfig(log_segment_bytes=4_000)
    m = manager([tmp_path], config=config)
    logs = [m.get_or_create_log("t", p) for p in range(3)]
    for log in logs:
        for _ in range(30):
            log.append_as_leader(batch(), 0, NOW)
    logs[0].flush()
    m.checkpoint_recovery_points()  # t-0 recovers its active segment only
    flushed = logs[0].active_segment.size
    planned = flushed + sum(s.size for log in logs[1:] for s in log.segments)
    assert len(logs[1].segments) > 2
    crash(m)
    logger, updates = RecordingLogger(), []
    again = manager([tmp_path], config=config, logger=logger, recovery_log_interval_s=0,
                    on_recovery_progress=updates.append)
    events = [event for event, _ in logger.events]
    assert events[0] == "recovering logs" and events[-1] == "recovered logs"
    assert logger.events[0][1] == {"logs": 3, "bytes_to_recover": planned}
    lines = [f for event, f in logger.events if event == "log recovery progress"]
    assert len(lines) >= 3 + sum(len(log.segments) for log in logs)
    for earlier, later in itertools.pairwise(lines):
        assert earlier["bytes_done"] <= later["bytes_done"]
        assert earlier["logs_done"] <= later["logs_done"]
    assert {line["bytes_to_recover"] for line in lines} == {planned}
    end = logger.events[-1][1]
    assert (end["logs_done"], end["logs"], end["bytes_done"]) == (3, 3, planned)
    assert updates[-1].finished and updates[-1].bytes_done == planned
    assert [log.log_end_offset for log in again.all_logs()] == [150] * 3
    again.close()
    logger, updates = RecordingLogger(), []
    manager([tmp_path], config=config, logger=logger,
            on_recovery_progress=updates.append).close()
    assert [event for event, _ in logger.events] == ["loaded logs"] and updates == []


def test_topic_configs(tmp_path: Path) -> None:
    m = manager([tmp_path], topic_overrides={"big": {"max.message.bytes": "5000000"}})
    assert m.get_or_create_log("big", 0).config.max_message_bytes == 5_000_000
    resolved = resolve_topic_configs(BrokerConfig(), {"segment.bytes": "4096"})
    log = m.get_or_create_log("small", 0, resolved)  # the replica manager's call
    assert log.config.segment_bytes == 4096
    m.update_topic_config("small", {"retention.ms": "1000"})
    assert log.config.retention_ms == 1000 and log.config.segment_bytes == 1073741824
    m.update_broker_config(BrokerConfig(log_retention_bytes=77))
    assert log.config.retention_bytes == 77
    m.close()


def test_segment_rolled_observer(tmp_path: Path) -> None:
    rolled: list[tuple[str, int, int]] = []
    m = manager(
        [tmp_path], config=BrokerConfig(log_segment_bytes=800),
        on_segment_rolled=lambda *a: rolled.append(a),
    )
    log = m.get_or_create_log("t", 3)
    for _ in range(4):
        log.append_as_leader(batch(), 0, NOW)
    assert rolled and all(r[:2] == ("t", 3) for r in rolled)
    m.close()


def test_periodic_tasks_on_the_event_loop(tmp_path: Path) -> None:
    clock = [NOW]
    config = BrokerConfig(
        log_segment_bytes=1_000, log_retention_ms=60_000, log_retention_check_interval_ms=20,
        log_flush_interval_messages=7, log_flush_offset_checkpoint_interval_ms=20,
    )

    async def scenario() -> None:
        m = LogManager([tmp_path], config, time_ms=lambda: clock[0])
        await m.start()
        log = m.get_or_create_log("t", 0)
        for i in range(10):
            log.append_as_leader(batch(ts=NOW + 1_000 * i), 0, clock[0])
        for _ in range(100):  # flush.messages: fsync in the background
            await asyncio.sleep(0.01)
            if log.recovery_point == log.log_end_offset:
                break
        assert log.recovery_point == log.log_end_offset == 50
        clock[0] = NOW + 10**6  # everything but the active segment is past retention
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(log.segments) == 1:
                break
        assert len(log.segments) == 1 and log.log_start_offset > 0
        checkpoint = tmp_path / "recovery-point-offset-checkpoint"
        for _ in range(100):
            await asyncio.sleep(0.01)
            if checkpoint.exists() and read_offset_checkpoint(checkpoint) == {("t", 0): 50}:
                break
        assert read_offset_checkpoint(checkpoint) == {("t", 0): 50}
        await m.flush_log(log)
        await m.stop()
        assert m.closed and (tmp_path / CLEAN_SHUTDOWN_FILE).exists()

    asyncio.run(scenario())


def test_flush_ms_timer_flushes_only_the_logs_past_their_interval(tmp_path: Path) -> None:
    """log.flush.scheduler.interval.ms runs flush_dirty_logs: a log with unflushed data
    whose last flush is flush.ms old gets fsynced; one still inside it does not."""
    clock = [NOW]
    flushes: list[float] = []
    config = BrokerConfig(log_flush_interval_ms=1_000, log_flush_scheduler_interval_ms=10)

    async def timer_ticks(n: int = 5) -> None:
        await asyncio.sleep(n * 0.01 + 0.05)

    async def flushed_to(log: Log, offset: int) -> None:
        """Give the scheduler up to a second to move the recovery point there."""
        for _ in range(100):
            if log.recovery_point == offset:
                return
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        m = LogManager([tmp_path], config, time_ms=lambda: clock[0], on_flush=flushes.append)
        await m.start()
        old = m.get_or_create_log("old", 0)  # last flush: when opened
        clock[0] = NOW + 600
        young = m.get_or_create_log("young", 0)
        for log in (old, young):
            log.append_as_leader(batch(), 0, clock[0])
            assert log.config.flush_ms == 1_000 and log.unflushed_messages == 5
        await timer_ticks()
        assert old.recovery_point == young.recovery_point == 0  # both inside flush.ms
        clock[0] = NOW + 1_000  # old's flush.ms elapsed, young has 400 ms to go
        await flushed_to(old, 5)
        await timer_ticks()
        assert old.recovery_point == 5
        assert young.recovery_point == 0 and young.unflushed_messages == 5
        assert len(flushes) == 1  # the flush latency observer saw exactly that fsync
        clock[0] = NOW + 1_600
        await flushed_to(young, 5)
        assert young.recovery_point == 5 and len(flushes) == 2
        await timer_ticks()
        assert len(flushes) == 2  # nothing unflushed: no more fsyncs
        # The last flush is on the manager's clock, so the next one is due flush.ms later.
        assert (old.last_flush_ms, young.last_flush_ms) == (NOW + 1_000, NOW + 1_600)
        old.append_as_leader(batch(), 0, clock[0])
        clock[0] = NOW + 2_000
        await flushed_to(old, 10)
        assert old.recovery_point == 10 and len(flushes) == 3
        await m.stop()

    asyncio.run(scenario())


def test_deleted_segment_files_go_after_file_delete_delay(tmp_path: Path) -> None:
    """Retention renames a segment's files to .deleted at once; the manager removes them
    in a worker thread after file.delete.delay.ms. A stop leaves the ones still waiting
    to the next start."""
    config = BrokerConfig(log_segment_bytes=1_000, log_segment_delete_delay_ms=200)

    def deleted(directory: Path) -> set[str]:
        return {p.name for p in directory.iterdir() if p.name.endswith(".deleted")}

    async def scenario() -> None:
        m = LogManager([tmp_path], config, time_ms=lambda: NOW)
        await m.start()
        log = m.get_or_create_log("t", 0)
        for i in range(10):
            log.append_as_leader(batch(ts=NOW + 1_000 * i), 0, NOW)
        log.delete_records_before(log.segments[1].base_offset)
        waiting = deleted(log.dir)
        assert waiting and all(p.endswith((".log.deleted", ".index.deleted",
                                           ".timeindex.deleted")) for p in waiting)
        await asyncio.sleep(0.05)
        assert deleted(log.dir) == waiting  # the delay has not passed
        for _ in range(100):
            await asyncio.sleep(0.02)
            if not deleted(log.dir):
                break
        assert not deleted(log.dir)
        log.delete_records_before(log.segments[1].base_offset)
        assert deleted(log.dir)
        await m.stop()  # before the delay: the files stay
        assert deleted(log.dir)
        reopened = LogManager([tmp_path], config, time_ms=lambda: NOW)
        await reopened.start()
        assert not deleted(log.dir)
        await reopened.stop()

    asyncio.run(scenario())


def test_concurrent_checkpoint_writes_neither_fail_nor_go_back(tmp_path: Path) -> None:
    """DeleteRecords schedules a log-start-offset checkpoint while another may still be
    writing: both shared the file's temporary (FileNotFoundError at the rename), and an
    older snapshot could land last (a restart would bring deleted records back)."""
    errors: list[dict[str, Any]] = []

    class Recorder:
        def error(self, event: str, **kw: Any) -> None:
            errors.append({"event": event, **kw})

        def __getattr__(self, name: str) -> Any:
            return lambda *a, **kw: None

    async def scenario() -> None:
        m = LogManager([tmp_path], BrokerConfig(), time_ms=lambda: NOW, logger=Recorder())
        await m.start()
        log = m.get_or_create_log("t", 0)
        for _ in range(40):
            log.append_as_leader(batch(), 0, NOW)
        for start in range(1, 120):
            log.delete_records_before(start)
            if start % 10 == 0:
                await asyncio.gather(m.checkpoint(), m.checkpoint())
            await asyncio.sleep(0)
        await m.checkpoint()
        written = read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint")
        await m.stop()
        assert errors == []
        assert written == {("t", 0): 119}

    asyncio.run(scenario())


def test_producer_id_expiration_runs_periodically(tmp_path: Path) -> None:
    """Every producer.id.expiration.check.interval.ms (Kafka's internal setting) the
    manager drops every log's producers idle for producer.id.expiration.ms after their
    last batch's timestamp."""
    clock = [NOW]
    config = BrokerConfig(producer_id_expiration_ms=120_000)

    async def scenario() -> None:
        m = LogManager([tmp_path], config, time_ms=lambda: clock[0],
                       producer_id_expiration_check_interval_ms=10)
        await m.start()
        log = m.get_or_create_log("t", 0)
        idempotent = build_batch([SimpleRecord(value=b"v", timestamp=NOW)], producer_id=7,
                                 producer_epoch=0, base_sequence=0)
        log.append_as_leader(idempotent, 0, clock[0])
        await asyncio.sleep(0.05)
        assert 7 in log.producer_state.producers
        # the setting is dynamic: a lower value applies to the logs open now
        m.update_broker_config(BrokerConfig(producer_id_expiration_ms=60_000))
        clock[0] = NOW + 60_000
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not log.producer_state.producers:
                break
        assert log.producer_state.producers == {}
        await m.stop()

    asyncio.run(scenario())


def test_walks_over_every_log_give_the_event_loop_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The periodic walks over every log (checkpoints, retention, producer expiry,
    flush.ms) go in slices, here of 8 logs: other tasks run between two (a walk over
    thousands of logs held every client up), and a log deleted meanwhile is left out
    of the checkpoint."""
    monkeypatch.setattr(kernel.slices, "SLICE_SECONDS", 0.0)

    async def scenario() -> None:
        m = LogManager([tmp_path], BrokerConfig(), time_ms=lambda: NOW)
        await m.start()
        for p in range(64):
            m.get_or_create_log("w", p).append_as_leader(batch(), 0, NOW)
        turns = 0

        async def other_client() -> None:
            nonlocal turns
            while True:
                await asyncio.sleep(0)
                turns += 1
                if m.get_log("w", 63) is not None:  # during the first walk's first slice
                    m.delete_log("w", 63)

        for walk in (m.checkpoint, m.checkpoint_high_watermarks, m.run_retention,
                     m.remove_expired_producers, m.flush_dirty_logs):
            turns = 0
            other = asyncio.create_task(other_client())
            await walk()
            other.cancel()
            assert turns >= 4, f"{walk.__name__} held the loop for all {len(m.all_logs())} logs"
        points = read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint")
        assert len(points) == 63 and not any(p == 63 for _, p in points)
        await m.stop()

    asyncio.run(scenario())
