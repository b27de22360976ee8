"""Spark's Kafka connector reading Kafkernel against reading Apache Kafka, in one run
(issue 17's benchmark): rows per second of a batch read, and records per second of the
export job (Kafka source -> Parquet file sink, spark/export.py), on the same records.

    .venv/bin/python -m bench.spark [--records N] [--partitions N] [--runs N] [--master M]

Each broker in turn (Kafka first) gets one topic of ``partitions`` partitions and
``records`` records of ``size`` bytes (confluent-kafka, round robin); then, on one
SparkSession for the whole run, one read not counted (the JVM's warm-up on this
broker), and ``runs`` times: a batch read (``spark.read.format("kafka")``, every row's
value summed so every record is fetched and decoded) and an export of the whole topic
(``--available-now``) into a fresh table. The table gives medians and Kafkernel/Kafka.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.brokers import AdminBroker, kafka_and_kafkernel
from bench.clients import produce_batches
from spark.options import ExportOptions
from spark.progress import exported_offsets
from spark.session import build_session

TOPIC = "bench-spark"
TIMEOUT_S = 600.0
# Reads of each broker before the measured runs: the Spark JVM's start-up compiling.
WARM_UP_READS = 2
WORKLOADS = ("batch read", "export")


@dataclass(frozen=True)
class Measured:
    """One workload on one broker: records per second, and the broker process's CPU
    seconds (user and system) meanwhile (None when /proc could not be read)."""

    rate: float
    cpu_s: float | None


def batch_read(spark: Any, bootstrap: str, records: int) -> float:
    """Seconds to read the topic with Spark's Kafka source, checked complete."""
    from pyspark.sql import functions as F

    began = time.perf_counter()
    row = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", TOPIC).load()
           .agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"))
           .collect()[0])
    seconds = time.perf_counter() - began
    if row["n"] != records:
        raise RuntimeError(f"the batch read returned {row['n']} rows, not {records}")
    return seconds


def export(spark: Any, bootstrap: str, records: int, table: Path, master: str) -> float:
    """Seconds for the export job to write the topic to a new Parquet table."""
    from spark.export import start_query

    options = ExportOptions(name="bench", path=str(table), bootstrap_servers=bootstrap,
                            topics=(TOPIC,), master=master)
    began = time.perf_counter()
    query = start_query(spark, options, available_now=True)
    query.awaitTermination()
    seconds = time.perf_counter() - began
    done = sum(exported_offsets(options.checkpoint_location).values())
    if done != records:
        raise RuntimeError(f"the export wrote {done} records, not {records}")
    return seconds


def prepare(broker: AdminBroker, args: argparse.Namespace) -> None:
    broker.create_topics([TOPIC], args.partitions)
    produced = produce_batches(broker.bootstrap, TOPIC, b"x" * args.size, args.records,
                               args.partitions, args.batch_records, TIMEOUT_S)
    if produced.error or produced.records != args.records:
        raise RuntimeError(f"produce failed on {broker.name}: {produced.error}")


def measure(brokers: list[AdminBroker], spark: Any, args: argparse.Namespace,
            work: Path) -> dict[str, dict[str, list[Measured]]]:
    """Both brokers up at once, taking turns in each run, the first of a run alternating:
    the Spark JVM keeps compiling for minutes, and whichever broker went second would
    otherwise be read by a faster Spark."""
    for broker in brokers:
        prepare(broker, args)
    for _ in range(WARM_UP_READS):
        for broker in brokers:
            batch_read(spark, broker.bootstrap, args.records)
    out: dict[str, dict[str, list[Measured]]] = {
        b.name: {w: [] for w in WORKLOADS} for b in brokers}

    def timed(broker: AdminBroker, workload: str, work: Callable[[], float]) -> None:
        before = broker.sample()
        seconds = work()
        after = broker.sample()
        cpu_s = after.cpu_s - before.cpu_s if before and after else None
        out[broker.name][workload].append(Measured(args.records / seconds, cpu_s))

    for run in range(args.runs):
        turn = brokers if run % 2 == 0 else brokers[::-1]
        for broker in turn:
            timed(broker, "batch read",
                  functools.partial(batch_read, spark, broker.bootstrap, args.records))
        for broker in turn:
            timed(broker, "export", functools.partial(
                export, spark, broker.bootstrap, args.records,
                work / f"{broker.name}-{run}", args.master))
        print(f"run {run + 1}: " + "; ".join(
            f"{name} batch read {f['batch read'][-1].rate:,.0f} rows/s, "
            f"export {f['export'][-1].rate:,.0f} records/s" for name, f in out.items()),
            file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch-records", type=int, default=1000,
                        help="records in each produced batch (the same on both brokers)")
    parser.add_argument("--runs", type=int, default=4,
                        help="an even number: each broker goes first as often")
    parser.add_argument("--master", default="local[2]",
                        help="Spark's master URL (local[N] or spark://host:port)")
    parser.add_argument("--brokers", default="kafka,kafkernel",
                        help="which brokers, in order: kafka, kafkernel")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    spark = build_session(args.master, "kafkernel-bench-spark", {
        "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    cores, version = spark.sparkContext.defaultParallelism, spark.version
    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    brokers = kafka_and_kafkernel(args.brokers, args.partitions)
    try:
        with contextlib.ExitStack() as stack:
            for broker in brokers:
                stack.enter_context(broker)
            figures = measure(brokers, spark, args, work)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"Spark {version} ({args.master}, {cores} cores; this machine "
          f"{os.cpu_count()} cores, load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after), {args.records:,} records x {args.size} B in "
          f"{args.partitions} partitions, median of {args.runs}")
    print("| workload | Kafka rows/s | Kafkernel rows/s | ratio | broker CPU s, Kafka / "
          "Kafkernel |")
    print("|---|---|---|---|---|")

    def median(broker: str, workload: str, field: str) -> float | None:
        values = [getattr(m, field) for m in figures.get(broker, {}).get(workload, ())]
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    for workload in WORKLOADS:
        k, n = median("kafka", workload, "rate"), median("kafkernel", workload, "rate")
        ratio = f"{n / k:.2f}" if k and n else "-"
        cpu = " / ".join(f"{c:.2f}" if c is not None else "-" for c in (
            median("kafka", workload, "cpu_s"), median("kafkernel", workload, "cpu_s")))
        print(f"| {workload} | {k or 0:,.0f} | {n or 0:,.0f} | {ratio} | {cpu} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
