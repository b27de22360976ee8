"""Kafka's tools read what metadata_kraft writes: a live node's snapshot goes through
``kafka-dump-log --cluster-metadata-decoder`` and ``kafka-metadata-shell --snapshot``
(which rebuilds Kafka's own MetadataImage from it), and ``kafka-storage format`` and
``kafkernel storage format`` lay out the same files with the same meta.properties keys."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from kernel.cli import main as kafkernel
from kernel.testing import EmbeddedBroker
from plugins.metadata_kraft.properties import read_meta_properties
from plugins.metadata_kraft.snapshots import SnapshotId, list_snapshots
from reference import kafka, tools

DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"  # kafka-dump-log
METADATA_SHELL = "org.apache.kafka.shell.MetadataShell"  # kafka-metadata-shell
TIMEOUT = 30.0
CLUSTER_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def _live_snapshot(data: Path) -> Path:
    """A snapshot a real node took of a topic with a config (every commit is due)."""
    broker = EmbeddedBroker({"metadata.log.max.record.bytes.between.snapshots": 1},
                            data_dir=data).start()
    partition_dir = data / "__cluster_metadata-0"
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("shown", 3, 1, config={"retention.ms": "4321"})]
                            )["shown"].result(TIMEOUT)
        assert broker.broker is not None
        end = broker.broker.metadata.metadata_log.next_offset  # type: ignore[attr-defined]
        deadline = time.monotonic() + TIMEOUT
        while not any(s.end_offset >= end for s in list_snapshots(partition_dir)):
            assert time.monotonic() < deadline, "no snapshot"
            time.sleep(0.02)
    finally:
        broker.stop(remove_data=False)
    return partition_dir / list_snapshots(partition_dir)[-1].filename


def test_kafka_dump_log_and_metadata_shell_read_a_live_snapshot(tmp_path: Path) -> None:
    snapshot = _live_snapshot(tmp_path / "data")
    dumped = tools.run(DUMP_LOG, "--cluster-metadata-decoder", "--files", str(snapshot)).check()
    for text in (dumped.stdout, dumped.stderr):
        assert not re.search(r"error|exception|invalid", text, re.IGNORECASE), dumped.describe()
    out = dumped.stdout
    assert "SnapshotHeader" in out and "SnapshotFooter" in out, dumped.describe()
    payloads = [json.loads(m[1]) for m in re.finditer(r"payload: (\{.*\})$", out, re.M)]
    assert payloads[0]["type"] == "FEATURE_LEVEL_RECORD"  # metadata.version first
    assert payloads[0]["data"] == {"name": "metadata.version", "featureLevel": 30}
    assert {"name": "shown"}.items() <= next(
        p["data"] for p in payloads if p["type"] == "TOPIC_RECORD"
        and p["data"]["name"] == "shown").items()

    # Kafka's own SnapshotFileReader logs "Ignoring control record" for the header and
    # footer of any snapshot (its own too): not an error of ours.
    shown = tools.run(METADATA_SHELL, "--snapshot", str(snapshot), "cat",
                      "/image/features/metadataVersion",
                      "/image/configs/TOPIC:shown/retention.ms",
                      "/image/topics/byName/shown/2", "/image/cluster/brokers/1/").check()
    assert "PartitionRegistration(replicas=[1]" in shown.stdout, shown.describe()
    assert "BrokerRegistration(id=1" in shown.stdout, shown.describe()
    assert "4.3-IV0" in shown.stdout and "4321" in shown.stdout, shown.describe()


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and p.name != "server.properties"}


def test_storage_format_lays_out_what_kafka_storage_format_does(tmp_path: Path) -> None:
    """Differential: the same dynamic-quorum format by both tools, the same files."""
    trees = {}
    for tool in ("kafka", "kafkernel"):
        work = tmp_path / tool
        work.mkdir()
        settings = {
            "process.roles": "broker,controller", "node.id": "1",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
            "log.dirs": f"{work}/a,{work}/b", "metadata.log.dir": f"{work}/m"}
        args = ["--cluster-id", CLUSTER_ID, "--standalone", "--add-scram",
                "SCRAM-SHA-256=[name=alice,password=alice-secret]"]
        if tool == "kafka":
            config = work / "server.properties"
            config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            tools.run(kafka.STORAGE_TOOL_MAIN, "format", "--config", str(config),
                      *args).check()
        else:
            overrides = [a for k, v in settings.items() for a in ("--override", f"{k}={v}")]
            assert kafkernel(["storage", "format", *overrides, *args]) == 0
        trees[tool] = _tree(work)
        for d in ("a", "b", "m"):
            props = read_meta_properties(work / d)
            assert props is not None
            trees[tool].add(f"{d}: " + ",".join(sorted(props)))
    assert trees["kafka"] == trees["kafkernel"]
    assert f"m/__cluster_metadata-0/{SnapshotId(0, 0).filename}" in trees["kafkernel"]
