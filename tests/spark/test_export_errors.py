"""Bad input to an export ends it with one clear line, in bounded time, never a hang: an
unreachable broker, a topic deleted while it runs, and offsets out of range (records
deleted below its checkpoint) with and without fail.on.data.loss. A missing or unknown
option is test_export.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from kernel.testing.embedded import EmbeddedBroker
from spark.options import ExportOptions
from spark.progress import exported_offsets
from tests.broker_process import free_port
from tests.spark.exports import REPO, ExportProcess
from tests.spark.kafka import create_topic, produce

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def run_export(*args: str, timeout: float = 240) -> tuple[int, str]:
    """``python -m spark.export ...`` to its end: exit code and its last line on stderr
    (the one-line reason)."""
    done = subprocess.run([sys.executable, "-m", "spark.export", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=timeout)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return done.returncode, lines[-1] if lines else ""


def test_unreachable_broker_is_one_line_in_bounded_time(tmp_path: Path) -> None:
    """``kafkernel spark export`` against a port nobody listens on: Spark's admin client
    gives up after the source's retries of default.api.timeout.ms (set short here; 20 s
    by default, spark.errors), and the command says so in its last line."""
    port = free_port()
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kernel", "spark", "export", "--name", "nowhere",
         "--path", str(tmp_path / "table"), "--bootstrap-servers", f"127.0.0.1:{port}",
         "--topics", "orders", "--master", "local[1]", "--available-now",
         "--kafka", "default.api.timeout.ms=3000", "--kafka", "request.timeout.ms=3000"],
        capture_output=True, text=True, timeout=240, cwd=REPO, env=ENV)
    took = time.monotonic() - began
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"export nowhere: no broker answered at 127.0.0.1:{port} "
        "(kafka default.api.timeout.ms 3000): TimeoutException: "), done.stderr[-3000:]
    # Three attempts of 3 s, and a JVM's start and stop: far below the hour a hang takes.
    assert took < 120, took


def test_deleted_topic_stops_the_export_with_its_name(
        kafkernel: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    create_topic(kafkernel.bootstrap, topic_name, 2)
    sent = produce(kafkernel.bootstrap, topic_name, 10, 2)
    options = ExportOptions(
        name="doomed", path=str(tmp_path / "table"), bootstrap_servers=kafkernel.bootstrap,
        topics=(topic_name,), master="local[1]", trigger_interval="500 milliseconds")
    job = ExportProcess(options, tmp_path / "export.log").start()
    try:
        job.wait_exported({(topic_name, s.partition): 5 for s in sent})
        admin = AdminClient({"bootstrap.servers": kafkernel.bootstrap})
        admin.delete_topics([topic_name])[topic_name].result(30)
        assert job.proc is not None
        code = job.proc.wait(120)
    finally:
        job.stop()
    log = (tmp_path / "export.log").read_text()
    assert code == 1, log[-3000:]
    assert (f"export doomed: topic {topic_name}: no such topic (deleted?): "
            "UnknownTopicOrPartitionException: ") in log, log[-3000:]


def test_offsets_out_of_range_fail_the_export_unless_data_loss_is_allowed(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """An export stopped at offset 10 of each partition; meanwhile records up to 15 were
    deleted (DeleteRecords, as retention would). Its checkpoint's next batch starts out
    of range: the export stops and says so; with --no-fail-on-data-loss it goes on from
    the log start offset, and the table has each surviving record once."""
    create_topic(kafkernel.bootstrap, topic_name, 2)
    first = produce(kafkernel.bootstrap, topic_name, 20, 2)
    options = ExportOptions(
        name="gap", path=str(tmp_path / "table"), bootstrap_servers=kafkernel.bootstrap,
        topics=(topic_name,), master="local[1]")
    args = [*options.to_args(), "--available-now"]
    code, last = run_export(*args)
    assert code == 0, last
    assert exported_offsets(options.checkpoint_location) == {
        (topic_name, 0): 10, (topic_name, 1): 10}
    later = produce(kafkernel.bootstrap, topic_name, 20, 2, first=20)
    admin = AdminClient({"bootstrap.servers": kafkernel.bootstrap})
    for future in admin.delete_records(
            [TopicPartition(topic_name, p, 15) for p in (0, 1)]).values():
        future.result(30)

    code, last = run_export(*args)
    assert code == 1
    assert last.startswith(
        f"export gap: data loss: Could not read records in offset [10, 20) for topic "
        f"partition {topic_name}-"), last
    assert last.endswith("fail.on.data.loss = false (--no-fail-on-data-loss) skips them")
    assert exported_offsets(options.checkpoint_location)[(topic_name, 0)] == 10

    code, last = run_export(*args, "--no-fail-on-data-loss")
    assert code == 0, last
    assert exported_offsets(options.checkpoint_location) == {
        (topic_name, 0): 20, (topic_name, 1): 20}
    table = spark.read.parquet(options.path).select("partition", "offset").collect()
    counts = Counter((r["partition"], r["offset"]) for r in table)
    assert sorted(counts) == sorted(
        (s.partition, s.offset) for s in first + later if s.offset < 10 or s.offset >= 15)
    assert set(counts.values()) == {1}
