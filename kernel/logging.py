"""structlog loggers, one per broker (no process-wide structlog.configure): console
rendering for humans, JSON lines for machines. Components bind context (connection,
request, partition) onto the broker's logger. Every error-level event is also handed to
``on_error``: the broker counts them, so a failure that was only logged is still seen."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any, TextIO

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


def make_logger(fmt: str, level: str, stream: TextIO | None = None,
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
        structlog.PrintLogger(stream or sys.stderr),
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        cache_logger_on_first_use=True,
    )
    return logger.bind(**context)
