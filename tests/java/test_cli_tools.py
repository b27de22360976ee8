"""Kafka 4.3's own command-line tools (the main classes behind bin/kafka-*.sh) against
Kafkernel: each test checks the tools' exit codes, their output, and the broker's state
where the tool changed it. Records and committed offsets a test needs beforehand come
from confluent-kafka, which costs no JVM start."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.testing.embedded import EmbeddedBroker
from reference import tools
from tests.java.conftest import image


def ok(result: tools.ToolResult) -> str:
    """The tool's stdout, once it exited 0."""
    assert result.returncode == 0, result.describe()
    return result.stdout


def table(output: str) -> list[dict[str, str]]:
    """The rows of a kafka-consumer-groups table (a header of upper-case column names,
    then rows of as many whitespace-separated cells)."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0] == "GROUP":
            header = cells
        elif header and len(cells) == len(header):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, key=f"k{i}", value=f"v{i}", partition=partition)
    assert producer.flush(10) == 0


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result is in
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def log_offsets(broker: EmbeddedBroker, topic: str, partition: int) -> tuple[int, int]:
    assert broker.broker is not None
    log = broker.broker.logs.get_log(topic, partition)
    assert log is not None
    return log.log_start_offset, log.log_end_offset


def test_kafka_topics_create_list_describe_alter_delete(broker: EmbeddedBroker) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    out = ok(tools.run(tools.TOPIC_COMMAND, *b, "--create", "--topic", "orders",
                       "--partitions", "2", "--replication-factor", "1",
                       "--config", "retention.ms=60000"))
    assert out.strip() == "Created topic orders."
    orders = image(broker).topics["orders"]
    assert len(orders.partitions) == 2 and orders.configs == {"retention.ms": "60000"}

    assert ok(tools.run(tools.TOPIC_COMMAND, *b, "--list", "--exclude-internal")).split() == [
        "orders"]

    ok(tools.run(tools.TOPIC_COMMAND, *b, "--alter", "--topic", "orders", "--partitions", "3"))
    assert len(image(broker).topics["orders"].partitions) == 3

    described = ok(tools.run(tools.TOPIC_COMMAND, *b, "--describe", "--topic", "orders"))
    head, *partitions = described.rstrip("\n").splitlines()
    assert re.match(r"Topic: orders\tTopicId: \S+\tPartitionCount: 3\tReplicationFactor: 1\t"
                    r"Configs: retention.ms=60000$", head), described
    # Through DescribeTopicPartitions: "N/A" if the tool had to fall back to Metadata.
    assert partitions == [
        f"\tTopic: orders\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: "
        for p in range(3)]

    ok(tools.run(tools.TOPIC_COMMAND, *b, "--delete", "--topic", "orders"))
    assert "orders" not in image(broker).topics
    assert ok(tools.run(tools.TOPIC_COMMAND, *b, "--list")).split() == ["__consumer_offsets"]


def test_kafka_configs_topic_and_broker(broker: EmbeddedBroker) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    create_topic(broker.bootstrap, "configured", 1)
    topic = ("--entity-type", "topics", "--entity-name", "configured")
    out = ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", *topic,
                       "--add-config", "retention.ms=1000,cleanup.policy=compact"))
    assert out.strip() == "Completed updating config for topic configured."
    assert image(broker).topics["configured"].configs == {
        "retention.ms": "1000", "cleanup.policy": "compact"}

    out = ok(tools.run(tools.CONFIG_COMMAND, *b, "--describe", *topic))
    assert out.strip().splitlines() == [
        "Dynamic configs for topic configured are:",
        "  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}",
    ]

    ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", *topic, "--delete-config",
                 "cleanup.policy"))
    assert image(broker).topics["configured"].configs == {"retention.ms": "1000"}
    out = ok(tools.run(tools.CONFIG_COMMAND, *b, "--describe", "--all", *topic))
    every = dict(line.strip().split(" ", 1)[0].split("=", 1)
                 for line in out.strip().splitlines()[1:])
    assert every["cleanup.policy"] == "delete" and every["retention.ms"] == "1000"
    assert every["max.message.bytes"] == "1048588" and every["segment.bytes"] == "1073741824"

    # A cluster-wide default and a broker's own value; the broker's wins.
    out = ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", "--entity-type", "brokers",
                       "--entity-default", "--add-config", "log.retention.ms=1000000"))
    assert out.strip() == "Completed updating default config for brokers in the cluster."
    out = ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", "--entity-type", "brokers",
                       "--entity-name", "1", "--add-config", "log.retention.ms=2000000"))
    assert out.strip() == "Completed updating config for broker 1."
    assert image(broker).broker_configs == {-1: {"log.retention.ms": "1000000"},
                                            1: {"log.retention.ms": "2000000"}}
    out = ok(tools.run(tools.CONFIG_COMMAND, *b, "--describe", "--entity-type", "brokers",
                       "--entity-name", "1"))
    assert out.strip().splitlines() == [
        "Dynamic configs for broker 1 are:",
        "  log.retention.ms=2000000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "log.retention.ms=2000000, DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=1000000, "
        "DEFAULT_CONFIG:log.retention.hours=168}",
    ]


def test_console_producer_and_consumer(broker: EmbeddedBroker) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    create_topic(broker.bootstrap, "console", 1)
    lines = ["trace:1\tk1\tfirst", "trace:2,origin:cli\tk2\tsecond", "trace:3\tk3\tthird"]
    ok(tools.run(tools.CONSOLE_PRODUCER, *b, "--topic", "console",
                 "--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
                 "--request-required-acks", "all", "--compression-codec", "zstd",
                 stdin="\n".join(lines) + "\n"))
    assert log_offsets(broker, "console", 0) == (0, 3)

    # Two runs in one group: the first commits where it stopped, the second goes on there.
    printing = ("--formatter-property", "print.key=true", "--formatter-property",
                "print.headers=true", "--formatter-property", "print.offset=true")
    first = tools.run(tools.CONSOLE_CONSUMER, *b, "--topic", "console", "--group", "console-g",
                      "--from-beginning", "--max-messages", "2", *printing)
    assert ok(first).splitlines() == ["Offset:0\ttrace:1\tk1\tfirst",
                                      "Offset:1\ttrace:2,origin:cli\tk2\tsecond"]
    assert "Processed a total of 2 messages" in first.stderr
    second = tools.run(tools.CONSOLE_CONSUMER, *b, "--topic", "console", "--group", "console-g",
                       "--max-messages", "1", "--timeout-ms", "20000", *printing)
    assert ok(second).splitlines() == ["Offset:2\ttrace:3\tk3\tthird"]


def test_kafka_consumer_groups_list_describe_reset(broker: EmbeddedBroker) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    create_topic(broker.bootstrap, "grouped", 2)
    produce(broker.bootstrap, "grouped", {0: 6, 1: 4})
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cli-g",
                       "client.id": "live-member", "enable.auto.commit": False,
                       "auto.offset.reset": "earliest"})
    try:
        member.subscribe(["grouped"])
        deadline = time.monotonic() + 20
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.1)
        member.commit(offsets=[TopicPartition("grouped", 0, 2), TopicPartition("grouped", 1, 4)],
                      asynchronous=False)

        assert ok(tools.run(tools.CONSUMER_GROUP_COMMAND, *b, "--list")).split() == ["cli-g"]
        described = table(ok(tools.run(tools.CONSUMER_GROUP_COMMAND, *b, "--describe",
                                       "--group", "cli-g")))
        assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"],
                 r["CLIENT-ID"]) for r in described] == [
            ("0", "2", "6", "4", "live-member"), ("1", "4", "4", "0", "live-member")]
        assert {r["GROUP"] for r in described} == {"cli-g"}
        assert all(r["CONSUMER-ID"].startswith("live-member-") for r in described)
    finally:
        member.close()

    reset = ("--reset-offsets", "--group", "cli-g", "--topic", "grouped", "--to-earliest")
    planned = table(ok(tools.run(tools.CONSUMER_GROUP_COMMAND, *b, *reset, "--dry-run")))
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in planned] == [("0", "0"), ("1", "0")]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def committed() -> dict[int, int]:
        [future] = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("cli-g")]).values()
        return {tp.partition: tp.offset for tp in future.result(10).topic_partitions}

    assert committed() == {0: 2, 1: 4}  # a dry run changes nothing
    done = table(ok(tools.run(tools.CONSUMER_GROUP_COMMAND, *b, "--reset-offsets", "--group",
                              "cli-g", "--topic", "grouped:0", "--shift-by", "3",
                              "--execute")))
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in done] == [("0", "5")]
    assert committed() == {0: 5, 1: 4}

    # Without its offsets the Empty group lives on (Kafka 4.3) until it is deleted.
    out = ok(tools.run(tools.CONSUMER_GROUP_COMMAND, *b, "--delete-offsets", "--group", "cli-g",
                       "--topic", "grouped"))
    assert out.splitlines()[0] == "Request succeeded for deleting offsets from group cli-g."
    assert committed() == {}
    out = ok(tools.run(tools.CONSUMER_GROUP_COMMAND, *b, "--delete", "--group", "cli-g"))
    assert out.strip() == "Deletion of requested consumer groups ('cli-g') was successful."
    assert [g.group_id for g in admin.list_consumer_groups().result(10).valid] == []


def test_kafka_get_offsets_and_delete_records(broker: EmbeddedBroker, tmp_path: Path) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    create_topic(broker.bootstrap, "trimmed", 2)
    produce(broker.bootstrap, "trimmed", {0: 5, 1: 3})
    out = ok(tools.run(tools.GET_OFFSET_SHELL, *b, "--topic", "trimmed", "--time", "-1"))
    assert out.split() == ["trimmed:0:5", "trimmed:1:3"]

    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "trimmed", "partition": 0, "offset": 4},
        {"topic": "trimmed", "partition": 1, "offset": -1}]}))  # -1: the high watermark
    out = ok(tools.run(tools.DELETE_RECORDS_COMMAND, *b, "--offset-json-file", str(plan)))
    assert sorted(re.findall(r"partition: (\S+)\tlow_watermark: (\d+)", out)) == [
        ("trimmed-0", "4"), ("trimmed-1", "3")], out
    assert log_offsets(broker, "trimmed", 0) == (4, 5)
    assert log_offsets(broker, "trimmed", 1) == (3, 3)

    out = ok(tools.run(tools.GET_OFFSET_SHELL, *b, "--topic-partitions", "trimmed:0,trimmed:1",
                       "--time", "earliest"))
    assert out.split() == ["trimmed:0:4", "trimmed:1:3"]


def test_producer_and_consumer_perf_test(broker: EmbeddedBroker) -> None:
    records = 2000
    out = ok(tools.run(tools.PRODUCER_PERFORMANCE, "--bootstrap-server", broker.bootstrap,
                       "--topic", "perf", "--num-records", str(records), "--record-size", "100",
                       "--throughput", "-1", "--command-property", "acks=all",
                       "compression.type=lz4"))
    assert re.search(rf"^{records} records sent, ", out, re.MULTILINE), out
    assert sum(log_offsets(broker, "perf", p)[1] for p in (0, 1)) == records

    out = ok(tools.run(tools.CONSUMER_PERFORMANCE, "--bootstrap-server", broker.bootstrap,
                       "--topic", "perf", "--num-records", str(records), "--timeout", "30000"))
    header, row = out.strip().splitlines()
    stats = dict(zip((h.strip() for h in header.split(",")),
                     (c.strip() for c in row.split(",")), strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == records, out


def test_kafka_log_dirs_describe(broker: EmbeddedBroker) -> None:
    """kafka-log-dirs --describe (DescribeLogDirs): the broker's log dir with each
    partition's size in bytes, no lag, no future log; --topic-list narrows it."""
    create_topic(broker.bootstrap, "dirs", 2)
    create_topic(broker.bootstrap, "other", 1)
    produce(broker.bootstrap, "dirs", {0: 20})
    assert broker.broker is not None
    (log_dir,) = broker.broker.config.log_dirs
    out = ok(tools.run(tools.LOG_DIRS_COMMAND, "--bootstrap-server", broker.bootstrap,
                       "--describe", "--topic-list", "dirs"))
    assert "Received log directory information from brokers 1" in out, out
    described = json.loads(out.strip().splitlines()[-1])
    (only_broker,) = described["brokers"]
    assert only_broker["broker"] == 1
    (directory,) = only_broker["logDirs"]
    assert directory["logDir"] == os.path.abspath(log_dir) and directory["error"] is None
    sizes = {p["partition"]: p["size"] for p in directory["partitions"]}
    first = broker.broker.logs.get_log("dirs", 0)
    assert first is not None and first.size > 0
    assert sizes == {"dirs-0": first.size, "dirs-1": 0}
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False
               for p in directory["partitions"])
    everything = ok(tools.run(tools.LOG_DIRS_COMMAND, "--bootstrap-server", broker.bootstrap,
                              "--describe"))
    (directory,) = json.loads(everything.strip().splitlines()[-1])["brokers"][0]["logDirs"]
    assert {"dirs-0", "dirs-1", "other-0"} <= {p["partition"] for p in directory["partitions"]}
