"""The export job (spark/export.py): Kafka topics to a Parquet table through Spark's
Kafka source and file sink, exactly once across a crash and a restart."""

from __future__ import annotations

import datetime
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kernel.testing.embedded import EmbeddedBroker
from spark.options import ExportOptions
from spark.progress import exported_offsets
from tests.spark.exports import ExportProcess
from tests.spark.kafka import create_topic, produce

PARTITIONS = 3


def ends(topic: str, sent: list[Any]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for s in sent:
        out[(topic, s.partition)] = max(out.get((topic, s.partition), 0), s.offset + 1)
    return out


def test_export_is_exactly_once_across_a_crash_and_a_restart(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    options = ExportOptions(
        name="orders", path=str(tmp_path / "table"), bootstrap_servers=kafkernel.bootstrap,
        topics=(topic_name,), partition_by=("date",), trigger_interval="500 milliseconds",
        max_offsets_per_trigger=15, master="local[1]")
    sent = produce(kafkernel.bootstrap, topic_name, 45, PARTITIONS)
    job = ExportProcess(options, tmp_path / "export.log").start()
    try:
        # Some micro-batches are committed, then the job dies without warning.
        job.wait_exported({(topic_name, p): 5 for p in range(PARTITIONS)})
        job.kill()
        at_kill = exported_offsets(options.checkpoint_location)
        assert sum(at_kill.values()) < len(sent), "the job finished before it was killed"
        sent += produce(kafkernel.bootstrap, topic_name, 30, PARTITIONS, first=45)
        job = ExportProcess(options, tmp_path / "export.log").start()
        job.wait_exported(ends(topic_name, sent))
    finally:
        assert job.stop() == 0, (tmp_path / "export.log").read_text()[-3000:]

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
