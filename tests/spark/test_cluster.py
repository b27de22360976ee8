"""The export job on a real Spark cluster: a standalone master and worker started from the
pyspark installation, the job given its ``spark://`` URL; the Kafka source's tasks run in
the worker's executor, not in the driver."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from kernel.testing.embedded import EmbeddedBroker
from spark.options import ExportOptions
from spark.progress import exported_offsets
from tests.spark.exports import ExportProcess
from tests.spark.kafka import create_topic, produce
from tests.spark.standalone import standalone_cluster
from tests.spark.test_export import PARTITIONS, assert_table, ends


def test_export_runs_on_a_standalone_cluster(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str, tmp_path: Path) -> None:
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    sent = produce(kafkernel.bootstrap, topic_name, 60, PARTITIONS)
    with standalone_cluster(tmp_path / "cluster") as cluster:
        options = ExportOptions(
            name="on-cluster", path=str(tmp_path / "table"),
            bootstrap_servers=kafkernel.bootstrap, topics=(topic_name,),
            partition_by=("date",), max_offsets_per_trigger=40,
            master=cluster.master_url, conf=cluster.driver_conf())
        job = ExportProcess(options, tmp_path / "export.log", "--available-now").start()
        assert job.proc is not None
        try:
            assert job.proc.wait(240) == 0, (tmp_path / "export.log").read_text()[-3000:]
        except subprocess.TimeoutExpired:
            raise AssertionError((tmp_path / "export.log").read_text()[-3000:]) from None
        finally:
            job.stop()
        master_log = (cluster.work_dir / "master.log").read_text()
        executor_logs = list((cluster.work_dir / "worker").glob("app-*/*/stderr"))
    assert exported_offsets(options.checkpoint_location) == ends(topic_name, sent)
    assert_table(spark, options, sent)
    # The master ran the application, and its executor on the worker ran the tasks that
    # read Kafka (Spark's KafkaDataConsumer lives in the executors).
    assert "Registering app kafkernel-export-on-cluster" in master_log
    assert executor_logs, "no executor ran on the worker"
    assert any("Finished task" in p.read_text(errors="replace") for p in executor_logs)
