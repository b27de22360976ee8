"""The active controller of a three-process Kafkernel quorum (process.roles=controller)
serves brokers on its controller listener: raw BrokerRegistration, BrokerHeartbeat and
AllocateProducerIds frames, answered once their records are committed in every voter's
log; a follower answers NOT_CONTROLLER; after a kill -9 of the active controller the new
one keeps the broker's session (restarted, not fenced) and fences it once it stops
heartbeating for broker.session.timeout.ms. One quorum for the module, the tests in
order (one broker's life)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kio.schema.allocate_producer_ids.v0 import request as apid
from kio.schema.alter_partition.v3 import request as alter
from kio.schema.broker_heartbeat.v2 import request as hb
from kio.schema.broker_registration.v4 import request as reg
from kio.schema.describe_quorum.v2 import request as dq_req
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.schema.unregister_broker.v0 import request as unreg
from kio.static.primitive import i16, i32, i64, u16

from plugins.metadata_kraft.raft import messages as m
from plugins.metadata_kraft.records.schema import (
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    RegisterBrokerRecord,
)
from plugins.metadata_kraft.records.serde import ApiMessageAndVersion, decode_batches
from tests.integration import wire
from tests.kraft_quorum import CLUSTER_ID, KafkernelQuorum

SESSION_TIMEOUT_MS = 2500
BROKER = 101
INCARNATION = uuid.uuid4()
LOG_DIR = uuid.uuid4()
T = TypeVar("T")

DESCRIBE_QUORUM = dq_req.DescribeQuorumRequest(topics=(dq_req.TopicData(
    topic_name=TopicName(m.METADATA_TOPIC),
    partitions=(dq_req.PartitionData(partition_index=i32(0)),)),))


def _poll(what: Callable[[], T | None], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout} s")


def _leader(quorum: KafkernelQuorum) -> int | None:
    for node, proc in quorum.nodes.items():
        if not proc.alive:
            continue
        try:
            part = wire.request(quorum.address(node), DESCRIBE_QUORUM).topics[0].partitions[0]
        except OSError:
            continue
        if part.error_code is ErrorCode.none:
            return int(part.leader_id)
    return None


def _answered(quorum: KafkernelQuorum, node: int, request: Any) -> Any:
    """The answer of ``node`` once it is the active controller (it becomes active a
    moment after it leads: once its LeaderChange is committed)."""
    def once() -> Any:
        response = wire.request(quorum.address(node), request)
        return None if response.error_code is ErrorCode.not_controller else response
    return _poll(once)


def _records(quorum: KafkernelQuorum, node: int) -> list[tuple[int, Any]]:
    """(offset, record) of every metadata record in ``node``'s log."""
    out = []
    for batch in decode_batches(quorum.segment(node).read_bytes()):
        for i, record in enumerate(batch.records):
            if isinstance(record, ApiMessageAndVersion):
                out.append((batch.base_offset + i, record.message))
    return out


def _registration(broker: int = BROKER, protocol: int = 0) -> reg.BrokerRegistrationRequest:
    return reg.BrokerRegistrationRequest(
        broker_id=BrokerId(broker), cluster_id=CLUSTER_ID,
        incarnation_id=INCARNATION if broker == BROKER else uuid.uuid4(),
        listeners=(reg.Listener(name="PLAINTEXT", host="127.0.0.1", port=u16(9092),
                                security_protocol=i16(protocol)),),
        features=(reg.Feature(name="metadata.version", min_supported_version=i16(7),
                              max_supported_version=i16(30)),),
        rack=None, is_migrating_zk_broker=False,
        log_dirs=(LOG_DIR if broker == BROKER else uuid.uuid4(),),
        previous_broker_epoch=i64(-1))


def _heartbeat(epoch: int, offset: int) -> hb.BrokerHeartbeatRequest:
    return hb.BrokerHeartbeatRequest(
        broker_id=BrokerId(BROKER), broker_epoch=i64(epoch),
        current_metadata_offset=i64(offset), want_fence=False, want_shut_down=False,
        offline_log_dirs=(), cordoned_log_dirs=None)


class Broker:
    epoch = -1


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkernelQuorum]:
    q = KafkernelQuorum(tmp_path_factory.mktemp("controller"), settings=(
        f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}",
        "broker.heartbeat.interval.ms=200"))
    try:
        yield q.start()
    finally:
        q.stop()
        for proc in q.nodes.values():
            assert not proc.problems(), proc.problems()[:3]


def test_registration_is_answered_after_commit_on_every_voter(
        quorum: KafkernelQuorum) -> None:
    leader = _poll(lambda: _leader(quorum))
    response = _answered(quorum, leader, _registration())
    assert response.error_code is ErrorCode.none
    Broker.epoch = epoch = int(response.broker_epoch)
    assert epoch > 0
    for node in quorum.nodes:  # committed: on a majority at once, on all soon
        records = _poll(lambda n=node: [
            (o, r) for o, r in _records(quorum, n) if isinstance(r, RegisterBrokerRecord)])
        (offset, record), = records
        # The broker epoch is the offset of its RegisterBrokerRecord (a new incarnation).
        assert (offset, record.broker_id, record.broker_epoch) == (epoch, BROKER, epoch)
        assert record.incarnation_id == INCARNATION and record.fenced
        # A new cluster's log opens with the bootstrap metadata.version.
        features = [r for _, r in _records(quorum, node)
                    if isinstance(r, FeatureLevelRecord)]
        assert [(f.name, f.feature_level) for f in features] == [("metadata.version", 30)]


def test_a_follower_answers_not_controller(quorum: KafkernelQuorum) -> None:
    leader = _poll(lambda: _leader(quorum))
    follower = next(n for n in quorum.nodes if n != leader)
    response = wire.request(quorum.address(follower), _heartbeat(Broker.epoch, 0))
    assert response.error_code is ErrorCode.not_controller


def test_heartbeats_unfence_once_the_broker_caught_up(quorum: KafkernelQuorum) -> None:
    leader = _poll(lambda: _leader(quorum))
    behind = _answered(quorum, leader, _heartbeat(Broker.epoch, Broker.epoch - 1))
    assert behind.error_code is ErrorCode.none
    assert behind.is_fenced and not behind.is_caught_up
    caught_up = _answered(quorum, leader, _heartbeat(Broker.epoch, Broker.epoch))
    assert caught_up.error_code is ErrorCode.none
    assert not caught_up.is_fenced and caught_up.is_caught_up
    changes = [r for _, r in _records(quorum, leader)
               if isinstance(r, BrokerRegistrationChangeRecord)]
    assert [(c.broker_id, c.broker_epoch, c.fenced) for c in changes] == \
        [(BROKER, Broker.epoch, -1)]
    stale = _answered(quorum, leader, _heartbeat(Broker.epoch + 1, Broker.epoch))
    assert stale.error_code is ErrorCode.stale_broker_epoch


def test_producer_id_blocks_are_consecutive(quorum: KafkernelQuorum) -> None:
    leader = _poll(lambda: _leader(quorum))
    ask = apid.AllocateProducerIdsRequest(broker_id=BrokerId(BROKER),
                                          broker_epoch=i64(Broker.epoch))
    first = _answered(quorum, leader, ask)
    second = _answered(quorum, leader, ask)
    assert first.error_code is second.error_code is ErrorCode.none
    assert (int(first.producer_id_start), int(first.producer_id_len)) == (0, 1000)
    assert int(second.producer_id_start) == 1000


def test_refusals_leave_the_controller_serving(quorum: KafkernelQuorum) -> None:
    leader = _poll(lambda: _leader(quorum))
    # A listener of an unknown security protocol: nothing is written, the sender is told.
    bad = _answered(quorum, leader, _registration(broker=102, protocol=99))
    assert bad.error_code is ErrorCode.invalid_request
    unknown = _answered(quorum, leader, unreg.UnregisterBrokerRequest(broker_id=BrokerId(103)))
    assert unknown.error_code is ErrorCode.broker_id_not_registered
    stale = _answered(quorum, leader, alter.AlterPartitionRequest(
        broker_id=BrokerId(BROKER), broker_epoch=i64(Broker.epoch + 1), topics=()))
    assert stale.error_code is ErrorCode.stale_broker_epoch
    assert not any(isinstance(r, RegisterBrokerRecord) and r.broker_id == 102
                   for _, r in _records(quorum, leader))
    ok = _answered(quorum, leader, _heartbeat(Broker.epoch, Broker.epoch))
    assert ok.error_code is ErrorCode.none


def test_failover_keeps_the_session_then_fences_a_silent_broker(
        quorum: KafkernelQuorum) -> None:
    leader = _poll(lambda: _leader(quorum))
    assert not _answered(quorum, leader, _heartbeat(Broker.epoch, Broker.epoch)).is_fenced
    proc = quorum.nodes[leader]
    assert proc.proc is not None
    proc.proc.kill()
    proc.proc.wait()
    new = _poll(lambda: (lambda n: n if n is not None and n != leader else None)(
        _leader(quorum)))
    # Sessions restart from the activation: the broker's first heartbeat to the new
    # controller finds it unfenced, the same broker epoch.
    again = _answered(quorum, new, _heartbeat(Broker.epoch, Broker.epoch))
    last_heartbeat = time.monotonic()
    assert again.error_code is ErrorCode.none and not again.is_fenced

    def fenced() -> bool:
        return any(isinstance(r, BrokerRegistrationChangeRecord) and r.fenced == 1
                   and r.broker_id == BROKER for _, r in _records(quorum, new))

    _poll(fenced, timeout=SESSION_TIMEOUT_MS / 1000 + 15)
    elapsed = time.monotonic() - last_heartbeat
    print(f"\nbroker {BROKER} fenced by node {new} {elapsed:.2f} s after its last "
          f"heartbeat (broker.session.timeout.ms={SESSION_TIMEOUT_MS})")
    assert elapsed >= SESSION_TIMEOUT_MS / 1000 - 0.1
    # Fenced now: a heartbeat short of its registration's offset leaves it so.
    behind = _answered(quorum, new, _heartbeat(Broker.epoch, Broker.epoch - 1))
    assert behind.error_code is ErrorCode.none and behind.is_fenced
    proc.start()  # back as a follower, for a clean stop
