"""A static quorum of three controller-only Kafkernel nodes (process.roles=controller),
real processes on real sockets: they elect a leader, replicate its log (the LeaderChange
and a NoOp every metadata.max.idle.interval.ms) and answer DescribeQuorum; a kill -9 of
the leader elects another. One quorum for the module."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.schema.describe_quorum.v2 import request as dq_req
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from plugins.metadata_kraft.raft import messages as m
from plugins.metadata_kraft.records.serde import decode_batches
from tests.broker_process import BrokerProcess, free_port
from tests.integration import wire

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
DESCRIBE_QUORUM = dq_req.DescribeQuorumRequest(topics=(dq_req.TopicData(
    topic_name=TopicName(m.METADATA_TOPIC),
    partitions=(dq_req.PartitionData(partition_index=i32(0)),)),))
T = TypeVar("T")


class Quorum:
    def __init__(self, root: Path) -> None:
        self.ports = {node: free_port() for node in (1, 2, 3)}
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in self.ports.items())
        self.nodes: dict[int, BrokerProcess] = {}
        for node, port in self.ports.items():
            workdir = root / f"c{node}"
            data = workdir / "data"
            data.mkdir(parents=True)
            # What `kafka-storage format` writes: one cluster id on every voter.
            (data / "meta.properties").write_text(
                f"version=1\ncluster.id={CLUSTER_ID}\nnode.id={node}\n")
            self.nodes[node] = BrokerProcess(
                workdir, "process.roles=controller", f"node.id={node}",
                f"listeners=CONTROLLER://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER",
                f"controller.quorum.voters={voters}", port=port, plugins=("metadata_kraft",))
            toml = workdir / "kafkernel.toml"  # no coordinator settings: not enabled
            toml.write_text(toml.read_text().split("[plugins.coordinator]")[0])

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for n, p in self.ports.items()
                        if self.nodes[n].alive)

    def describe(self, node: int) -> Any:
        return wire.request(f"127.0.0.1:{self.ports[node]}", DESCRIBE_QUORUM)

    def leader(self) -> tuple[int, int, int] | None:
        """(leader, epoch, high watermark) as a live node's DescribeQuorum says."""
        for node, proc in self.nodes.items():
            if not proc.alive:
                continue
            try:
                part = self.describe(node).topics[0].partitions[0]
            except OSError:
                continue
            if part.error_code is ErrorCode.none:
                return int(part.leader_id), int(part.leader_epoch), int(part.high_watermark)
        return None


def _poll(what: Callable[[], T | None], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    q = Quorum(tmp_path_factory.mktemp("quorum"))
    try:
        for proc in q.nodes.values():
            proc.start()
        yield q
    finally:
        for proc in q.nodes.values():
            proc.stop()
        for proc in q.nodes.values():
            assert not [p for p in proc.problems() if "Traceback" in p], proc.log()[-3000:]


def test_a_leader_is_elected_and_every_log_converges(quorum: Quorum) -> None:
    leader, epoch, _ = _poll(quorum.leader)
    assert leader in quorum.ports and epoch >= 1
    # A NoOp every 500 ms moves the high watermark; each voter's log holds it.
    hw = _poll(lambda: (lambda s: s[2] if s and s[2] > 2 else None)(quorum.leader()))
    def converged() -> bool:
        logs = [(proc.workdir / "data" / "__cluster_metadata-0" /
                 "00000000000000000000.log").read_bytes() for proc in quorum.nodes.values()]
        batches = [decode_batches(b) for b in logs]
        ends = [bs[-1].header.last_offset + 1 if bs else 0 for bs in batches]
        return min(ends) >= hw
    _poll(converged)
    batches = decode_batches((quorum.nodes[leader].workdir / "data" /
                              "__cluster_metadata-0" / "00000000000000000000.log").read_bytes())
    assert batches[0].is_control
