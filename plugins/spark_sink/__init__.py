"""Export sink: the ``spark_sink`` plugin.

Keeps chosen topics exported to Parquet tables, exactly once, with no Spark code from
the operator: each export in its TOML table is a Spark Structured Streaming job
(``spark/export.py``) that the broker runs as a child process, starts after its own
startup, restarts with backoff when it dies and stops on shutdown. Each export's state
and lag (its checkpoint's exported offsets against the high watermark, per partition)
are in the broker's metrics and logs.
"""

from __future__ import annotations

from plugins.spark_sink.plugin import PLUGIN_NAME, SparkSinkPlugin

__all__ = ["PLUGIN_NAME", "SparkSinkPlugin"]
