"""AlterPartition v2-3 (ReplicationControlManager.alterPartition): a leader's ISR
change, checked with ``kernel.replication_control.check_alter_partition`` plus the
controller's own rules (the sender's broker epoch, each new ISR member registered,
unfenced, not shutting down and, in v3, at the epoch the leader saw)."""

from __future__ import annotations

import logging

from kio.schema.alter_partition.v2 import response as v2
from kio.schema.alter_partition.v3 import response as v3
from kio.static.primitive import i8, i32

from kernel.api.cluster import PartitionState
from kernel.api.controller import check_alter_partition
from kernel.api.errors import ErrorCode, KafkaError

from ..records.schema import PartitionChangeRecord
from .cluster_control import check_broker_epoch
from .messages import NO_THROTTLE, AnyRequest
from .state import ControllerResult, ControllerState

logger = logging.getLogger(__name__)
_RESPONSES = {2: v2, 3: v3}
RECOVERED, RECOVERING = 0, 1


def alter_partition(state: ControllerState, request: AnyRequest) -> ControllerResult:
    version = request.__version__
    m = _RESPONSES[version]
    try:
        check_broker_epoch(state, request.broker_id, request.broker_epoch)
    except KafkaError as e:
        return ControllerResult((), m.AlterPartitionResponse(
            throttle_time=NO_THROTTLE, error_code=e.error_code, topics=()))
    records: list[PartitionChangeRecord] = []
    topics = []
    for t in request.topics:
        topic = state.image.topics_by_id.get(t.topic_id) if t.topic_id else None
        parts = []
        for p in t.partitions:
            if topic is None:
                parts.append(_error(m, p.partition_index, ErrorCode.unknown_topic_id))
                continue
            if version >= 3:
                isr = [(b.broker_id, b.broker_epoch) for b in p.new_isr_with_epochs]
            else:
                isr = [(b, -1) for b in p.new_isr]
            try:
                current = _validate(state, request.broker_id, topic.name, p, isr)
            except KafkaError as e:
                logger.info("AlterPartition of %s-%d from broker %d refused: %s", topic.name,
                            p.partition_index, request.broker_id, e.message)
                parts.append(_error(m, p.partition_index, e.error_code))
                continue
            new_isr = tuple(b for b, _ in isr)
            record = PartitionChangeRecord(
                partition_id=p.partition_index, topic_id=topic.topic_id,
                isr=None if new_isr == current.isr else new_isr,
                leader_recovery_state=(p.leader_recovery_state if p.leader_recovery_state
                                       != _recovery_state(current) else -1))
            changed = record.isr is not None or record.leader_recovery_state != -1
            if changed:
                records.append(record)
            parts.append(m.PartitionData(
                partition_index=p.partition_index, error_code=ErrorCode.none,
                leader_id=current.leader, leader_epoch=current.leader_epoch, isr=new_isr,
                leader_recovery_state=i8(p.leader_recovery_state),
                partition_epoch=i32(current.partition_epoch + (1 if changed else 0))))
        topics.append(m.TopicData(topic_id=t.topic_id, partitions=tuple(parts)))
    return ControllerResult(tuple(records), m.AlterPartitionResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=tuple(topics)))


def _recovery_state(p: PartitionState) -> int:
    # The kernel's PartitionState has no recovery state yet: every partition RECOVERED.
    return RECOVERED


def _validate(state: ControllerState, sender: int, topic: str, p: AnyRequest,
              isr: list[tuple[int, int]]) -> PartitionState:
    current = state.image.partition(topic, p.partition_index)
    if current is not None and (p.leader_epoch > current.leader_epoch
                                or p.partition_epoch > current.partition_epoch):
        # validateAlterPartitionData: newer epochs than ours mean we are not (or no
        # longer) the controller that wrote them.
        raise KafkaError(ErrorCode.not_controller, "The partition's epochs are newer than "
                         "this controller's.")
    if current is not None and p.leader_epoch == current.leader_epoch \
            and sender != current.leader:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Broker {sender} is not the leader {current.leader} of "
                         f"{topic}-{p.partition_index}.")
    current = check_alter_partition(state.image, topic, p.partition_index,
                                    tuple(b for b, _ in isr), p.leader_epoch,
                                    p.partition_epoch)
    if p.leader_recovery_state == RECOVERING and len(isr) > 1:
        raise KafkaError(ErrorCode.invalid_request, "A RECOVERING leader must have an ISR "
                         "of itself alone.")
    if _recovery_state(current) == RECOVERED and p.leader_recovery_state == RECOVERING:
        raise KafkaError(ErrorCode.invalid_request, "A RECOVERED partition cannot go back "
                         "to RECOVERING.")
    # ineligibleReplicasForIsr
    for broker_id, epoch in isr:
        r = state.registrations.get(broker_id)
        why = ("not registered" if r is None else "shutting down" if r.in_controlled_shutdown
               else "fenced" if r.fenced
               else f"broker epoch mismatch: requested={epoch} VS expected={r.epoch}"
               if epoch != -1 and epoch != r.epoch else None)
        if why is not None:
            raise KafkaError(ErrorCode.ineligible_replica,
                             f"ISR member {broker_id} of {topic}-{p.partition_index} is "
                             f"ineligible: {why}")
    return current


def _error(m: AnyRequest, partition: int, code: ErrorCode) -> AnyRequest:
    return m.PartitionData(partition_index=partition, error_code=code, leader_id=-1,
                           leader_epoch=i32(0), partition_epoch=i32(0))
