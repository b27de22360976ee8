"""How far a start-up's log recovery has got: logs loaded and bytes re-validated out of
what was planned, the rate, and an estimate of the time left.

Kafka's LogManager logs "Recovering unflushed segment" for each segment and
"(n/m logs completed)" for each log loaded; a broker with thousands of logs or a few
large ones says a lot or nothing for minutes. Here one :class:`RecoveryProgress` per
load (made by the log manager only when a log dir had no clean shutdown) logs a start
line, a progress line at most every ``log_interval_s``, and an end line, and hands the
same figures to ``on_update`` (a terminal's progress bar) at most every
``update_interval_s``.

Before the first log opens it knows the logs to load and the bytes to recover: each
unclean log's segment files from the one holding its recovery point (what the loader
re-reads; :func:`kernel.log.loader.bytes_to_recover`). The loader reports the bytes it
re-validated once per chunk it reads (never per batch), and the manager each log loaded;
what a log was planned to recover but did not read (a segment entered at its recovery
point's index entry, segments deleted after a truncation) counts as done when the log is
loaded. The rate, and so the estimate, is of bytes done, as the lines report them: a
log whose plan was mostly trusted (entered at the index entry) is that much progress in
that time; ``bytes_read`` says how much was actually re-validated.

Every call comes from the one thread that loads; nothing is shared between brokers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

# Progress lines at most this often: enough to see a recovery move, few enough to read.
RECOVERY_LOG_INTERVAL_S = 2.0
# A terminal's bar is redrawn at most this often.
RECOVERY_UPDATE_INTERVAL_S = 0.1

_UNITS = ("B", "KB", "MB", "GB", "TB")


def format_bytes(n: float) -> str:
    """``n`` bytes for a person: 1000-based units, as disk sizes are given."""
    unit = 0
    while abs(n) >= 1000 and unit < len(_UNITS) - 1:
        n /= 1000
        unit += 1
    return f"{n:.0f} {_UNITS[unit]}" if unit == 0 else f"{n:.1f} {_UNITS[unit]}"


def format_seconds(s: float) -> str:
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass(frozen=True, slots=True)
class RecoveryStatus:
    """One reading of a recovery's progress (a :class:`kernel.terminal.Progress`)."""

    label: ClassVar[str] = "recovering logs"

    logs_done: int
    logs: int
    bytes_done: int
    bytes_to_recover: int
    seconds: float
    # of them, what the loader actually read (the rest was trusted or truncated away)
    bytes_read: int
    # bytes done per second so far; None before any was done
    bytes_per_second: float | None
    # None until there is a rate to estimate it from
    seconds_left: float | None
    finished: bool

    @property
    def fraction(self) -> float:
        """Done, in [0, 1]: by bytes, or by logs when there are no bytes to recover."""
        if self.bytes_to_recover > 0:
            return min(1.0, self.bytes_done / self.bytes_to_recover)
        return self.logs_done / self.logs if self.logs else 1.0

    def describe(self) -> str:
        """One short line for a person: ``3/10 logs, 1.2 GB/2.7 GB, 150.0 MB/s, 10 s left``."""
        parts = [f"{self.logs_done}/{self.logs} logs"]
        if self.bytes_to_recover:
            parts.append(f"{format_bytes(self.bytes_done)}/"
                         f"{format_bytes(self.bytes_to_recover)}")
        if self.bytes_per_second is not None:
            parts.append(f"{format_bytes(self.bytes_per_second)}/s")
        if self.seconds_left is not None and not self.finished:
            parts.append(f"{format_seconds(self.seconds_left)} left")
        return ", ".join(parts)

    def log_fields(self) -> dict[str, Any]:
        """The figures of a log line (plain numbers, for machines)."""
        fields: dict[str, Any] = {
            "logs_done": self.logs_done, "logs": self.logs,
            "bytes_done": self.bytes_done, "bytes_to_recover": self.bytes_to_recover,
            "bytes_read": self.bytes_read, "percent": round(100 * self.fraction, 1),
            "seconds": round(self.seconds, 3),
        }
        if self.bytes_per_second is not None:
            fields["bytes_per_second"] = round(self.bytes_per_second)
        if self.seconds_left is not None:
            fields["seconds_left"] = round(self.seconds_left, 1)
        return fields


RecoveryListener = Callable[[RecoveryStatus], None]


class RecoveryProgress:
    """The progress of one load that recovers logs; see the module's docstring.

    :param logger: the log manager's structured logger.
    :param logs: logs the load will open (clean ones included: they count as done).
    :param bytes_to_recover: the sum of the bytes each log is planned to recover.
    :param on_update: called with each new reading, at most every ``update_interval_s``
        and once more when the load ends (``finished``), in the loading thread.
    """

    def __init__(
        self,
        logger: Any,
        logs: int,
        bytes_to_recover: int,
        *,
        log_interval_s: float = RECOVERY_LOG_INTERVAL_S,
        update_interval_s: float = RECOVERY_UPDATE_INTERVAL_S,
        on_update: RecoveryListener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self.logs = logs
        self.bytes_to_recover = bytes_to_recover
        self._log_interval_s = log_interval_s
        self._update_interval_s = update_interval_s
        self._on_update = on_update
        self._clock = clock
        self._started = clock()
        self._next_log = self._next_update = self._started
        self.logs_done = 0
        self.bytes_done = 0
        self._bytes_read = 0
        self._log_left = 0  # of the log being loaded: planned bytes not yet counted
        self._finished = False

    def status(self, now: float | None = None) -> RecoveryStatus:
        elapsed = max(0.0, (self._clock() if now is None else now) - self._started)
        rate = self.bytes_done / elapsed if self.bytes_done and elapsed > 0 else None
        left: float | None = None
        if self.bytes_to_recover > 0:
            if rate:
                left = (self.bytes_to_recover - self.bytes_done) / rate
        elif self.logs_done and elapsed > 0:
            left = (self.logs - self.logs_done) * elapsed / self.logs_done
        return RecoveryStatus(
            self.logs_done, self.logs, self.bytes_done, self.bytes_to_recover, elapsed,
            self._bytes_read, rate, left, self._finished,
        )

    def start(self) -> None:
        self._log.info("recovering logs", logs=self.logs,
                       bytes_to_recover=self.bytes_to_recover)
        self._next_log = self._started + self._log_interval_s
        self._report(self._started)

    def begin_log(self, bytes_to_recover: int) -> None:
        """The next log to open plans to recover ``bytes_to_recover``."""
        self._log_left = bytes_to_recover

    def recovered(self, n: int) -> None:
        """The loader re-validated ``n`` more bytes of the log being loaded."""
        self._bytes_read += n
        counted = min(n, self._log_left)  # a plan that fell short never overshoots
        self._log_left -= counted
        self.bytes_done += counted
        self._report(self._clock())

    def log_loaded(self) -> None:
        self.bytes_done += self._log_left
        self._log_left = 0
        self.logs_done += 1
        self._report(self._clock())

    def finish(self, completed: bool = True) -> None:
        """The load ended: the end line when it ``completed`` (a failed load's error is
        logged by whoever catches it), and a last ``on_update`` either way so a
        terminal's bar goes away."""
        if self._finished:
            return
        self._finished = True
        status = self.status()
        if self._on_update is not None:
            self._on_update(status)  # first: the bar goes before the end line is written
        if completed:
            fields = status.log_fields()
            fields.pop("percent")
            fields.pop("seconds_left", None)
            self._log.info("recovered logs", **fields)

    def _report(self, now: float) -> None:
        if self._on_update is not None and now >= self._next_update:
            self._next_update = now + self._update_interval_s
            self._on_update(self.status(now))
        if now >= self._next_log:
            self._next_log = now + self._log_interval_s
            self._log.info("log recovery progress", **self.status(now).log_fields())
