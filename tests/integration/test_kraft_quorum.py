"""A static quorum of three controller-only Kafkernel nodes (process.roles=controller),
real processes on real sockets: they elect a leader, replicate its log (the LeaderChange
and a NoOp every metadata.max.idle.interval.ms), answer Kafka's kafka-metadata-quorum,
and elect another leader when the leader is killed (-9). One quorum for the module."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kio.schema.describe_quorum.v2 import request as dq_req
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from plugins.metadata_kraft.raft import messages as m
from plugins.metadata_kraft.records.serde import decode_batches
from reference import tools
from reference.kafka import KafkaNotFetched
from tests.integration import wire
from tests.kraft_quorum import KafkernelQuorum

DESCRIBE_QUORUM = dq_req.DescribeQuorumRequest(topics=(dq_req.TopicData(
    topic_name=TopicName(m.METADATA_TOPIC),
    partitions=(dq_req.PartitionData(partition_index=i32(0)),)),))
T = TypeVar("T")


def _describe(quorum: KafkernelQuorum, node: int) -> Any:
    return wire.request(quorum.address(node), DESCRIBE_QUORUM)


def _leader(quorum: KafkernelQuorum) -> tuple[int, int, int] | None:
    """(leader, epoch, high watermark) as the live leader's DescribeQuorum says."""
    for node, proc in quorum.nodes.items():
        if not proc.alive:
            continue
        try:
            part = _describe(quorum, node).topics[0].partitions[0]
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
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout} s")


def _log_end(quorum: KafkernelQuorum, node: int) -> int:
    batches = decode_batches(quorum.segment(node).read_bytes())
    return batches[-1].header.last_offset + 1 if batches else 0


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkernelQuorum]:
    q = KafkernelQuorum(tmp_path_factory.mktemp("quorum"))
    try:
        yield q.start()
    finally:
        q.stop()
        for proc in q.nodes.values():
            assert not proc.problems(), proc.problems()[:3]


def test_a_leader_is_elected_and_every_log_converges(quorum: KafkernelQuorum) -> None:
    leader, epoch, _ = _poll(lambda: _leader(quorum))
    assert leader in quorum.ports and epoch >= 1
    # A NoOp every 500 ms (metadata.max.idle.interval.ms) moves the high watermark.
    hw = _poll(lambda: (lambda s: s[2] if s and s[2] >= 3 else None)(_leader(quorum)))
    _poll(lambda: min(_log_end(quorum, n) for n in quorum.nodes) >= hw)
    batches = decode_batches(quorum.segment(leader).read_bytes())
    change = [b for b in batches if b.is_control and b.epoch == epoch]
    assert change and change[0].records[0].leader_id == leader  # type: ignore[union-attr]
    ours = quorum.segment(leader).read_bytes()
    for node in quorum.nodes:  # every voter holds the leader's committed batches
        assert quorum.segment(node).read_bytes()[:200] == ours[:200]


def test_kafka_metadata_quorum_describes_ours(quorum: KafkernelQuorum) -> None:
    leader, epoch, _ = _poll(lambda: _leader(quorum))
    bootstrap = ",".join(quorum.controllers)
    try:
        status = tools.metadata_quorum("describe", "--status", bootstrap_controller=bootstrap)
        replication = tools.metadata_quorum("describe", "--replication",
                                            bootstrap_controller=bootstrap)
    except KafkaNotFetched as e:
        pytest.skip(str(e))
    assert status.returncode == 0, status.stderr
    fields = dict(re.findall(r"^(\w+):\s+(.*)$", status.stdout, re.M))
    assert fields["LeaderId"] == str(leader) and fields["LeaderEpoch"] == str(epoch)
    assert int(fields["HighWatermark"]) > 0
    assert fields["CurrentVoters"].count('"id"') == 3 or \
        sorted(map(int, re.findall(r"\d+", fields["CurrentVoters"])))[:3] == [1, 2, 3]
    assert replication.returncode == 0, replication.stderr
    rows = [line.split() for line in replication.stdout.splitlines()[1:] if line.strip()]
    assert sorted(int(r[0]) for r in rows) == [1, 2, 3]
    assert next(r for r in rows if int(r[0]) == leader)[-1] == "Leader"


def test_kill_of_the_leader_elects_another(quorum: KafkernelQuorum) -> None:
    leader, epoch, _ = _poll(lambda: _leader(quorum))
    proc = quorum.nodes[leader]
    assert proc.proc is not None
    started = time.monotonic()
    proc.proc.kill()
    proc.proc.wait()
    new_leader, new_epoch, _ = _poll(
        lambda: (lambda s: s if s and s[0] != leader else None)(_leader(quorum)))
    elapsed = time.monotonic() - started
    print(f"\nkill -9 of leader {leader}: node {new_leader} leads epoch {new_epoch} "
          f"after {elapsed:.2f} s")
    assert new_epoch > epoch
    # The old leader comes back as a follower and catches up.
    proc.start()
    hw = _poll(lambda: (lambda s: s[2] if s and s[1] == new_epoch else None)(
        _leader(quorum)))
    _poll(lambda: _log_end(quorum, leader) >= hw)
