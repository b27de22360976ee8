"""The spark_sink plugin: a broker process supervising an export's Spark job, exactly
once across a killed Spark child and a broker restart, with state and lag in metrics."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kernel.config import ConfigError
from kernel.testing.embedded import EmbeddedBroker
from spark.progress import exported_offsets
from tests.broker_process import BrokerProcess, free_port
from tests.integration.test_observability_and_embedding import sample, scrape
from tests.spark.kafka import create_topic, produce

PARTITIONS = 2
TOPIC = "orders"


def sink_broker(workdir: Path, table: Path, metrics_port: int,
                data: Path | None = None, port: int | None = None,
                export_options: str = "") -> BrokerProcess:
    broker = BrokerProcess(workdir, f"metrics.port={metrics_port}",
                           plugins=("metadata_kraft", "coordinator", "txn", "spark_sink"),
                           data=data, port=port)
    with (workdir / "kafkernel.toml").open("a") as config:
        config.write(f"""
[plugins.spark_sink]
"restart.backoff.ms" = 200
"lag.interval.ms" = 300
"stop.timeout.ms" = 60000

[[plugins.spark_sink.exports]]
name = "orders"
topics = ["{TOPIC}"]
path = "{table}"
master = "local[1]"
"trigger.interval" = "500 milliseconds"
"partition.by" = ["date"]
conf = {{"spark.driver.memory" = "512m"}}
{export_options}
""")
    return broker


def wait_until(condition: Any, what: str, broker: BrokerProcess, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{broker.log()[-4000:]}")
        time.sleep(0.3)


def export_pids(broker: BrokerProcess) -> list[int]:
    return [e["pid"] for e in broker.events() if e.get("event") == "spark export started"]


def test_sink_exports_exactly_once_across_a_killed_job_and_a_broker_restart(
        spark: Any, tmp_path: Path) -> None:
    table, checkpoint = tmp_path / "table", str(tmp_path / "table" / "_checkpoint")
    metrics_port, port = free_port(), free_port()
    broker = sink_broker(tmp_path, table, metrics_port, port=port).start()
    sent: list[Any] = []

    def exported_all() -> bool:
        ends: dict[int, int] = {}
        for s in sent:
            ends[s.partition] = max(ends.get(s.partition, 0), s.offset + 1)
        got = exported_offsets(checkpoint)
        return all(got.get((TOPIC, p), -1) >= end for p, end in ends.items())

    try:
        create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        sent += produce(broker.bootstrap, TOPIC, 40, PARTITIONS)
        wait_until(exported_all, "the first records exported", broker)
        # Running is reported within a second of the query's first trigger.
        wait_until(lambda: sample(scrape(metrics_port), "kafkernel_spark_export_state",
                                  export="orders", state="running") == 1.0,
                   "the export's state running", broker)
        wait_until(lambda: sample(scrape(metrics_port), "kafkernel_spark_export_lag",
                                  export="orders", topic=TOPIC, partition="0") == 0.0,
                   "lag 0 in the metrics", broker)

        # The Spark child dies: the broker starts it again.
        first = export_pids(broker)[-1]
        os.killpg(first, signal.SIGKILL)
        sent += produce(broker.bootstrap, TOPIC, 20, PARTITIONS, first=40)
        wait_until(lambda: len(export_pids(broker)) == 2, "the export restarted", broker)
        assert sample(scrape(metrics_port), "kafkernel_spark_export_restarts_total",
                      export="orders") == 1.0
        wait_until(exported_all, "the records produced around the kill", broker)

        # Records arrive while the broker restarts; it stops its export and starts it
        # again on the same checkpoint.
        sent += produce(broker.bootstrap, TOPIC, 20, PARTITIONS, first=60)
        assert broker.stop() == 0
        assert any(e.get("event") == "spark export stopped" for e in broker.events())
        broker = sink_broker(tmp_path, table, metrics_port, data=tmp_path / "data",
                             port=port).start()
        sent += produce(broker.bootstrap, TOPIC, 20, PARTITIONS, first=80)
        wait_until(exported_all, "every record exported after the restart", broker)
        assert not [e for e in broker.events()
                    if e.get("level") in ("error", "critical") or "exception" in e]
    finally:
        broker.stop()
    # The one exit is the kill; the broker restart stopped and started the job.
    exits = [e for e in broker.events() if e.get("event") == "spark export exited; restarting"]
    assert [e["reason"] for e in exits] == ["killed by SIGKILL"]

    got = spark.read.parquet(str(table)).select("partition", "offset", "value").collect()
    counts = Counter((r["partition"], r["offset"]) for r in got)
    assert [k for k, n in counts.items() if n > 1] == []
    assert sorted(counts) == sorted((s.partition, s.offset) for s in sent)
    assert {(r["partition"], r["offset"]): bytes(r["value"]) for r in got} == {
        (s.partition, s.offset): s.value for s in sent}


def test_an_export_that_reaches_no_broker_is_never_running_and_is_restarted(
        tmp_path: Path) -> None:
    """An export whose bootstrap servers do not answer fails its first trigger: the
    broker logs its one-line reason and starts it again, and its state never says
    running (it did while the query had started but not yet reached a broker)."""
    dead, metrics_port = free_port(), free_port()
    broker = sink_broker(tmp_path, tmp_path / "table", metrics_port, export_options=(
        f'"bootstrap.servers" = "127.0.0.1:{dead}"\n'
        'kafka = {"default.api.timeout.ms" = "3000", "request.timeout.ms" = "3000"}')
    ).start()
    states: set[str] = set()

    def exited() -> bool:
        states.update(state for state in ("starting", "running", "backoff") if sample(
            scrape(metrics_port), "kafkernel_spark_export_state", export="orders",
            state=state) == 1.0)
        return any(e.get("event") == "spark export exited; restarting"
                   for e in broker.events())

    try:
        wait_until(exited, "the export to fail", broker)
        wait_until(lambda: len(export_pids(broker)) == 2, "the export restarted", broker)
    finally:
        broker.stop()
    (first, *_) = [e for e in broker.events()
                   if e.get("event") == "spark export exited; restarting"]
    assert first["reason"].startswith(f"no broker answered at 127.0.0.1:{dead}"), first
    assert not [e for e in broker.events() if e.get("event") == "spark export running"]
    assert "running" not in states and "starting" in states, states


@pytest.mark.parametrize(("exports", "problem"), [
    ([{"name": "a", "topics": ["t"]}], "export 'a': path is required"),
    ([{"name": "a", "path": "/x", "topics": ["t"], "colour": "red"}],
     "export 'a': unknown option 'colour'; allowed: bootstrap.servers, checkpoint,"),
    ([{"name": "a", "path": "/x"}], "export 'a': give exactly one of topics"),
    ([{"name": "a", "path": "/x", "topics": ["t"], "trigger.interval": "soon"}],
     "export 'a': trigger.interval: 'soon' is not allowed; expected an interval"),
    ([{"name": "a", "path": "/x", "topics": ["t"]}, {"name": "a", "path": "/y",
                                                     "topics": ["u"]}],
     "export 'a': two exports have this name"),
    ("orders", "plugins.spark_sink.exports: expected an array of tables"),
])
def test_bad_exports_stop_startup_in_one_line(exports: Any, problem: str) -> None:
    broker = EmbeddedBroker(plugins=("metadata_kraft", "spark_sink"),
                            plugin_settings={"spark_sink": {"exports": exports}})
    with pytest.raises(ConfigError) as error:
        broker.start()
    message = str(error.value)
    assert problem in message and "\n" not in message, message
