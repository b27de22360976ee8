"""The export job: a Structured Streaming query from Kafka topics to a Parquet table.

Spark's Kafka source reads the topics (a list or a pattern); Spark's file sink writes
Parquet under the output path and lists each micro-batch's files in ``_spark_metadata``
only once the batch is committed, and the checkpoint records the offsets of each batch
before it runs. A restarted job replays an unfinished batch to the same files' log, so a
reader of the table (``spark.read.parquet(path)``, which follows ``_spark_metadata``)
sees every record exactly once, whatever killed the previous run.

    python -m spark.export --path /data/orders --bootstrap-servers host:9092 \\
        --topics orders --partition-by date --trigger-interval "10 seconds"
    spark-submit --master spark://host:7077 \\
        --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 spark/export.py ...

SIGTERM or SIGINT stops the query between micro-batches and exits 0; a failed query
exits 1 with its reason on one line (the broker's spark_sink restarts it with backoff).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from spark.errors import KAFKA_DEFAULTS, explain
from spark.options import ExportOptions, parse_args
from spark.session import PysparkMissing, build_session

__all__ = ["STARTED_PREFIX", "main", "output_frame", "start_query"]

STARTED_PREFIX = "export query running:"
TABLE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp",
                 "timestampType", "headers")


def output_frame(spark: Any, options: ExportOptions) -> Any:
    """The source's rows (Spark's Kafka schema, headers included) with the derived
    partitioning columns the export asks for."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", options.bootstrap_servers)
              .option("startingOffsets", options.starting_offsets)
              .option("includeHeaders", "true")
              .option("failOnDataLoss", str(options.fail_on_data_loss).lower())
              .option("kafka.isolation.level", options.isolation_level))
    if options.topics:
        reader = reader.option("subscribe", ",".join(options.topics))
    else:
        reader = reader.option("subscribePattern", options.topic_pattern)
    if options.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(options.max_offsets_per_trigger))
    for key, value in {**KAFKA_DEFAULTS, **options.kafka}.items():
        reader = reader.option("kafka." + key, value)
    df = reader.load().select(*TABLE_COLUMNS)
    # The session's time zone is UTC (spark.session): a record's date is its UTC date.
    derived = {"date": F.to_date("timestamp"), "hour": F.hour("timestamp")}
    for column in options.partition_by:
        if column in derived:
            df = df.withColumn(column, derived[column])
    return df


def start_query(spark: Any, options: ExportOptions, *, available_now: bool = False) -> Any:
    writer = (output_frame(spark, options).writeStream.format("parquet")
              .queryName(options.name)
              .option("path", options.path)
              .option("checkpointLocation", options.checkpoint_location))
    if options.partition_by:
        writer = writer.partitionBy(*options.partition_by)
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=options.trigger_interval)
    return writer.start()


def run(options: ExportOptions, *, available_now: bool = False,
        stop: threading.Event | None = None) -> None:
    """Run the export until it fails, catches up (``available_now``) or ``stop`` is set;
    a failure of the query is raised."""
    from pyspark.errors import PySparkException

    spark = build_session(options.master, f"kafkernel-export-{options.name}",
                          dict(options.conf))
    if stop is not None and threading.current_thread() is threading.main_thread():
        # The SparkContext put pyspark's SIGINT handler in place of main's: it raises
        # KeyboardInterrupt inside the running py4j call (a Py4JError, no clean stop).
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    spark.sparkContext.setLogLevel("WARN")
    try:
        try:
            query = start_query(spark, options, available_now=available_now)
            announced = False
            # Poll rather than block in the JVM, so a stop request is seen within a second.
            while query.isActive and not (stop is not None and stop.is_set()):
                query.awaitTermination(1)
                if not announced and query.lastProgress is not None:
                    # The first trigger is done: the source reached the brokers and read
                    # their offsets. The supervisor (plugins/spark_sink) reads this line
                    # as "running"; a query that fails before it was never running.
                    print(f"{STARTED_PREFIX} {options.name}", flush=True)
                    announced = True
            if query.isActive:
                query.stop()
            error = query.exception()
        except PySparkException as e:  # refused before it ran, or failed while awaited
            raise ExportFailed(explain(str(e), options)) from e
        if error is not None:
            raise ExportFailed(explain(error.desc if hasattr(error, "desc") else str(error),
                                       options))
    finally:
        spark.stop()


class ExportFailed(RuntimeError):
    """The streaming query stopped on an error (Spark's reason)."""


def main(argv: Sequence[str] | None = None) -> int:
    options, flags = parse_args(sys.argv[1:] if argv is None else argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if flags.exit_with_parent:
        _stop_with_parent(stop)
    try:
        run(options, available_now=flags.available_now, stop=stop)
    except (PysparkMissing, ExportFailed) as e:
        print(f"export {options.name}: {_first_line(str(e))}", file=sys.stderr)
        return 1
    return 0


def _stop_with_parent(stop: threading.Event) -> None:
    """Set ``stop`` once this process is orphaned (its parent, the broker, died without
    stopping it): a supervised export never outlives its supervisor."""
    parent = os.getppid()

    def watch() -> None:
        while not stop.wait(1.0):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text)


if __name__ == "__main__":
    sys.exit(main())
