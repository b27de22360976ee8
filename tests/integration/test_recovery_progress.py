"""A start-up that recovers large logs says how far it got: log lines with logs and bytes
done out of the totals, the rate and an estimate, and on a terminal a progress bar below
the log lines; every record is there afterwards."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import textwrap
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from kernel.config import BrokerConfig
from kernel.log.checkpoint import RECOVERY_POINT_CHECKPOINT
from kernel.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from kernel.logging import make_logger
from kernel.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records
from reference.kafka import die_with_parent
from tests.broker_process import BrokerProcess

NOW = 1_700_000_000_000
RECORD_BYTES = 1_000
BATCH_RECORDS = 16  # ~16 KB batches, as a producer's batch.size fills them
SEGMENT_BYTES = 16 * 1024 * 1024
ERASE = "\r\x1b[K"


def value(partition: int, offset: int) -> bytes:
    return b"%d:%d:" % (partition, offset) + b"x" * RECORD_BYTES


def write_unflushed_logs(data: Path, partitions: int, bytes_each: int) -> dict[int, int]:
    """Logs of topic ``big`` as a crash leaves them: no clean-shutdown marker, no
    recovery point, so a start re-validates every segment. Returns each partition's
    record count."""
    config = BrokerConfig(log_segment_bytes=SEGMENT_BYTES)
    manager = LogManager([data], config, time_ms=lambda: NOW)
    manager.load()
    counts = {}
    for p in range(partitions):
        log = manager.get_or_create_log("big", p)
        while log.size < bytes_each:
            offset = log.log_end_offset
            log.append_as_leader(build_batch([
                SimpleRecord(value=value(p, offset + i), timestamp=NOW)
                for i in range(BATCH_RECORDS)]), 0, NOW)
        counts[p] = log.log_end_offset
    manager.close()
    (data / CLEAN_SHUTDOWN_FILE).unlink()
    (data / RECOVERY_POINT_CHECKPOINT).unlink()
    return counts


def test_recovering_large_logs_logs_its_progress(tmp_path: Path) -> None:
    """~256 MB over 4 partitions, recovered with a progress line at every report (the
    cadence is the unit tests'): logs and bytes done only grow, up to totals known from
    the first line, with a rate and an estimate; then every record is there."""
    data = tmp_path / "data"
    counts = write_unflushed_logs(data, partitions=4, bytes_each=64_000_000)
    planned = sum(f.stat().st_size for f in data.glob("big-*/*.log"))
    out = io.StringIO()
    manager = LogManager([data], BrokerConfig(log_segment_bytes=SEGMENT_BYTES),
                         logger=make_logger("json", "info", stream=out),
                         recovery_log_interval_s=0)
    started = time.monotonic()
    manager.load()
    took = time.monotonic() - started
    try:
        events = [json.loads(line) for line in out.getvalue().splitlines()]
        names = [e["event"] for e in events]
        assert names[0] == "recovering logs" and names[-1] == "recovered logs", names
        assert (events[0]["logs"], events[0]["bytes_to_recover"]) == (4, planned)
        lines = [e for e in events if e["event"] == "log recovery progress"]
        assert len(lines) > planned // (1 << 20)  # one a chunk of 1 MiB, at least
        for earlier, later in pairwise(lines):
            assert earlier["bytes_done"] <= later["bytes_done"]
            assert earlier["logs_done"] <= later["logs_done"]
            assert earlier["seconds"] <= later["seconds"]
        assert {(e["logs"], e["bytes_to_recover"]) for e in lines} == {(4, planned)}
        assert [e["logs_done"] for e in lines][-1] == 4
        middle = lines[len(lines) // 2]
        assert 0 < middle["bytes_done"] < planned and 0 < middle["percent"] < 100
        assert middle["bytes_per_second"] > 0
        assert 0 < middle["seconds_left"] < 10 * took
        end = events[-1]
        assert (end["logs_done"], end["bytes_done"], end["bytes_to_recover"]) == (
            4, planned, planned)
        assert end["seconds"] <= took and end["bytes_per_second"] > 0

        for p, count in counts.items():
            log = manager.get_log("big", p)
            assert log is not None and log.log_end_offset == count
            assert len(log.segments) >= 4
            next_offset = 0
            for segment in log.segments:
                for header, _ in iter_batches(segment.log_path.read_bytes(),
                                              allow_partial_tail=False):
                    assert header.base_offset == next_offset
                    next_offset = header.base_offset + header.last_offset_delta + 1
            assert next_offset == count
            records = list(iter_records(log.read(count - 1, 1 << 20).records))
            assert records[-1].offset == count - 1
            assert records[-1].value == value(p, count - 1)
    finally:
        manager.close()


def _config(tmp_path: Path, data: Path, fmt: str) -> Path:
    config = tmp_path / "kafkernel.toml"
    config.write_text(textwrap.dedent(f"""
        listeners = "PLAINTEXT://127.0.0.1:0"
        log.dirs = "{data}"
        logging.format = "{fmt}"
        log.segment.bytes = {SEGMENT_BYTES}
        [plugins]
        enabled = ["metadata_kraft"]
    """))
    return config


def screen(output: str) -> list[str]:
    """The lines a terminal shows for ``output``: an erase clears the current line."""
    lines = []
    for piece in output.replace("\r\n", "\n").replace(ERASE, "\x00").split("\n"):
        lines.append(piece.rsplit("\x00", 1)[-1])
    return lines


def serve_on_a_terminal(config: Path, columns: int, timeout: float = 60) -> str:
    """``kafkernel serve`` with a pty of ``columns`` as its terminal, until the broker
    started; then SIGTERM. All it wrote."""
    master, slave = pty.openpty()
    termios.tcsetwinsize(slave, (24, columns))
    proc = subprocess.Popen(
        [*die_with_parent(), sys.executable, "-m", "kernel", "serve", "--config", str(config)],
        stdin=slave, stdout=slave, stderr=slave, close_fds=True,
        env={**os.environ, "TERM": "xterm", "PYTHONUNBUFFERED": "1"})
    os.close(slave)
    output = bytearray()

    def read_for(seconds: float, until: bytes | None = None) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (until is None or until not in output):
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the process closed the terminal
                    return
                if not chunk:
                    return
                output.extend(chunk)

    try:
        read_for(timeout, until=b"broker started")
        assert b"broker started" in output, output.decode(errors="replace")
    finally:
        proc.send_signal(signal.SIGTERM)
        read_for(30, until=b"broker stopped")
        proc.wait(30)
        os.close(master)
    return output.decode(errors="replace")


def test_serve_on_a_terminal_draws_the_recovery_as_a_bar(tmp_path: Path) -> None:
    """The bar is drawn below the log lines while logs recover, never under a log line,
    and gone once the broker started: the screen keeps the log lines alone."""
    data = tmp_path / "data"
    write_unflushed_logs(data, partitions=4, bytes_each=25_000_000)
    output = serve_on_a_terminal(_config(tmp_path, data, "console"), columns=100)
    # Each draw erases the line first; a correct bar is all that follows until the next
    # erase (a log line written onto it would run on in the same piece).
    bars = [piece for piece in output.split(ERASE) if piece.startswith("recovering logs [")]
    assert bars, output
    for bar in bars:
        assert "\n" not in bar and len(bar) <= 99, bar
        assert re.search(r"\] +\d+%  \d/4 logs, [\d.]+ [KMG]?B/100\.0 MB", bar), bar
    percents = [int(re.findall(r"(\d+)%", bar)[0]) for bar in bars]
    assert percents == sorted(percents)
    shown = screen(output)
    assert not any("recovering logs [" in line for line in shown), shown

    def logged(event: str) -> bool:
        return any(line.partition("] ")[2].startswith(event + " ") for line in shown)

    assert logged("recovering logs") and logged("recovered logs"), shown
    assert logged("broker started") and logged("broker stopped"), shown


def test_serve_off_a_terminal_logs_the_recovery_without_a_bar(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_unflushed_logs(data, partitions=2, bytes_each=20_000_000)
    planned = sum(f.stat().st_size for f in data.glob("big-*/*.log"))
    broker = BrokerProcess(tmp_path, data=data)
    with broker:
        events: list[dict[str, Any]] = broker.events()
    assert "\x1b" not in broker.log() and "\r" not in broker.log()
    (start,) = [e for e in events if e.get("event") == "recovering logs"]
    (end,) = [e for e in events if e.get("event") == "recovered logs"]
    assert (start["logs"], start["bytes_to_recover"]) == (2, planned)
    assert (end["logs_done"], end["bytes_done"]) == (2, planned)
    assert not broker.problems()
