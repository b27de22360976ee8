"""``kafkernel spark export ...``: one export run by hand, in the foreground, with a
progress bar of the offsets exported against the latest offsets of its topics (the high
watermark; the last stable offset under read_committed), as Spark's Kafka source reports
them after each micro-batch. Ctrl-C (SIGINT) or SIGTERM stops the query between
micro-batches; the checkpoint keeps where it stopped, so the next run (or the broker's
spark_sink on the same checkpoint) goes on from there."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from spark.errors import explain
from spark.options import ExportOptions, parse_args
from spark.progress import exported_offsets
from spark.session import PysparkMissing, build_session

__all__ = ["main"]


def _sum(offsets_json: Any) -> int | None:
    """Sum of a Kafka source offset JSON ({"topic": {"partition": offset}})."""
    if not offsets_json:
        return None
    data = json.loads(offsets_json) if isinstance(offsets_json, str) else offsets_json
    return sum(int(o) for partitions in data.values() for o in partitions.values())


def position(query: Any, options: ExportOptions) -> tuple[int, int | None]:
    """(offsets exported, latest offsets) summed over the export's partitions."""
    progress = query.lastProgress
    if progress and progress.get("sources"):
        source = progress["sources"][0]
        done = _sum(source.get("endOffset"))
        latest = _sum(source.get("latestOffset"))
        if done is not None:
            return done, latest
    return sum(exported_offsets(options.checkpoint_location).values()), None


class StopOnSignal:
    """SIGINT and SIGTERM while the query runs ask it to stop (``requested``): the follow
    loop sees it between two py4j calls. Before the query runs (the JVM starting, Ivy
    resolving the connector) and at a second signal they interrupt at once.

    Installed over pyspark's own SIGINT handler, which the SparkContext sets: it raises
    KeyboardInterrupt inside whatever py4j call is running, which breaks that call
    (a Py4JError traceback) and leaves the query unstopped. Installed explicitly, too, so
    an export started where SIGINT is ignored (a shell's background job) still hears it.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.query_running = False

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.query_running or self.requested.is_set():
            raise KeyboardInterrupt
        self.requested.set()


def _follow(query: Any, options: ExportOptions, stop: StopOnSignal) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn(f"export {options.name}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("offsets exported / latest"), transient=False) as bar:
        task = bar.add_task("export", total=None)
        while query.isActive and not stop.requested.is_set():
            done, latest = position(query, options)
            bar.update(task, completed=done, total=latest)
            query.awaitTermination(0.5)
        done, latest = position(query, options)
        bar.update(task, completed=done, total=latest if latest is not None else done)


def main(argv: Sequence[str]) -> int:
    options, flags = parse_args(argv, prog="kafkernel spark export")
    stop = StopOnSignal()
    stop.install()
    try:
        spark = build_session(options.master, f"kafkernel-export-{options.name}",
                              dict(options.conf))
    except PysparkMissing as e:
        print(f"kafkernel spark export: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"export {options.name}: interrupted before it started", file=sys.stderr)
        return 130
    stop.install()  # again: the SparkContext put pyspark's SIGINT handler in its place
    from pyspark.errors import PySparkException

    from spark.export import start_query

    # A failed query is reported below in one line; Spark's own log of it is a page.
    spark.sparkContext.setLogLevel("FATAL")
    started = time.monotonic()
    try:
        query = start_query(spark, options, available_now=flags.available_now)
        stop.query_running = True
        _follow(query, options, stop)
        if stop.requested.is_set():
            print("stopping the query (Ctrl-C again to abandon it)", file=sys.stderr)
            query.stop()
        error = query.exception()
        if error is not None:
            message = error.desc if hasattr(error, "desc") else str(error)
            print(f"export {options.name}: {explain(message, options)}", file=sys.stderr)
            return 1
    except PySparkException as e:
        print(f"export {options.name}: {explain(str(e), options)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"export {options.name}: abandoned", file=sys.stderr)
        return 130
    finally:
        spark.stop()
    done = sum(exported_offsets(options.checkpoint_location).values())
    print(f"export {options.name}: offsets exported {done} "
          f"in {time.monotonic() - started:.1f} s; table {options.path}")
    return 0
