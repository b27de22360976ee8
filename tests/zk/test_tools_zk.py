"""Kafka 4.3's kafka-reassign-partitions and kafka-leader-election against brokers on
metadata_zk, which replicate: a new replica joins the ISR by catching up, and a
reassignment stays in progress while its new replica's broker is stopped."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from kernel.testing.embedded import EmbeddedBroker
from reference import tools
from tests.zk.test_controller_zk import (
    _alter,
    _cluster,
    _create,
    _fill,
    _log_end,
    _stalled,
    _wait,
    backend,
    partition,
)
from tests.zk.test_replication_zk import _produce


def ok(result: tools.ToolResult) -> str:
    assert result.returncode == 0, result.describe()
    return result.stdout


def test_kafka_reassign_partitions_and_kafka_leader_election(
        zk_broker_factory: Callable[..., EmbeddedBroker], kazoo: KazooClient,
        tmp_path: Path) -> None:
    def without_rebalance(settings: dict[str, Any] | None = None,
                          **kwargs: Any) -> EmbeddedBroker:
        # kafka-leader-election moves led-0's leader below: the controller's automatic
        # preferred-leader rebalance (first check 5 s after it starts) must not first.
        return zk_broker_factory({**(settings or {}), "auto.leader.rebalance.enable": False},
                                 **kwargs)

    b1, b2, b3 = _cluster(without_rebalance, 1, 2, 3)
    for topic in ("moved", "led", "kept"):
        _create(b1, topic, {0: (1, 2)})
    _wait(lambda: all("kept" in backend(b).image.topics for b in (b2, b3)), "the topics")
    end = _fill(b1, "moved")
    _fill(b1, "kept")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moved", "partition": 0, "replicas": [2, 3]},
        {"topic": "led", "partition": 0, "replicas": [2, 1]}]}))
    reassign = ("--bootstrap-server", b2.bootstrap)
    # Started over the wire: the tool's --execute needs DescribeLogDirs (see below).
    # Broker 3, the new replica, cannot catch up: the leader (1) is stalled meanwhile,
    # and broker 3 stops before it resumes (the clients never meet a stalled broker).
    with _stalled(b1):
        assert _alter(b2, {("moved", 0): [2, 3], ("led", 0): [2, 1], ("kept", 0): [3, 1]}) \
            == dict.fromkeys([("moved", 0), ("led", 0), ("kept", 0)], ErrorCode.none)
        b3.stop(remove_data=False)
    assert _json_partitions(kazoo, "moved") == {"0": [2, 3, 1]}
    out = ok(tools.run(tools.REASSIGN_PARTITIONS_COMMAND, *reassign, "--list"))
    assert "moved-0: replicas: 2,3,1. adding: 3. removing: 1." in out, out
    assert "led-0" not in out  # a new order of the same replicas completes at once

    cancel = tmp_path / "cancel.json"
    cancel.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "kept", "partition": 0, "replicas": [3, 1]}]}))
    out = ok(tools.run(tools.REASSIGN_PARTITIONS_COMMAND, *reassign, "--cancel",
                       "--reassignment-json-file", str(cancel), "--preserve-throttles"))
    assert "Successfully cancelled partition reassignment for: kept-0" in out, out
    _wait(lambda: partition(b2, "kept").replicas == (1, 2), "the cancellation")
    out = ok(tools.run(tools.REASSIGN_PARTITIONS_COMMAND, *reassign,
                       "--reassignment-json-file", str(plan), "--verify",
                       "--preserve-throttles"))
    assert "Reassignment of partition moved-0 is still in progress." in out, out
    assert "Reassignment of partition led-0 is completed." in out, out

    b3.start()  # broker 3 comes back, catches up, and leader 1 adds it to the ISR
    _wait(lambda: not (p := partition(b3, "moved")).reassigning and p.replicas == (2, 3),
          "the reassignment to complete")
    out = ok(tools.run(tools.REASSIGN_PARTITIONS_COMMAND, *reassign,
                       "--reassignment-json-file", str(plan), "--verify",
                       "--preserve-throttles"))
    assert "Reassignment of partition moved-0 is completed." in out, out
    assert (partition(b3, "moved").replicas, partition(b3, "moved").leader) == ((2, 3), 2)
    _wait(lambda: _log_end(b3, "moved") == end, "broker 3 to hold the records")

    # led-0: replicas (2, 1) now, led by 1: its preferred leader is 2.
    assert (partition(b1, "led").replicas, partition(b1, "led").leader) == ((2, 1), 1)
    elect = ("--bootstrap-server", b3.bootstrap, "--election-type", "PREFERRED")
    out = ok(tools.run(tools.LEADER_ELECTION_COMMAND, *elect, "--topic", "led",
                       "--partition", "0"))
    assert "Successfully completed leader election (PREFERRED) for partitions led-0" in out
    _wait(lambda: partition(b3, "led").leader == 2, "broker 3 to see the new leader")
    out = ok(tools.run(tools.LEADER_ELECTION_COMMAND, *elect, "--topic", "led",
                       "--partition", "0"))
    assert "Valid replica already elected for partitions led-0" in out, out
    result = tools.run(tools.LEADER_ELECTION_COMMAND, *elect, "--all-topic-partitions")
    assert result.returncode == 0, result.describe()
    assert "Successfully" not in result.stdout


def test_kafka_reassign_partitions_execute(
        zk_broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path) -> None:
    """--execute asks DescribeLogDirs of the target brokers first, then starts the
    reassignment; the new replica fetches from the leader, joins the ISR by itself, and
    the controller completes the move: broker 2 alone holds every record."""
    b1, b2 = _cluster(zk_broker_factory, 1, 2)
    _create(b1, "moved", {0: (1,)})
    _wait(lambda: partition(b2, "moved").leader == 1, "the topic on broker 2")
    acked = _produce(b1.bootstrap, "moved", [f"v{i}".encode() for i in range(50)])
    assert len(acked) == 50
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moved", "partition": 0, "replicas": [2]}]}))
    reassign = ("--bootstrap-server", b2.bootstrap, "--reassignment-json-file", str(plan))
    out = ok(tools.run(tools.REASSIGN_PARTITIONS_COMMAND, *reassign, "--execute"))
    assert "Successfully started partition reassignment for moved-0" in out, out
    _wait(lambda: (partition(b1, "moved").replicas, partition(b1, "moved").leader,
                   partition(b1, "moved").reassigning) == ((2,), 2, False),
          "the reassignment to complete", timeout=60)
    out = ok(tools.run(tools.REASSIGN_PARTITIONS_COMMAND, *reassign, "--verify"))
    assert "Reassignment of partition moved-0 is completed." in out, out
    assert b2.broker is not None and b1.broker is not None
    moved = b2.broker.logs.get_log("moved", 0)
    assert moved is not None and moved.log_end_offset == 50
    _wait(lambda: b1.broker is not None and b1.broker.logs.get_log("moved", 0) is None,
          "broker 1 to delete its replica")


def _json_partitions(kazoo: KazooClient, topic: str) -> dict[str, list[int]]:
    partitions: dict[str, list[int]] = json.loads(kazoo.get(f"/brokers/topics/{topic}")[0])[
        "partitions"]
    return partitions
