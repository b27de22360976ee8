"""``kafkernel`` admin commands against Apache Kafka and against Kafkernel: the same
commands on the same workload give the same answers (their JSON, with what each broker
makes its own normalised: topic and cluster ids, member ids, ports, bytes on disk), and
the same one-line refusals."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.integration.admin_cli import Ran, kafkernel, member_with_commits, produce
from tests.reference.conformance import unique

GROUPS = {"coordinator": {"group.initial.rebalance.delay.ms": 0}}


def until_ok(run: Callable[[], Ran], timeout_s: float = 20.0) -> Ran:
    """Kafka serves a partition some time after it answered CreateTopics or
    CreatePartitions; a command is retried until it succeeds."""
    deadline = time.monotonic() + timeout_s
    while True:
        ran = run()
        if ran.code == 0 or time.monotonic() > deadline:
            return ran
        time.sleep(0.2)


def normalised_topic(described: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for topic in described:
        topic = {**topic, "topic_id": bool(topic["topic_id"])}
        topic["partitions"] = [{**p, "size_bytes": (p["size_bytes"] or 0) > 0}
                               for p in topic["partitions"]]
        out.append(topic)
    return out


def normalised_group(described: dict[str, Any]) -> dict[str, Any]:
    ids = {m["member_id"]: f"member-{i}" for i, m in enumerate(described["members"])}
    return {**described,
            "members": [{**m, "member_id": ids[m["member_id"]]} for m in described["members"]],
            "offsets": [{**o, "member_id": ids.get(o["member_id"])}
                        for o in described["offsets"]]}


def workload(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    """Every command on a fresh topic and group; the answers, normalised."""
    def run(*argv: str) -> Ran:
        return kafkernel(bootstrap, *argv)

    def describe_topic() -> Any:
        return normalised_topic(until_ok(lambda: run("topic", "describe", topic,
                                                     "-o", "json")).json())

    seen: dict[str, Any] = {}
    seen["create"] = run("topic", "create", topic, "--partitions", "3", "--config",
                         "retention.ms=3600000", "-o", "json").json()
    until_ok(lambda: run("topic", "describe", topic))
    produce(bootstrap, topic, per_partition=5, partitions=3)
    seen["list"] = [t for t in run("topic", "list", "-o", "json").json()
                    if t["topic"] == topic]
    seen["describe"] = describe_topic()
    seen["alter-config"] = run("topic", "alter-config", topic, "--set",
                               "cleanup.policy=compact", "--delete", "retention.ms",
                               "-o", "json").json()
    seen["add-partitions"] = run("topic", "add-partitions", topic, "--total", "4",
                                 "-o", "json").json()
    deadline = time.monotonic() + 20
    while len(describe_topic()[0]["partitions"]) < 4:  # Kafka's metadata catching up
        assert time.monotonic() < deadline, "the fourth partition within 20 s"
        time.sleep(0.2)
    seen["described after"] = describe_topic()

    member = member_with_commits(bootstrap, group, topic, {0: 2, 1: 5})
    try:
        seen["group list"] = [g for g in run("group", "list", "-o", "json").json()
                              if g["group"] == group]
        seen["group describe"] = normalised_group(
            run("group", "describe", group, "-o", "json").json())
        refused = run("group", "reset-offsets", group, "--all-topics", "--to-earliest",
                      "--execute")
        seen["reset refused"] = (refused.code, refused.err)
    finally:
        member.close()
    for how in (["--to-offset", "1"], ["--to-latest"],
                ["--to-datetime", "2023-11-14T22:13:22+00:00"]):
        seen[f"reset {how}"] = run("group", "reset-offsets", group, "--all-topics", *how,
                                   "--execute", "-o", "json").json()
    seen["group after"] = normalised_group(run("group", "describe", group, "-o",
                                               "json").json())
    seen["group delete"] = run("group", "delete", group, "-o", "json").json()
    seen["topic delete"] = run("topic", "delete", topic, "-o", "json").json()
    for argv in (["topic", "describe", unique("missing")], ["topic", "delete", "missing-x"],
                 ["group", "reset-offsets", group, "--topic", "missing-x", "--to-earliest"]):
        ran = run(*argv)
        seen["refused: " + " ".join(argv[:2])] = (ran.code, ran.err.replace(argv[2], "NAME"))
    cluster = run("cluster", "describe", "-o", "json").json()
    seen["cluster"] = {"controller": cluster["controller"],
                       "brokers": [b["id"] for b in cluster["brokers"]],
                       "cluster_id": bool(cluster["cluster_id"])}
    return seen


def test_admin_commands_answer_as_on_kafka(
    reference_kafka: ReferenceKafka, broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    ours = broker_factory(plugin_settings=GROUPS)
    topic, group = unique("admin"), unique("admin-group")
    # one broker after the other: the commands run in-process, on this process' stdout
    expected = workload(reference_kafka.bootstrap, topic, group)
    got = workload(ours.bootstrap, topic, group)
    assert list(got) == list(expected)
    for step in expected:
        assert got[step] == expected[step], step
