"""A start-up's recovery progress: a start line, a progress line at most every interval
however often it is told of progress, an end line; logs and bytes done out of the plan,
the rate of what was read, an estimate of the time left; the listener's own cadence."""

from __future__ import annotations

from typing import Any

import pytest

from kernel.log.recovery_progress import (
    RecoveryProgress,
    RecoveryStatus,
    format_bytes,
    format_seconds,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Lines:
    """A structured logger that keeps each event with its fields."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.events if name == event]


def progress(logs: int, planned: int, **kw: Any) -> tuple[RecoveryProgress, Clock, Lines,
                                                          list[RecoveryStatus]]:
    clock, lines, updates = Clock(), Lines(), []
    p = RecoveryProgress(lines, logs, planned, log_interval_s=2.0, update_interval_s=0.1,
                         on_update=updates.append, clock=clock, **kw)
    return p, clock, lines, updates


def test_lines_at_start_at_most_every_interval_and_at_the_end() -> None:
    p, clock, lines, _ = progress(2, 4_000_000)
    p.start()
    assert lines.events == [("recovering logs", {"logs": 2, "bytes_to_recover": 4_000_000})]
    p.begin_log(3_000_000)
    for _ in range(1_000):  # a thousand chunks within one interval: no line
        clock.now += 0.001
        p.recovered(1_000)
    assert len(lines.events) == 1
    clock.now = 102.0
    p.recovered(1_000_000)
    (first,) = lines.named("log recovery progress")
    assert first == {
        "logs_done": 0, "logs": 2, "bytes_done": 2_000_000, "bytes_to_recover": 4_000_000,
        "bytes_read": 2_000_000, "percent": 50.0, "seconds": 2.0,
        "bytes_per_second": 1_000_000, "seconds_left": 2.0,
    }
    clock.now = 103.0
    p.log_loaded()  # 1 MB planned but not read (trusted, or truncated away): done now
    assert len(lines.named("log recovery progress")) == 1
    p.begin_log(1_000_000)
    clock.now = 104.5
    p.recovered(500_000)
    second = lines.named("log recovery progress")[-1]
    assert (second["logs_done"], second["bytes_done"]) == (1, 3_500_000)
    # the rate is of bytes done (3.5 MB in 4.5 s), the trusted megabyte too
    assert second["bytes_per_second"] == round(3_500_000 / 4.5)
    assert second["bytes_read"] == 2_500_000
    assert second["seconds_left"] == round(500_000 / (3_500_000 / 4.5), 1)
    clock.now = 105.0
    p.recovered(500_000)
    p.log_loaded()
    p.finish()
    (end,) = lines.named("recovered logs")
    assert end == {"logs_done": 2, "logs": 2, "bytes_done": 4_000_000,
                   "bytes_to_recover": 4_000_000, "bytes_read": 3_000_000, "seconds": 5.0,
                   "bytes_per_second": 800_000}
    p.finish()
    assert len(lines.named("recovered logs")) == 1


def test_the_end_line_rate_is_its_bytes_over_its_seconds() -> None:
    # 3 MB planned (the segment holding the recovery point), 1,488 bytes read from the
    # recovery point's index entry on, loaded in 0.116 s: 26 MB/s, not 12,827 B/s.
    p, clock, lines, _ = progress(1, 3_000_000)
    p.start()
    p.begin_log(3_000_000)
    clock.now += 0.116
    p.recovered(1_488)
    p.log_loaded()
    p.finish()
    (end,) = lines.named("recovered logs")
    assert (end["bytes_done"], end["seconds"]) == (3_000_000, 0.116)
    assert end["bytes_per_second"] == round(3_000_000 / 0.116)
    assert end["bytes_read"] == 1_488


def test_a_log_never_counts_more_than_it_planned() -> None:
    p, *_ = progress(2, 1_000)
    p.start()
    p.begin_log(600)
    p.recovered(900)  # e.g. a segment the plan did not see
    assert p.bytes_done == 600
    p.log_loaded()
    p.begin_log(400)
    p.recovered(100)
    assert p.bytes_done == 700 and p.status().fraction == pytest.approx(0.7)
    p.log_loaded()
    assert p.bytes_done == 1_000 and p.status().fraction == 1.0


def test_the_listener_hears_at_most_every_update_interval_and_at_the_end() -> None:
    p, clock, _, updates = progress(1, 1_000)
    p.start()
    assert len(updates) == 1 and updates[0].bytes_done == 0 and not updates[0].finished
    p.begin_log(1_000)
    for _ in range(50):
        clock.now += 0.01
        p.recovered(10)
    assert len(updates) - 1 in (4, 5)  # 50 reports in 0.5 s: one every 0.1 s
    assert [u.bytes_done for u in updates] == sorted(u.bytes_done for u in updates)
    p.log_loaded()
    p.finish()
    assert updates[-1].finished and updates[-1].fraction == 1.0


def test_a_failed_load_tells_the_listener_but_logs_no_end() -> None:
    p, _, lines, updates = progress(3, 1_000)
    p.start()
    p.finish(completed=False)
    assert updates[-1].finished
    assert lines.named("recovered logs") == []


def test_without_bytes_to_recover_the_estimate_is_by_logs() -> None:
    p, clock, _, _ = progress(4, 0)
    p.start()
    assert p.status().seconds_left is None
    clock.now += 3
    p.log_loaded()
    status = p.status()
    assert status.fraction == 0.25 and status.seconds_left == 9.0
    assert status.bytes_per_second is None


def test_the_estimate_waits_for_a_rate() -> None:
    p, clock, _, _ = progress(1, 1_000)
    p.start()
    clock.now += 1
    status = p.status()
    assert status.seconds_left is None and status.bytes_per_second is None
    assert "left" not in status.describe()


def test_describe_is_one_short_line() -> None:
    status = RecoveryStatus(3, 10, 1_234_000_000, 2_700_000_000, 8.0, 1_000_000_000,
                            150_000_000.0, 9.8, False)
    assert status.describe() == "3/10 logs, 1.2 GB/2.7 GB, 150.0 MB/s, 10 s left"
    done = RecoveryStatus(10, 10, 2_700_000_000, 2_700_000_000, 18.0, 2_000_000_000, 150e6,
                          0.0, True)
    assert done.describe() == "10/10 logs, 2.7 GB/2.7 GB, 150.0 MB/s"
    assert RecoveryStatus(0, 5, 0, 0, 0.0, 0, None, None, False).describe() == "0/5 logs"


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (999, "999 B"), (1_000, "1.0 KB"), (52_400_000, "52.4 MB"),
    (3.2e12, "3.2 TB"), (7e15, "7000.0 TB"),
])
def test_format_bytes(n: float, text: str) -> None:
    assert format_bytes(n) == text


@pytest.mark.parametrize(("s", "text"), [
    (0.4, "0 s"), (59.4, "59 s"), (61, "1 min 01 s"), (3_725, "1 h 02 min"),
])
def test_format_seconds(s: float, text: str) -> None:
    assert format_seconds(s) == text
