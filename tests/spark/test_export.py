"""The export job (spark/export.py): Kafka topics to a Parquet table through Spark's
Kafka source and file sink, exactly once across a crash and a restart."""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kernel.testing.embedded import EmbeddedBroker
from spark.options import ExportOptions
from spark.progress import exported_offsets
from tests.spark.exports import REPO, ExportProcess
from tests.spark.kafka import create_topic, produce

PARTITIONS = 3


def ends(topic: str, sent: list[Any]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for s in sent:
        out[(topic, s.partition)] = max(out.get((topic, s.partition), 0), s.offset + 1)
    return out


def assert_table(spark: Any, options: ExportOptions, sent: list[Any]) -> None:
    """The table holds each record sent exactly once, with its key, value and date, in
    one directory per date."""
    table = spark.read.parquet(options.path)
    got = table.select("topic", "partition", "offset", "key", "value", "date").collect()
    counts = Counter((r["partition"], r["offset"]) for r in got)
    assert [k for k, n in counts.items() if n > 1] == []
    assert sorted(counts) == sorted((s.partition, s.offset) for s in sent)
    by_offset = {(r["partition"], r["offset"]): r for r in got}
    for s in sent:
        row = by_offset[(s.partition, s.offset)]
        assert (bytes(row["value"]), row["key"] and bytes(row["key"])) == (s.value, s.key)
        assert row["date"] == datetime.datetime.fromtimestamp(
            s.timestamp_ms / 1000, datetime.UTC).date()
    # Partitioned by the records' date: one directory per day.
    assert {p.name for p in Path(options.path).glob("date=*")} == {
        f"date={d}" for d in {r["date"] for r in got}}


def test_export_writes_each_record_once_partitioned_by_date(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """One run that exports what the topic holds, in several micro-batches, then stops
    (--available-now). The exactly-once checks across a killed job and a restart are
    the sink's (test_spark_sink.py), which runs this job."""
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    options = ExportOptions(
        name="orders", path=str(tmp_path / "table"), bootstrap_servers=kafkernel.bootstrap,
        topics=(topic_name,), partition_by=("date",), max_offsets_per_trigger=20,
        master="local[1]")
    sent = produce(kafkernel.bootstrap, topic_name, 45, PARTITIONS)
    job = ExportProcess(options, tmp_path / "export.log", "--available-now").start()
    assert job.proc is not None
    assert job.proc.wait(180) == 0, (tmp_path / "export.log").read_text()[-3000:]
    job.stop()
    assert exported_offsets(options.checkpoint_location) == ends(topic_name, sent)

    assert_table(spark, options, sent)
    # Several micro-batches, each committed.
    assert len(list(Path(options.checkpoint_location, "commits").iterdir())) >= 3


@pytest.mark.parametrize(("args", "problem"), [
    (["--path", "x"], "the following arguments are required: --bootstrap-servers"),
    (["--path", "x", "--bootstrap-servers", "h:1"],
     "give exactly one of topics (a list) and topic.pattern"),
    (["--path", "x", "--bootstrap-servers", "h:1", "--topics", "t", "--partition-by", "day"],
     "--partition-by: ('day',) is not allowed; expected columns among date, hour, topic,"),
    (["--path", "x", "--bootstrap-servers", "h:1", "--topics", "t", "--colour", "red"],
     "unrecognized arguments: --colour red"),
])
def test_bad_export_arguments_get_one_line(
        args: list[str], problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    from spark.export import main

    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert problem in capsys.readouterr().err


def test_kafkernel_spark_export_command_reports_progress_and_finishes(
        kafkernel: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    """``kafkernel spark export --available-now``: the table as the job writes it, and a
    last line counting the offsets exported."""
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    sent = produce(kafkernel.bootstrap, topic_name, 30, PARTITIONS)
    table = tmp_path / "table"
    done = subprocess.run(
        [sys.executable, "-m", "kernel", "spark", "export", "--name", "cli",
         "--path", str(table), "--bootstrap-servers", kafkernel.bootstrap,
         "--topics", topic_name, "--master", "local[1]", "--available-now"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "export cli" in done.stdout  # the progress bar's label
    assert done.stdout.strip().splitlines()[-1].startswith(
        f"export cli: offsets exported {len(sent)} in ")
    assert exported_offsets(str(table / "_checkpoint")) == ends(topic_name, sent)


# A stop between micro-batches, then spark.stop(): seconds, longer on a loaded 2-core
# machine. Before the fix SIGINT broke the running py4j call instead (pyspark's handler
# raises KeyboardInterrupt in it): a Py4JError traceback, exit 1, the query not stopped.
SIGINT_STOP_BOUND_S = 60


@pytest.mark.parametrize("command", [["kernel", "spark", "export"], ["spark.export"]])
def test_sigint_stops_a_running_export_cleanly(
        kafkernel: EmbeddedBroker, topic_name: str, tmp_path: Path,
        command: list[str]) -> None:
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    sent = produce(kafkernel.bootstrap, topic_name, 10, PARTITIONS)
    table = tmp_path / "table"
    out_path, err_path = tmp_path / "out", tmp_path / "err"
    with out_path.open("w") as out, err_path.open("w") as err:  # files: a pipe fills
        proc = subprocess.Popen(
            [sys.executable, "-m", *command, "--name", "interrupted", "--path", str(table),
             "--bootstrap-servers", kafkernel.bootstrap, "--topics", topic_name,
             "--master", "local[1]", "--trigger-interval", "1 second"],
            stdout=out, stderr=err, text=True, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while exported_offsets(str(table / "_checkpoint")) != ends(topic_name, sent):
            assert proc.poll() is None, err_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the export exported nothing in 300 s"
            time.sleep(0.5)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)  # the Python process only, as kill -INT does
        proc.wait(timeout=SIGINT_STOP_BOUND_S)
        took = time.monotonic() - signalled
    finally:
        with contextlib.suppress(ProcessLookupError):  # the JVM, should it outlive it
            os.killpg(proc.pid, signal.SIGKILL)
    errors = err_path.read_text()
    assert (proc.returncode, "Traceback" in errors) == (0, False), errors[-3000:]
    assert took < SIGINT_STOP_BOUND_S
    if command[0] == "kernel":
        assert out_path.read_text().strip().splitlines()[-1].startswith(
            f"export interrupted: offsets exported {len(sent)} in ")
    assert exported_offsets(str(table / "_checkpoint")) == ends(topic_name, sent)
