"""Kafka's Java client (kafka-clients 4.3) against Kafkernel, through the small program
tests/java/KafkaClientCheck.java: a producer with every codec and acks=all/1, a consumer
group (classic protocol) that reads (through incremental fetch sessions), commits and
rebalances when a second member joins, and the AdminClient's topic, config, record, group
and cluster calls."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from kernel.protocol.compression import Compression
from kernel.protocol.records import iter_batches
from kernel.testing.embedded import EmbeddedBroker
from reference import tools
from tests.integration.fetch_sessions import SessionWatch
from tests.java.conftest import CLIENT_CHECK, image, lines

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("all", "1")
PER_PRODUCER = 3  # KafkaClientCheck.RECORDS_PER_PRODUCER
# The acks=all producers are idempotent, the Java client's default (the txn plugin serves
# InitProducerId); acks=1 cannot be.
IDEMPOTENCE = True


def run_check(classes: Path, *args: str) -> str:
    result = tools.run(CLIENT_CHECK, *args, extra_classpath=[classes])
    assert result.returncode == 0, result.describe()
    return result.stdout


def stored_codecs(broker: EmbeddedBroker, topic: str) -> set[str]:
    assert broker.broker is not None
    found = set()
    for p in image(broker).topics[topic].partitions:
        log = broker.broker.logs.get_log(topic, p)
        assert log is not None
        for header, _ in iter_batches(log.read(0, 1 << 26).records):
            found.add(Compression(header.compression).name.lower())
    return found


def test_producer_every_codec_and_acks_then_a_group_reads_commits_and_rebalances(
        broker: EmbeddedBroker, client_check: Path) -> None:
    produced = lines(run_check(client_check, "produce", broker.bootstrap, "java",
                               str(IDEMPOTENCE).lower()), "produced")
    topics = [f"java-{codec}" for codec in CODECS]
    assert len(produced) == len(CODECS) * len(ACKS) * PER_PRODUCER
    assert {p["idempotent"] for p in produced} == {str(IDEMPOTENCE).lower(), "false"}
    # Offsets are consecutive per partition, and the broker holds what it acknowledged,
    # in batches of the codec the producer used.
    per_partition = Counter((p["topic"], int(p["partition"])) for p in produced)
    for (topic, partition), count in per_partition.items():
        offsets = sorted(int(p["offset"]) for p in produced
                         if (p["topic"], int(p["partition"])) == (topic, partition))
        assert offsets == list(range(count))
        assert broker.broker is not None
        log = broker.broker.logs.get_log(topic, partition)
        assert log is not None and log.log_end_offset == count
    for codec, topic in zip(CODECS, topics, strict=True):
        assert stored_codecs(broker, topic) == {codec}
        assert len(image(broker).topics[topic].partitions) == 2  # auto-created

    with SessionWatch(broker) as watch:
        out = run_check(client_check, "consume", broker.bootstrap, "java-group",
                        ",".join(topics), str(len(produced)))
    # The Java consumer fetches through KIP-227 sessions (by topic id, Fetch v13+): the
    # broker accepted incremental fetches in them.
    assert watch.most_sessions >= 1 and watch.highest_epoch > 1
    records = lines(out, "record")
    assert sorted((r["topic"], r["key"], r["value"], r["headers"]) for r in records) == sorted(
        (f"java-{codec}", f"k-{acks}-{i}", f"v-{codec}-{acks}-{i}", f"codec:{codec},acks:{acks}")
        for codec in CODECS for acks in ACKS for i in range(PER_PRODUCER))
    assert {(r["topic"], r["partition"], r["offset"], r["key"]) for r in records} == {
        (p["topic"], p["partition"], p["offset"], p["key"]) for p in produced}
    # The first member alone owned every partition and committed its log end.
    all_partitions = {f"{t}-{p}" for t in topics for p in (0, 1)}
    first, *rebalanced = lines(out, "assigned")
    assert set(first["partitions"].split(",")) == all_partitions
    assert {c["partition"]: int(c["offset"]) for c in lines(out, "committed")} == {
        f"{t}-{p}": per_partition.get((t, p), 0) for t in topics for p in (0, 1)}
    # The second member's join rebalanced the group: the range assignor gives each member
    # one partition of every topic, and neither read anything again.
    owned = {a["member"]: set(a["partitions"].split(",")) for a in rebalanced}
    assert owned == {"java-first": {f"{t}-0" for t in topics},
                     "java-second": {f"{t}-1" for t in topics}}
    assert lines(out, "read-after-rebalance") == [{"records": "0"}]
    [group] = lines(out, "group")
    assert group == {"id": "java-group", "state": "Stable", "type": "Classic",
                     "assignor": "range", "members": "2", "coordinator": "1"}
    assert {m["client"]: set(m["partitions"].split(",")) for m in lines(out, "member")} == owned


def test_admin_client(broker: EmbeddedBroker, client_check: Path) -> None:
    out = run_check(client_check, "admin", broker.bootstrap)
    assert broker.broker is not None
    [cluster] = lines(out, "cluster")
    assert cluster == {"id": image(broker).cluster_id, "controller": "1",
                       "nodes": f"1@{broker.bootstrap}"}

    # createTopics, listTopics (internal topics are not listed), describeTopics
    listed = lines(out, "listed")
    assert listed == [{"topics": "admin-a,admin-b"}, {"topics": "-"}]
    partitions = [(p["topic"], p["partition"]) for p in lines(out, "partition")]
    assert partitions == [("admin-a", "0"), ("admin-a", "1"), ("admin-b", "0"),
                          ("admin-b", "0"), ("admin-b", "1"), ("admin-b", "2")]
    assert {(p["internal"], p["leader"], p["replicas"], p["isr"])
            for p in lines(out, "partition")} == {("false", "1", "1", "1")}

    # describeConfigs and incrementalAlterConfigs, of a topic and of the broker
    configs = [(c["resource"], c["name"], c["value"], c["source"])
               for c in lines(out, "config")]
    assert configs == [
        ("topic:admin-a", "retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"),
        ("topic:admin-a", "cleanup.policy", "delete", "DEFAULT_CONFIG"),
        # SET cleanup.policy, DELETE retention.ms: back to log.retention.hours' 168 h
        ("topic:admin-a", "retention.ms", "604800000", "DEFAULT_CONFIG"),
        ("topic:admin-a", "cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG"),
        ("broker:1", "log.retention.ms", "null", "DEFAULT_CONFIG"),
        ("broker:1", "num.partitions", "2", "STATIC_BROKER_CONFIG"),
        ("broker:1", "log.retention.ms", "7200000", "DYNAMIC_BROKER_CONFIG"),
        ("broker:1", "num.partitions", "2", "STATIC_BROKER_CONFIG"),
    ]
    assert image(broker).broker_configs.get(1) == {"log.retention.ms": "7200000"}

    # deleteRecords moves the log start; listOffsets sees it
    assert lines(out, "deleted-records") == [{"partition": "admin-b-0", "low_watermark": "3"}]
    assert lines(out, "offsets") == [{"partition": "admin-b-0", "earliest": "3", "latest": "5"}]

    # listConsumerGroups, describeConsumerGroups, listConsumerGroupOffsets,
    # deleteConsumerGroups
    assert lines(out, "groups") == [{"ids": "admin-group:Empty"}, {"ids": ""}]
    assert lines(out, "group") == [{"id": "admin-group", "state": "Empty", "type": "Classic",
                                    "members": "0", "coordinator": "1"}]
    assert lines(out, "group-offset") == [{"group": "admin-group", "partition": "admin-b-0",
                                           "offset": "4", "metadata": "checkpoint"}]

    # deleteTopics
    assert lines(out, "deleted") == [{"topics": "admin-a,admin-b"}]
    assert "admin-a" not in image(broker).topics and "admin-b" not in image(broker).topics
