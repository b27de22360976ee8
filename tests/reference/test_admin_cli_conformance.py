"""``kafkernel`` admin commands against Apache Kafka and against Kafkernel: the same
commands on the same workload give the same answers (their JSON, with what each broker
makes its own normalised: topic and cluster ids, member ids, ports, bytes on disk,
timestamps), and the same one-line refusals. Users and ACLs on both brokers configured
as tests/reference/test_conformance_security.py has them (SASL PLAIN, an authorizer,
the super user admin)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.integration.admin_cli import Ran, kafkernel, member_with_commits, produce
from tests.reference.conformance import unique
from tests.reference.conftest import SASL_USERS as USERS

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


def workload(bootstrap: str, topic: str, group: str, lines: Path) -> dict[str, Any]:
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
    for i, how in enumerate((["--topic", topic, "--partition", "0"],
                             ["--all-topic-partitions"],
                             ["--topic", "missing-x", "--partition", "0"],
                             ["--topic", topic, "--partition", "9"])):
        ran = run("cluster", "elect-leaders", "--election-type", "preferred", *how)
        seen[f"elect-leaders {i}"] = (ran.code, ran.out.replace(topic, "NAME"), ran.err)

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
    seen["produce"] = run("produce", topic, "--input", str(lines), "--key-separator", ":",
                          "--header", "h=1", "--partition", "3", "-o", "json").json()
    seen["consume"] = [{**r, "timestamp": r["timestamp"] > 0} for r in run(
        "consume", topic, "--from-beginning", "-e", "-o", "json").json()
        if r["partition"] == 3]
    run("config", "alter", "--broker", "1", "--set", "log.retention.ms=7200000")

    def retention() -> list[dict[str, Any]]:
        return [c for c in run("config", "describe", "--broker", "1", "-o", "json").json()
                if c["name"] == "log.retention.ms"]

    # Kafka may describe a dynamic config it has not applied yet with a null value
    deadline = time.monotonic() + 10
    while not retention() or retention()[0]["value"] is None:
        assert time.monotonic() < deadline, retention()
        time.sleep(0.2)
    seen["config"] = retention()
    run("config", "alter", "--broker", "1", "--delete", "log.retention.ms")
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
    reference_kafka: ReferenceKafka, broker_factory: Callable[..., EmbeddedBroker],
    tmp_path: Path,
) -> None:
    ours = broker_factory(plugin_settings=GROUPS)
    topic, group = unique("admin"), unique("admin-group")
    lines = tmp_path / "lines.txt"
    lines.write_text("a:1\nb:2\n")
    # one broker after the other: the commands run in-process, on this process' stdout
    expected = workload(reference_kafka.bootstrap, topic, group, lines)
    got = workload(ours.bootstrap, topic, group, lines)
    assert list(got) == list(expected)
    for step in expected:
        assert got[step] == expected[step], step


def secured(bootstrap: str, user: str, bootstrap_is_kafkernel: bool) -> dict[str, Any]:
    """The user and ACL commands as the super user, and as a user without rights."""
    def run(*argv: str, who: str = "admin") -> Ran:
        return kafkernel(bootstrap, *argv, "--security-protocol", "SASL_PLAINTEXT",
                         "--sasl-mechanism", "PLAIN", "--sasl-username", who,
                         "--sasl-password", USERS[who])

    seen: dict[str, Any] = {}
    seen["user set"] = run("user", "set", user, "--password", "pw", "--iterations",
                           "8192", "-o", "json").json()
    seen["user list"] = run("user", "list", user, "-o", "json").json()
    seen["user delete"] = run("user", "delete", user, "-o", "json").json()
    seen["acl add"] = run("acl", "add", "--principal", f"User:{user}", "--operation",
                          "read", "--topic", "orders", "-o", "json").json()
    seen["acl prefixed"] = run("acl", "add", "--principal", f"User:{user}", "--operation",
                               "write", "--permission", "deny", "--group", "pay",
                               "--pattern-type", "prefixed", "-o", "json").json()
    seen["acl list"] = run("acl", "list", "--principal", f"User:{user}", "-o", "json").json()
    seen["acl remove"] = run("acl", "remove", "--principal", f"User:{user}", "--topic",
                             "orders", "-o", "json").json()
    seen["acl after"] = run("acl", "list", "--principal", f"User:{user}", "-o", "json").json()
    run("acl", "remove", "--principal", f"User:{user}")
    # (not `user list` of every user: Kafka's refusal of that leaves kafka-python waiting
    # until its timeout, and librdkafka 2.16 aborts on it; Kafkernel's is read by both)
    for argv in (("acl", "list"), ("user", "list", user),
                 ("acl", "add", "--principal", "User:x", "--operation", "read", "--cluster")):
        ran = run(*argv, who="alice")
        # Kafka forwards CreateAcls to its controller, and its message is then a dump of
        # the forwarded request (librdkafka cuts it): the exit code and the command's
        # label are compared, and Kafkernel's reason read here
        label, _, reason = ran.err.partition(": ")[2].partition(": ")
        seen[f"refused: {' '.join(argv[:2])}"] = (ran.code, label)
        if bootstrap_is_kafkernel:
            assert "authorization failed" in reason.lower(), ran.err
    return seen


def test_user_and_acl_commands_answer_as_on_kafka(sasl_kafka: str,
                                                  sasl_kafkernel: str) -> None:
    user = unique("carol")
    expected, got = secured(sasl_kafka, user, False), secured(sasl_kafkernel, user, True)
    assert list(got) == list(expected)
    for step in expected:
        assert got[step] == expected[step], step
