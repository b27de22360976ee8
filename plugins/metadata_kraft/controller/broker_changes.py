"""Leadership and ISR moves when a broker is fenced, starts a controlled shutdown, is
unregistered or unfenced (ReplicationControlManager.generateLeaderAndIsrUpdates), with
the election rules of ``kernel.replication_control``.

ELR (eligible.leader.replicas.version=1, which Kafka 4.3's format finalizes): the
records leave EligibleLeaderReplicas and LastKnownElr unset, so every partition keeps an
empty ELR. That is what Kafka writes while the ISR stays at or above
``min.insync.replicas`` (PartitionChangeBuilder.maybePopulateTargetElr clears the ELR
then). Below it Kafka 4.3 would move the removed members into the ELR and may empty the
ISR; here the pre-ELR rule holds instead: the last ISR member stays in the ISR and the
partition has no leader until it comes back (what Kafka does at ELR version 0).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from kernel.api.cluster import NO_LEADER, PartitionState
from kernel.api.controller import after_broker_change

from ..records.schema import NO_LEADER_CHANGE, PartitionChangeRecord
from .state import ControllerState

# PartitionChangeRecord.LeaderRecoveryState after an unclean election (Kafka's
# LeaderRecoveryState.RECOVERING).
RECOVERING = 1


def _partitions(state: ControllerState) -> Iterator[tuple[str, PartitionState, object]]:
    for topic in state.image.topics.values():
        for p in topic.partitions.values():
            yield topic.name, p, topic.topic_id


def change_record(state: ControllerState, topic: str, p: PartitionState,
                  live: Collection[int]) -> PartitionChangeRecord | None:
    """The record moving ``p`` to its leader and ISR over ``live`` brokers; None when
    it stays (PartitionChangeBuilder.build's no-op)."""
    t = state.image.topics[topic]
    moved = after_broker_change(p.leader, p.isr, p.replicas, live,
                                unclean=state.unclean_election(topic))
    if moved is None:
        return None
    leader, isr = moved
    unclean = leader != NO_LEADER and leader not in p.isr
    record = PartitionChangeRecord(
        partition_id=p.partition, topic_id=t.topic_id,
        isr=None if isr == p.isr else isr,
        leader=NO_LEADER_CHANGE if leader == p.leader else leader,
        # PartitionChangeBuilder.tryElection: an unclean leader starts RECOVERING.
        leader_recovery_state=RECOVERING if unclean else -1)
    if record.isr is None and record.leader == NO_LEADER_CHANGE:
        return None
    return record


def remove_broker(state: ControllerState, broker_id: int) -> list[PartitionChangeRecord]:
    """Fenced, in controlled shutdown or unregistered: every partition with the broker
    in its ISR loses it there and, where it led, gets a leader from the rest of its ISR
    (brokerToRemove in generateLeaderAndIsrUpdates: never an acceptable leader)."""
    live = state.active_brokers() - {broker_id}
    records = []
    for topic, p, _ in _partitions(state):
        if broker_id in p.isr:
            record = change_record(state, topic, p, live)
            if record is not None:
                records.append(record)
    return records


def add_broker(state: ControllerState, broker_id: int) -> list[PartitionChangeRecord]:
    """Unfenced: leaderless partitions elect a leader, the broker acceptable although
    the registrations still show it fenced (brokerToAdd in
    generateLeaderAndIsrUpdates)."""
    live = state.active_brokers() | {broker_id}
    records = []
    for topic, p, _ in _partitions(state):
        if p.leader == NO_LEADER:
            record = change_record(state, topic, p, live)
            if record is not None:
                records.append(record)
    return records


def leads_partitions(state: ControllerState, broker_id: int) -> bool:
    """BrokersToIsrs.hasLeaderships."""
    return any(p.leader == broker_id for _, p, _ in _partitions(state))
