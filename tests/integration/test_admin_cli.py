"""``kafkernel`` admin commands against a running broker: every topic, group, cluster,
broker-config, produce, consume, user and ACL command, its table and its JSON, and a
one-line error with exit code 1 when the broker refuses or cannot be reached
(tests/reference/test_admin_cli_conformance.py runs the same commands against Kafka)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.admin_cli import Ran, kafkernel, member_with_commits, produce
from tests.integration.test_acl import USERS, acl_broker

GROUPS = {"coordinator": {"group.initial.rebalance.delay.ms": 0}}


@pytest.fixture
def bootstrap(broker_factory: Callable[..., EmbeddedBroker]) -> str:
    return broker_factory(plugin_settings=GROUPS).bootstrap


def test_topic_commands(bootstrap: str) -> None:
    created = kafkernel(bootstrap, "topic", "create", "orders", "--partitions", "3",
                        "--config", "retention.ms=3600000")
    assert (created.code, created.out.strip()) == (0, "topic orders created")
    produce(bootstrap, "orders", per_partition=5, partitions=3)

    listed = kafkernel(bootstrap, "topic", "list", "-o", "json").json()
    assert listed == [{"topic": "orders", "partitions": 3, "replication_factor": 1,
                       "internal": False}]
    table = kafkernel(bootstrap, "topic", "list").out
    assert "TOPIC" in table and "orders" in table

    (described,) = kafkernel(bootstrap, "topic", "describe", "orders", "-o", "json").json()
    assert described["configs"] == {"retention.ms": "3600000"}
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"], p["start_offset"],
             p["end_offset"]) for p in described["partitions"]] == [
        (p, 1, [1], [1], 0, 5) for p in range(3)]
    assert all(p["size_bytes"] > 0 for p in described["partitions"])
    table = kafkernel(bootstrap, "topic", "describe", "orders").out
    assert "retention.ms=3600000" in table and "LEADER" in table

    altered = kafkernel(bootstrap, "topic", "alter-config", "orders", "--set",
                        "cleanup.policy=compact", "--delete", "retention.ms")
    assert altered.code == 0, altered.err
    (described,) = kafkernel(bootstrap, "topic", "describe", "orders", "-o", "json").json()
    assert described["configs"] == {"cleanup.policy": "compact"}

    assert kafkernel(bootstrap, "topic", "add-partitions", "orders", "--total", "5").code == 0
    (described,) = kafkernel(bootstrap, "topic", "describe", "orders", "-o", "json").json()
    assert len(described["partitions"]) == 5

    deleted = kafkernel(bootstrap, "topic", "delete", "orders")
    assert (deleted.code, deleted.out.strip()) == (0, "topic orders deleted")
    assert kafkernel(bootstrap, "topic", "list", "-o", "json").json() == []


def test_internal_topics_are_listed_on_request(bootstrap: str) -> None:
    kafkernel(bootstrap, "topic", "create", "t")
    member_with_commits(bootstrap, "g", "t", {0: 0}).close()  # creates __consumer_offsets
    names = [t["topic"] for t in kafkernel(bootstrap, "topic", "list", "--internal",
                                           "-o", "json").json()]
    assert "__consumer_offsets" in names
    assert "__consumer_offsets" not in [
        t["topic"] for t in kafkernel(bootstrap, "topic", "list", "-o", "json").json()]


def test_group_describe_shows_members_offsets_and_lag(bootstrap: str) -> None:
    kafkernel(bootstrap, "topic", "create", "events", "--partitions", "2")
    produce(bootstrap, "events", per_partition=10, partitions=2)
    member = member_with_commits(bootstrap, "billing", "events", {0: 4, 1: 10})
    try:
        listed = kafkernel(bootstrap, "group", "list", "-o", "json").json()
        assert {"group": "billing", "state": "Stable", "simple": False} in listed
        described = kafkernel(bootstrap, "group", "describe", "billing", "-o", "json").json()
        assert (described["state"], described["coordinator"], described["protocol"]) == (
            "Stable", 1, "range")
        (m,) = described["members"]
        assert m["assignment"] == ["events-0", "events-1"]
        assert [(o["topic"], o["partition"], o["committed"], o["end_offset"], o["lag"],
                 o["member_id"]) for o in described["offsets"]] == [
            ("events", 0, 4, 10, 6, m["member_id"]), ("events", 1, 10, 10, 0, m["member_id"])]
        assert described["total_lag"] == 6
        table = kafkernel(bootstrap, "group", "describe", "billing").out
        assert "total lag 6" in table and "events-0,events-1" in table

        refused = kafkernel(bootstrap, "group", "reset-offsets", "billing", "--all-topics",
                            "--to-earliest", "--execute")
        assert refused.code == 1 and "current state is Stable" in refused.err
    finally:
        member.close()


def test_reset_offsets_dry_run_and_execute(bootstrap: str) -> None:
    kafkernel(bootstrap, "topic", "create", "events", "--partitions", "2")
    produce(bootstrap, "events", per_partition=10, partitions=2)
    member_with_commits(bootstrap, "billing", "events", {0: 4, 1: 10}).close()

    def committed() -> list[int | None]:
        described = kafkernel(bootstrap, "group", "describe", "billing", "-o", "json").json()
        return [o["committed"] for o in described["offsets"]]

    plan = kafkernel(bootstrap, "group", "reset-offsets", "billing", "--all-topics",
                     "--to-earliest", "-o", "json").json()
    assert (plan["executed"], [o["new_offset"] for o in plan["offsets"]]) == (False, [0, 0])
    assert committed() == [4, 10]  # a dry run changes nothing
    assert "dry run" in kafkernel(bootstrap, "group", "reset-offsets", "billing",
                                  "--all-topics", "--to-latest").out

    for how, expected in ((["--to-latest"], [10, 10]), (["--to-earliest"], [0, 0]),
                          (["--to-offset", "7"], [7, 7]), (["--to-offset", "99"], [10, 10]),
                          # the producer stamped record i at 1_700_000_000_000 + i s
                          (["--to-datetime", "2023-11-14T22:13:23+00:00"], [3, 3])):
        ran = kafkernel(bootstrap, "group", "reset-offsets", "billing", "--all-topics",
                        *how, "--execute")
        assert ran.code == 0, ran.err
        assert committed() == expected, how
    ran = kafkernel(bootstrap, "group", "reset-offsets", "billing", "--topic", "events:1",
                    "--to-offset", "2", "--execute")
    assert ran.code == 0 and committed() == [3, 2]

    assert kafkernel(bootstrap, "group", "delete", "billing").code == 0
    assert all(g["group"] != "billing"
               for g in kafkernel(bootstrap, "group", "list", "-o", "json").json())


def test_cluster_and_broker_configs(bootstrap: str) -> None:
    cluster = kafkernel(bootstrap, "cluster", "describe", "-o", "json").json()
    host, port = bootstrap.rsplit(":", 1)
    assert cluster["controller"] == 1 and cluster["cluster_id"]
    assert cluster["brokers"] == [{"id": 1, "host": host, "port": int(port), "rack": None}]
    assert "controller 1" in kafkernel(bootstrap, "cluster", "describe").out

    ran = kafkernel(bootstrap, "config", "alter", "--broker", "1", "--set",
                    "log.retention.ms=7200000")
    assert ran.code == 0, ran.err
    configs = {c["name"]: c for c in kafkernel(bootstrap, "config", "describe", "--broker",
                                                "1", "-o", "json").json()}
    assert (configs["log.retention.ms"]["value"],
            configs["log.retention.ms"]["source"]) == ("7200000", "DYNAMIC_BROKER_CONFIG")
    everything = kafkernel(bootstrap, "config", "describe", "--broker", "1", "--all",
                           "-o", "json").json()
    assert len(everything) > len(configs) and any(
        c["name"] == "num.partitions" and c["source"] == "DEFAULT_CONFIG" for c in everything)
    assert kafkernel(bootstrap, "config", "alter", "--broker", "1", "--delete",
                     "log.retention.ms").code == 0
    configs = {c["name"]: c for c in kafkernel(bootstrap, "config", "describe", "--broker",
                                                "1", "-o", "json").json()}
    assert "log.retention.ms" not in configs


def test_produce_and_consume(bootstrap: str, tmp_path: Path) -> None:
    kafkernel(bootstrap, "topic", "create", "quick", "--partitions", "2")
    lines = tmp_path / "records.txt"
    lines.write_text("a:1\nb:2\nc:3\n")
    produced = kafkernel(bootstrap, "produce", "quick", "--input", str(lines),
                         "--key-separator", ":", "--header", "source=cli",
                         "--partition", "1", "-o", "json").json()
    assert produced == {"topic": "quick", "records": 3, "partitions": {"1": 3}}
    assert kafkernel(bootstrap, "produce", "quick", "--input", str(lines), "--partition",
                     "0").out == "3 records produced to quick\n"

    shown = kafkernel(bootstrap, "consume", "quick", "--from-beginning", "--exit-at-end",
                      "--format", "%k=%v %h @%p/%o\\n")
    assert shown.code == 0, shown.err
    assert sorted(shown.out.splitlines()) == [
        "=a:1  @0/0", "=b:2  @0/1", "=c:3  @0/2",
        "a=1 source=cli @1/0", "b=2 source=cli @1/1", "c=3 source=cli @1/2"]
    # As kcat: a format is printed as given, no newline added (no blank line after each
    # record); without one, each value on its line.
    assert "\n\n" not in shown.out and shown.out.endswith("\n")
    kcat = kafkernel(bootstrap, "consume", "quick", "--from-beginning", "-e",
                     "--format", "%o:%v\n")
    assert sorted(kcat.out.split("\n")) == ["", "0:1", "0:a:1", "1:2", "1:b:2", "2:3",
                                             "2:c:3"]
    unformatted = kafkernel(bootstrap, "consume", "quick", "--from-beginning", "-e")
    assert sorted(unformatted.out.split("\n")) == ["", "1", "2", "3", "a:1", "b:2", "c:3"]
    together = kafkernel(bootstrap, "consume", "quick", "--from-beginning", "-e",
                         "--format", "%v")
    assert sorted(together.out) == sorted("123a:1b:2c:3")
    records = kafkernel(bootstrap, "consume", "quick", "--from-beginning", "--count", "2",
                        "--group", "quick-check", "-o", "json").json()
    assert len(records) == 2 and all(r["topic"] == "quick" for r in records)
    keyed = kafkernel(bootstrap, "consume", "quick", "--from-beginning", "-e",
                      "-o", "json").json()
    assert {(r["key"], r["value"], tuple(r["headers"].items())) for r in keyed
            if r["partition"] == 1} == {("a", "1", (("source", "cli"),)),
                                         ("b", "2", (("source", "cli"),)),
                                         ("c", "3", (("source", "cli"),))}
    lines.write_text("d:4\nno separator\ne:5\n")
    stopped = kafkernel(bootstrap, "produce", "quick", "--input", str(lines),
                        "--key-separator", ":", "--partition", "0")
    assert (stopped.code, stopped.err) == (1, "kafkernel: line 2 has no key separator ':': "
                                              "'no separator'; the 1 lines before it were "
                                              "produced\n")
    assert [r["key"] for r in kafkernel(bootstrap, "consume", "quick", "--from-beginning",
                                        "-e", "-o", "json").json()
            if r["partition"] == 0][-1] == "d"
    missing = kafkernel(bootstrap, "consume", "nowhere", "-e")
    assert missing.code == 1 and missing.err.startswith("kafkernel: consuming nowhere")


def test_consume_prints_records_as_they_come_until_ctrl_c(bootstrap: str) -> None:
    kafkernel(bootstrap, "topic", "create", "live")
    produce(bootstrap, "live", per_partition=3, partitions=1)
    # SIGINT at its default in the child, as under a terminal: a parent that ignores it
    # passes that on, and Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernel", "consume", "live", "--from-beginning",
         "--bootstrap-server", bootstrap], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: seen.extend(
        proc.stdout.readline() for _ in range(3)), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(20)  # the records, while it still runs
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"consume did not stop on SIGINT within 30 s: {err}")
    assert seen == ["v0\n", "v1\n", "v2\n"], err
    assert proc.returncode in (0, 130) and "Traceback" not in err, err


@pytest.mark.parametrize("argv, message", [
    (["topic", "describe", "missing"], "describing missing: Broker: Unknown topic or partition"),
    (["topic", "create", "bad", "--config", "cleanup.policy=sideways"], "creating bad: "),
    (["topic", "delete", "missing"], "deleting missing: Broker: Unknown topic or partition"),
    (["topic", "alter-config", "t"], "nothing to change"),
    (["group", "reset-offsets", "nobody", "--topic", "missing", "--to-earliest"],
     "--topic missing: no such topic"),
    (["config", "alter", "--broker", "1", "--set", "num.partitions"],
     "--set: expected KEY=VALUE, got 'num.partitions'"),
])
def test_a_refusal_is_one_line_and_exit_code_1(bootstrap: str, argv: list[str],
                                               message: str) -> None:
    ran = kafkernel(bootstrap, *argv)
    assert ran.code == 1 and ran.out == ""
    assert ran.err.startswith(f"kafkernel: {message}") and ran.err.count("\n") == 1, ran.err


@pytest.mark.parametrize("argv", [
    ["topic", "list"], ["group", "describe", "g"], ["consume", "t", "-e"],
    ["user", "list"], ["acl", "list"],
])
def test_an_unreachable_broker_is_one_line_and_exit_code_1(argv: list[str]) -> None:
    """Through the installed command, for commands of each client (confluent-kafka's
    admin client and consumer, kafka-python)."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "kernel", *argv, "--bootstrap-server",
         f"127.0.0.1:{port}", "--timeout", "2"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert proc.stderr.startswith("kafkernel: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_users_and_acls_over_sasl(broker_factory: Callable[..., EmbeddedBroker],
                                  tmp_path: Path) -> None:
    b = acl_broker(broker_factory, tmp_path)
    login = ["--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
             "--sasl-username", "admin", "--sasl-password", USERS["admin"]]

    def run(*argv: str) -> Ran:
        return kafkernel(b.bootstrap, *argv, *login)

    assert run("user", "set", "carol", "--password", "carol-secret").code == 0
    assert run("user", "set", "carol", "--password", "c2", "--mechanism", "SCRAM-SHA-512",
               "--iterations", "8192").code == 0
    assert run("user", "list", "-o", "json").json() == [
        {"user": "carol", "mechanism": "SCRAM-SHA-256", "iterations": 4096},
        {"user": "carol", "mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    assert "SCRAM-SHA-512" in run("user", "list", "carol").out
    assert run("user", "delete", "carol", "--mechanism", "SCRAM-SHA-512").code == 0
    assert [u["mechanism"] for u in run("user", "list", "-o", "json").json()] == [
        "SCRAM-SHA-256"]

    added = run("acl", "add", "--principal", "User:alice", "--operation", "read",
                "--topic", "orders", "-o", "json").json()
    assert added == [{"principal": "User:alice", "host": "*", "operation": "READ",
                      "permission": "ALLOW", "resource_type": "TOPIC", "resource": "orders",
                      "pattern_type": "LITERAL"}]
    assert run("acl", "add", "--principal", "User:bob", "--operation", "write",
               "--permission", "deny", "--topic", "pay", "--pattern-type",
               "prefixed").code == 0
    listed = run("acl", "list", "-o", "json").json()
    assert {(a["principal"], a["operation"], a["permission"], a["pattern_type"])
            for a in listed} == {("User:alice", "READ", "ALLOW", "LITERAL"),
                                 ("User:bob", "WRITE", "DENY", "PREFIXED")}
    assert [a["principal"] for a in run("acl", "list", "--principal", "User:bob",
                                        "-o", "json").json()] == ["User:bob"]
    assert "User:alice" in run("acl", "list").out
    removed = run("acl", "remove", "--principal", "User:alice", "-o", "json").json()
    assert [a["principal"] for a in removed] == ["User:alice"]
    assert [a["principal"] for a in run("acl", "list", "-o", "json").json()] == ["User:bob"]

    assert [a["resource_type"] for a in run("acl", "list", "--cluster", "-o", "json").json()
            ] == []
    assert run("acl", "add", "--principal", "User:bob", "--operation", "describe",
               "--cluster").code == 0
    assert [(a["resource_type"], a["resource"]) for a in run(
        "acl", "list", "--cluster", "-o", "json").json()] == [("CLUSTER", "kafka-cluster")]
    assert run("acl", "remove", "--cluster").code == 0

    # an unprivileged user is refused, in one line
    as_bob = ["--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
              "--sasl-username", "bob", "--sasl-password", USERS["bob"]]
    denied = kafkernel(b.bootstrap, "acl", "add", "--principal", "User:bob", "--operation",
                       "all", "--cluster", *as_bob)
    assert denied.err == "kafkernel: CreateAcls: Cluster authorization failed.\n", denied.err
    assert denied.code == 1
    denied = kafkernel(b.bootstrap, "acl", "list", *as_bob)
    assert denied.err == "kafkernel: DescribeAcls: Cluster authorization failed.\n", denied.err
    assert denied.code == 1
    no_resource = run("acl", "add", "--principal", "User:x", "--operation", "read")
    assert no_resource.code == 1 and "name a resource" in no_resource.err


def test_elect_leaders_in_the_words_of_kafkas_tool(bootstrap: str, tmp_path: Path) -> None:
    """kafka-leader-election's lines and exit status, on the single-node KRaft broker
    (tests/zk/test_zk_ops.py runs a successful election on ZooKeeper)."""
    assert kafkernel(bootstrap, "topic", "create", "elect", "--partitions", "2").code == 0
    ran = kafkernel(bootstrap, "cluster", "elect-leaders", "--election-type", "preferred",
                    "--topic", "elect", "--partition", "0")
    assert (ran.code, ran.out) == (0, "Valid replica already elected for partitions elect-0\n")
    selection = tmp_path / "election.json"
    selection.write_text('{"partitions": [{"topic": "elect", "partition": 1},'
                         ' {"topic": "elect", "partition": 0}]}')
    ran = kafkernel(bootstrap, "cluster", "elect-leaders", "--election-type", "UNCLEAN",
                    "--path-to-json-file", str(selection))
    assert ran.out == "Valid replica already elected for partitions elect-0, elect-1\n"
    assert kafkernel(bootstrap, "cluster", "elect-leaders", "--election-type", "preferred",
                     "--path-to-json-file", str(selection), "-o", "json").json() == {
        "succeeded": [], "noop": ["elect-0", "elect-1"], "failed": {}}
    # Every partition: Kafka's controller leaves out those that need no election.
    ran = kafkernel(bootstrap, "cluster", "elect-leaders", "--election-type", "preferred",
                    "--all-topic-partitions")
    assert (ran.code, ran.out, ran.err) == (0, "", "")
    ran = kafkernel(bootstrap, "cluster", "elect-leaders", "--election-type", "preferred",
                    "--topic", "missing", "--partition", "0")
    assert ran.code == 1
    assert ran.out.startswith(
        "Error completing leader election (PREFERRED) for partition: missing-0: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: ")
    assert ran.err == "kafkernel: 1 replica(s) could not be elected\n"
    for argv, error in [
        (["--topic", "elect"], "Missing required option(s): partition"),
        (["--partition", "0", "--all-topic-partitions"],
         "Option partition is only allowed if topic is used"),
        (["--topic", "elect", "--partition", "0", "--all-topic-partitions"],
         "One and only one of the following options is required: topic, "
         "all-topic-partitions, path-to-json-file"),
    ]:
        ran = kafkernel(bootstrap, "cluster", "elect-leaders", "--election-type",
                        "preferred", *argv)
        assert (ran.code, ran.err) == (1, f"kafkernel: {error}\n"), argv
    selection.write_text('{"partitions": [{"topic": "elect", "partition": 0},'
                         ' {"topic": "elect", "partition": 0}]}')
    ran = kafkernel(bootstrap, "cluster", "elect-leaders", "--election-type", "preferred",
                    "--path-to-json-file", str(selection))
    assert ran.err == ("kafkernel: Replica election data contains duplicate partitions: "
                       "elect-0\n")
