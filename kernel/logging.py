"""structlog loggers, one per broker (no process-wide structlog.configure): console
rendering for humans, JSON lines for machines. Components bind context (connection,
request, partition) onto the broker's logger. Every error-level event is also handed to
``on_error``: the broker counts them, so a failure that was only logged is still seen."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any, Protocol, TextIO, cast

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


ERROR_METHODS = frozenset({"error", "exception", "critical"})

ErrorListener = Callable[[MutableMapping[str, Any]], None]


def _report_errors(on_error: ErrorListener) -> Any:
    def processor(_logger: Any, method: str,
                  event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if method in ERROR_METHODS:
            on_error(event)
        return event

    return processor


class LogStream(Protocol):
    """Where log lines are written: a text file such as stderr, or a terminal's
    progress bar that keeps itself below them (kernel.terminal.ProgressBar)."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


def make_logger(fmt: str, level: str, stream: LogStream | None = None,
                on_error: ErrorListener | None = None, **context: Any) -> Any:
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    processors: list[Any] = [
        *([_report_errors(on_error)] if on_error is not None else []),
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        renderer,
    ]
    logger = structlog.wrap_logger(
        # PrintLogger only writes and flushes what its TextIO annotation asks for
        structlog.PrintLogger(cast(TextIO, stream or sys.stderr)),
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        cache_logger_on_first_use=True,
    )
    return logger.bind(**context)


# How long a repeated notice stays quiet, and how many keys are remembered at most.
NOTICE_PERIOD_S = 300.0
NOTICE_KEYS = 10_000


class Notices:
    """Which keys (client addresses) were told about something in the last period: a
    warning that a client can cause on every request is logged once per key per
    period, so that a misconfigured or hostile client cannot flood the log."""

    def __init__(self, period_s: float = NOTICE_PERIOD_S) -> None:
        self.period_s = period_s
        self._logged: dict[str, float] = {}

    def due(self, key: str) -> bool:
        now = time.monotonic()
        last = self._logged.get(key)
        if last is not None and now - last < self.period_s:
            return False
        if len(self._logged) >= NOTICE_KEYS:
            self._logged = {k: t for k, t in self._logged.items() if now - t < self.period_s}
        self._logged[key] = now
        return True
