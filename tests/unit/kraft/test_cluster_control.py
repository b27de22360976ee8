"""The controller's cluster control, sans-io: real kio requests in, records replayed
through image.py's MetadataDelta, the state after compared with what Kafka's controller
would have (ClusterControlManager, BrokerHeartbeatManager, ReplicationControlManager)."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.alter_partition.v3 import request as ap3
from kio.schema.broker_heartbeat.v2.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4 import request as reg4
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest
from kio.static.primitive import i8, i16, i32, i64, u16

from kernel.protocol.errors import ErrorCode
from plugins.metadata_kraft.controller.alter_partition import alter_partition
from plugins.metadata_kraft.controller.cluster_control import ClusterControl
from plugins.metadata_kraft.controller.producer_ids import allocate_producer_ids
from plugins.metadata_kraft.controller.state import ControllerState, as_written
from plugins.metadata_kraft.image import MetadataDelta, empty_image
from plugins.metadata_kraft.log import MetadataLogError
from plugins.metadata_kraft.records.schema import (
    BrokerRegistrationChangeRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)

CLUSTER = "c1"
FEATURES = {"metadata.version": 30, "eligible.leader.replicas.version": 1,
            "group.version": 1, "transaction.version": 2, "kraft.version": 0}
TOPIC_ID = uuid.UUID(int=7777)
SESSION_MS = 9000


def broker_features(**over: tuple[int, int]) -> tuple[reg4.Feature, ...]:
    ranges = {"metadata.version": (7, 30), "kraft.version": (0, 1),
              "eligible.leader.replicas.version": (0, 1), "group.version": (0, 1),
              "transaction.version": (0, 2), **over}
    return tuple(reg4.Feature(name=n, min_supported_version=i16(lo),
                              max_supported_version=i16(hi)) for n, (lo, hi) in ranges.items())


def registration(broker_id: int, incarnation: int = 1, cluster_id: str = CLUSTER,
                 features: tuple[reg4.Feature, ...] | None = None,
                 log_dirs: tuple[uuid.UUID, ...] | None = None) -> reg4.BrokerRegistrationRequest:
    return reg4.BrokerRegistrationRequest(
        broker_id=i32(broker_id), cluster_id=cluster_id,
        incarnation_id=uuid.UUID(int=broker_id * 100 + incarnation),
        listeners=(reg4.Listener(name="PLAINTEXT", host="h", port=u16(9000 + broker_id),
                                 security_protocol=i16(0)),),
        features=broker_features() if features is None else features, rack=None,
        log_dirs=(uuid.UUID(int=1000 + broker_id),) if log_dirs is None else log_dirs)


def heartbeat(broker_id: int, epoch: int, offset: int, *, want_fence: bool = False,
              want_shut_down: bool = False) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(broker_id=i32(broker_id), broker_epoch=i64(epoch),
                                  current_metadata_offset=i64(offset), want_fence=want_fence,
                                  want_shut_down=want_shut_down)


class Controller:
    """The committed state and a log offset, advanced by replaying each result's
    records through MetadataDelta as the quorum controller will."""

    def __init__(self) -> None:
        self.state = ControllerState(empty_image(CLUSTER, 3000), {}, FEATURES)
        self.offset = 10
        self.control = ClusterControl(CLUSTER, SESSION_MS)

    def commit(self, records) -> None:
        delta = MetadataDelta(self.state.image, self.state.next_producer_id,
                              broker_registrations=self.state.registrations)
        for r in records:
            delta.replay(r, self.offset)
            self.offset += 1
        self.state = ControllerState.of(delta, self.state.features)

    def register(self, broker_id: int, now: int = 0, **kw):
        result = self.control.register_broker(self.state, registration(broker_id, **kw),
                                              offset=self.offset, now=now)
        self.commit(result.records)
        return result

    def beat(self, request: BrokerHeartbeatRequest, now: int = 0):
        result = self.control.heartbeat(self.state, request, offset=self.offset, now=now)
        self.commit(result.records)
        return result

    def unfenced(self, *brokers: int) -> None:
        for b in brokers:
            epoch = self.register(b).response.broker_epoch
            assert not self.beat(heartbeat(b, epoch, self.offset)).response.is_fenced

    def topic(self, replicas: tuple[int, ...], leader: int) -> None:
        self.commit([TopicRecord(name="t", topic_id=TOPIC_ID),
                     PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=replicas,
                                     isr=replicas, leader=leader, leader_epoch=0,
                                     partition_epoch=0)])

    def partition(self):
        return self.state.image.partition("t", 0)


def test_registration_writes_register_broker_record_fenced_at_its_offset() -> None:
    c = Controller()
    result = c.register(1)
    assert result.response.error_code == ErrorCode.none
    (record,) = result.records
    assert isinstance(record, RegisterBrokerRecord)
    assert record.fenced and record.broker_epoch == 10 == result.response.broker_epoch
    assert record.log_dirs == (uuid.UUID(int=1001),)
    assert {f.name for f in record.features} >= {"metadata.version", "kraft.version"}
    r = c.state.registrations[1]
    assert r.fenced and r.epoch == 10 and r.registered_offset == 10
    assert c.state.image.brokers[1].port == 9001


def test_registration_errors() -> None:
    c = Controller()
    assert c.register(1, cluster_id="other").response.error_code == \
        ErrorCode.inconsistent_cluster_id
    # A finalized level outside the broker's range; one finalized feature left out.
    assert c.register(1, features=broker_features(**{"transaction.version": (0, 1)})
                      ).response.error_code == ErrorCode.unsupported_version
    assert c.register(1, features=broker_features()[1:]).response.error_code == \
        ErrorCode.invalid_registration  # no metadata.version (4.3.1)
    without_group = tuple(f for f in broker_features() if f.name != "group.version")
    assert c.register(1, features=without_group).response.error_code == \
        ErrorCode.unsupported_version
    assert c.register(1, log_dirs=()).response.error_code == ErrorCode.invalid_registration
    assert c.register(1, log_dirs=(uuid.UUID(int=1),)).response.error_code == \
        ErrorCode.invalid_registration
    assert c.state.registrations == {}
    c.unfenced(1)
    # Another incarnation while the session lives; accepted once it expired.
    assert c.register(1, now=SESSION_MS, incarnation=2).response.error_code == \
        ErrorCode.duplicate_broker_registration
    assert c.register(2, log_dirs=(uuid.UUID(int=1001),)).response.error_code == \
        ErrorCode.invalid_registration  # broker 1's directory
    result = c.register(1, now=SESSION_MS + 1, incarnation=2)
    assert result.response.error_code == ErrorCode.none
    assert c.state.registrations[1].fenced


def test_same_incarnation_amends_registration_keeping_epoch_and_state() -> None:
    c = Controller()
    c.unfenced(1)
    epoch = c.state.registrations[1].epoch
    result = c.register(1)
    assert result.response.broker_epoch == epoch
    assert not result.records[0].fenced and not c.state.registrations[1].fenced


def test_heartbeat_unfences_once_caught_up() -> None:
    c = Controller()
    epoch = c.register(1).response.broker_epoch
    behind = c.beat(heartbeat(1, epoch, epoch - 1))
    assert behind.records == ()
    assert (behind.response.is_caught_up, behind.response.is_fenced) == (False, True)
    assert c.beat(heartbeat(1, epoch, epoch, want_fence=True)).response.is_fenced
    caught_up = c.beat(heartbeat(1, epoch, epoch))
    assert caught_up.records == (BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=epoch, fenced=-1),)
    assert caught_up.response.is_caught_up and not caught_up.response.is_fenced
    assert not c.state.registrations[1].fenced


def test_heartbeat_epoch_errors() -> None:
    c = Controller()
    epoch = c.register(1).response.broker_epoch
    stale = c.beat(heartbeat(1, epoch + 1, 100))
    assert stale.response.error_code == ErrorCode.stale_broker_epoch and stale.records == ()
    # Kafka 4.3.1's checkBrokerEpoch: an unregistered broker is a stale epoch too.
    assert c.beat(heartbeat(9, 0, 100)).response.error_code == ErrorCode.stale_broker_epoch


def test_fenced_broker_wanting_shutdown_shuts_down_at_once() -> None:
    c = Controller()
    epoch = c.register(1).response.broker_epoch
    r = c.beat(heartbeat(1, epoch, 0, want_shut_down=True)).response
    assert r.should_shut_down and r.is_fenced


def test_want_fence_fences_and_moves_leadership() -> None:
    c = Controller()
    c.unfenced(1, 2)
    c.topic((1, 2), leader=1)
    epoch = c.state.registrations[1].epoch
    result = c.beat(heartbeat(1, epoch, c.offset, want_fence=True))
    assert result.response.is_fenced and not result.response.should_shut_down
    assert result.records == (
        PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=(2,), leader=2),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, fenced=1))
    p = c.partition()
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2,), 1, 1)


def test_controlled_shutdown_moves_leaders_then_allows_shutdown() -> None:
    c = Controller()
    c.unfenced(1, 2)
    c.topic((1, 2), leader=1)
    epoch = c.state.registrations[1].epoch
    first = c.beat(heartbeat(1, epoch, c.offset, want_shut_down=True))
    assert first.records == (
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch,
                                       in_controlled_shutdown=1),
        PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=(2,), leader=2))
    assert not first.response.should_shut_down and not first.response.is_fenced
    assert c.state.registrations[1].in_controlled_shutdown
    assert c.partition().leader == 2
    shutdown_offset = c.control.session(1).controlled_shutdown_offset
    assert shutdown_offset == c.offset - 1
    # Broker 2 has not replayed the moves yet: not yet.
    c.beat(heartbeat(2, c.state.registrations[2].epoch, shutdown_offset - 1))
    assert not c.beat(heartbeat(1, epoch, c.offset, want_shut_down=True)
                      ).response.should_shut_down
    c.beat(heartbeat(2, c.state.registrations[2].epoch, shutdown_offset))
    last = c.beat(heartbeat(1, epoch, c.offset, want_shut_down=True))
    assert last.response.should_shut_down and last.response.is_fenced
    assert last.records[-1] == BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=epoch, fenced=1)


def test_unfenced_broker_leading_nothing_shuts_down_at_once() -> None:
    c = Controller()
    c.unfenced(1)
    r = c.beat(heartbeat(1, c.state.registrations[1].epoch, c.offset, want_shut_down=True))
    assert r.response.should_shut_down


def test_session_expiry_fences_one_broker_a_call_and_last_isr_member_stays() -> None:
    c = Controller()
    c.unfenced(1, 2)
    c.topic((1, 2), leader=1)
    c.beat(heartbeat(2, c.state.registrations[2].epoch, c.offset), now=5000)
    assert c.control.fence_one_stale_broker(c.state, SESSION_MS).records == ()
    result = c.control.fence_one_stale_broker(c.state, SESSION_MS + 1)
    assert result.response == 1
    c.commit(result.records)
    assert c.state.registrations[1].fenced and c.partition().leader == 2
    result = c.control.fence_one_stale_broker(c.state, 5000 + SESSION_MS + 1)
    c.commit(result.records)
    # No live ISR member: no leader, the ISR keeps its last member (pre-ELR rule).
    p = c.partition()
    assert (p.leader, p.isr) == (-1, (2,))
    # Broker 2 comes back: unfencing elects it.
    epoch = c.state.registrations[2].epoch
    back = c.beat(heartbeat(2, epoch, c.offset), now=20000)
    assert back.records[1] == PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID,
                                                    leader=2)
    assert c.partition().leader == 2


def test_failover_restarts_every_session_from_now() -> None:
    c = Controller()
    c.unfenced(1)
    successor = ClusterControl(CLUSTER, SESSION_MS)
    successor.activate(c.state, now=100_000)
    assert successor.fence_one_stale_broker(c.state, 100_000 + SESSION_MS).records == ()
    assert successor.fence_one_stale_broker(c.state, 100_001 + SESSION_MS).response == 1


def test_unregister() -> None:
    c = Controller()
    c.unfenced(1, 2)
    c.topic((1, 2), leader=1)
    r = c.control.unregister_broker(c.state, UnregisterBrokerRequest(broker_id=i32(9)))
    assert r.response.error_code == ErrorCode.broker_id_not_registered
    r = c.control.unregister_broker(c.state, UnregisterBrokerRequest(broker_id=i32(1)))
    assert r.records[-1] == UnregisterBrokerRecord(
        broker_id=1, broker_epoch=c.state.registrations[1].epoch)
    c.commit(r.records)
    assert 1 not in c.state.registrations and 1 not in c.state.image.brokers
    assert c.partition().leader == 2


def test_allocate_producer_ids() -> None:
    c = Controller()
    c.unfenced(1)
    epoch = c.state.registrations[1].epoch
    for start in (0, 1000):
        r = allocate_producer_ids(c.state, AllocateProducerIdsRequest(
            broker_id=i32(1), broker_epoch=i64(epoch)))
        assert (r.response.producer_id_start, r.response.producer_id_len) == (start, 1000)
        assert r.records == (ProducerIdsRecord(broker_id=1, broker_epoch=epoch,
                                               next_producer_id=start + 1000),)
        c.commit(r.records)
    r = allocate_producer_ids(c.state, AllocateProducerIdsRequest(
        broker_id=i32(1), broker_epoch=i64(epoch - 1)))
    assert r.response.error_code == ErrorCode.stale_broker_epoch and r.records == ()


def _alter(c: Controller, isr: tuple[tuple[int, int], ...], *, sender: int = 1,
           sender_epoch: int | None = None, leader_epoch: int = 0,
           partition_epoch: int = 0) -> object:
    epoch = c.state.registrations[sender].epoch if sender_epoch is None else sender_epoch
    return alter_partition(c.state, ap3.AlterPartitionRequest(
        broker_id=i32(sender), broker_epoch=i64(epoch), topics=(ap3.TopicData(
            topic_id=TOPIC_ID, partitions=(ap3.PartitionData(
                partition_index=i32(0), leader_epoch=i32(leader_epoch),
                new_isr_with_epochs=tuple(ap3.BrokerState(broker_id=i32(b),
                                                          broker_epoch=i64(e))
                                          for b, e in isr),
                leader_recovery_state=i8(0), partition_epoch=i32(partition_epoch)),)),)))


def test_alter_partition() -> None:
    c = Controller()
    c.unfenced(1, 2, 3)
    c.topic((1, 2, 3), leader=1)
    e = {b: c.state.registrations[b].epoch for b in (1, 2, 3)}

    def code(result: object) -> ErrorCode:
        return result.response.topics[0].partitions[0].error_code  # type: ignore[attr-defined]

    assert _alter(c, ((1, e[1]),), sender_epoch=e[1] + 1).response.error_code == \
        ErrorCode.stale_broker_epoch
    assert code(_alter(c, ((1, e[1]), (2, e[2] + 1)))) == ErrorCode.ineligible_replica
    assert code(_alter(c, ((1, e[1]),), leader_epoch=5)) == ErrorCode.not_controller
    assert code(_alter(c, ((2, e[2]),))) == ErrorCode.invalid_request  # leader left out
    assert code(_alter(c, ((2, e[2]),), sender=2)) == ErrorCode.invalid_request  # not leader
    shrink = _alter(c, ((1, e[1]), (3, -1)))
    assert code(shrink) == ErrorCode.none
    assert shrink.records == (PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID,
                                                    isr=(1, 3)),)
    c.commit(shrink.records)
    p = c.partition()
    assert (p.isr, p.leader_epoch, p.partition_epoch) == ((1, 3), 0, 1)
    assert shrink.response.topics[0].partitions[0].partition_epoch == 1
    assert code(_alter(c, ((1, e[1]),))) == ErrorCode.invalid_update_version
    # Broker 2 fenced: it may not rejoin the ISR.
    c.beat(heartbeat(2, e[2], c.offset, want_fence=True))
    assert code(_alter(c, ((1, e[1]), (2, e[2]), (3, e[3])), partition_epoch=1)) == \
        ErrorCode.ineligible_replica


def test_first_v2_heartbeat_records_cordoned_dirs_once() -> None:
    c = Controller()
    epoch = c.register(1).response.broker_epoch
    request = BrokerHeartbeatRequest(broker_id=i32(1), broker_epoch=i64(epoch),
                                     current_metadata_offset=i64(c.offset), want_fence=False,
                                     want_shut_down=False, cordoned_log_dirs=())
    result = c.beat(request)
    # Kafka 4.3.1's log: the unfence (v0), then cordonedLogDirs [] over the null (v3).
    assert result.records == (
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, fenced=-1),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch,
                                       cordoned_log_dirs=()))
    assert [as_written(r).version for r in result.records] == [0, 3]
    assert c.state.registrations[1].cordoned_log_dirs == ()
    assert c.beat(request).records == ()


def test_record_versions_as_kafka_writes_them() -> None:
    c = Controller()
    (register,) = c.register(1).records
    assert as_written(register).version == 4
    assert as_written(BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=10, in_controlled_shutdown=1)).version == 1


def test_replay_refuses_changes_of_unknown_or_other_registrations() -> None:
    c = Controller()
    c.register(1)
    epoch = c.state.registrations[1].epoch
    for record in (BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch + 1,
                                                  fenced=-1),
                   BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=epoch, fenced=-1),
                   UnregisterBrokerRecord(broker_id=1, broker_epoch=epoch - 1)):
        with pytest.raises(MetadataLogError):
            c.commit([record])
    assert c.state.registrations[1].fenced
