"""The ``[plugins.spark_sink]`` table: the exports (an array of tables, each validated by
``spark.options``, the job's own option definitions) and how they are supervised."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernel.api.config import int_at_least, setting
from spark.options import ExportOptionError, ExportOptions

__all__ = ["SparkSinkSettings"]


def _exports(tables: list[dict[str, Any]]) -> str | None:
    names: set[str] = set()
    for table in tables:
        try:
            # bootstrap.servers defaults to the broker's own listener at startup.
            options = ExportOptions.from_table(table, defaults={"bootstrap.servers": "-"})
        except ExportOptionError as e:
            return str(e)
        if options.name in names:
            return f"export {options.name!r}: two exports have this name"
        names.add(options.name)
    return None


@dataclass(frozen=True, slots=True)
class SparkSinkSettings:
    exports: list[dict[str, Any]] = setting(
        "exports", [],
        "The exports, one table each: name, path, topics or topic.pattern, and the "
        "options of spark/options.py (partition.by, trigger.interval, master, conf, ...).",
        check=_exports,
    )
    restart_backoff_ms: int = setting(
        "restart.backoff.ms", 1000,
        "Wait before restarting an export that exited; doubled at each exit in a row.",
        check=int_at_least(0),
    )
    restart_backoff_max_ms: int = setting(
        "restart.backoff.max.ms", 60000, "The longest wait before a restart.",
        check=int_at_least(0),
    )
    healthy_after_ms: int = setting(
        "healthy.after.ms", 60000,
        "An export that ran this long before exiting restarts after the shortest wait.",
        check=int_at_least(0),
    )
    stop_timeout_ms: int = setting(
        "stop.timeout.ms", 30000,
        "On shutdown, how long an export has to stop its query before it is killed.",
        check=int_at_least(0),
    )
    lag_interval_ms: int = setting(
        "lag.interval.ms", 5000,
        "How often each export's checkpoint is read for its exported offsets and lag.",
        check=int_at_least(100),
    )
