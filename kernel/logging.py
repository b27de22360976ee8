"""structlog loggers, one per broker (no process-wide structlog.configure): console
rendering for humans, JSON lines for machines. Components bind context (connection,
request, partition) onto the broker's logger."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


def make_logger(fmt: str, level: str, stream: TextIO | None = None, **context: Any) -> Any:
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    processors: list[Any] = [
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
