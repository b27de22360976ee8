"""TxnOffsetCommit (key 28): a transactional producer commits a group's offsets inside
its transaction (``sendOffsetsToTransaction``). The records are written as the
producer's transactional batch and stay pending in the shard until the transaction
coordinator's marker commits or aborts them (WriteTxnMarkers).

Versions 0-4. Kafka 4.x also serves v5 (KIP-890 part 2: with transaction version 2 a
v5 commit adds the offsets partition to the transaction itself, verified with the
transaction coordinator), which needs the transaction coordinator's verification; it
is not advertised. Checks as Kafka's ``handleTxnOffsetCommitRequest``: WRITE on the
transactional id, READ on the group, READ on each topic, then partitions that exist.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.txn_offset_commit.v4.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.schema.txn_offset_commit.v4.response import TxnOffsetCommitResponse

from kernel.api.errors import KafkaError
from kernel.api.handlers import RequestContext
from kernel.api.protocol import make, response_module
from plugins.coordinator.service import OFFSETS_TOPIC, GroupCoordinatorService
from plugins.coordinator.versions import to_version

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4

TopicPartition = tuple[str, int]


async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    errors: dict[TopicPartition, ErrorCode] = {}

    def fail_all(error: ErrorCode) -> Any:
        for topic in request.topics:
            for p in topic.partitions:
                errors[(topic.name, p.partition_index)] = error
        return _respond(ctx, m, request, errors)

    if not service.authorize(ctx, "WRITE", "TRANSACTIONAL_ID", request.transactional_id):
        return fail_all(ErrorCode.transactional_id_authorization_failed)
    if not service.authorize(ctx, "READ", "GROUP", request.group_id):
        return fail_all(ErrorCode.group_authorization_failed)
    image = ctx.services.metadata.image
    accepted: list[TxnOffsetCommitRequestTopic] = []
    for topic in request.topics:
        allowed = service.authorize(ctx, "READ", "TOPIC", topic.name)
        known = image.topic(topic.name)
        valid = []
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not allowed:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif known is None or p.partition_index not in known.partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                valid.append(p)
        if valid:
            accepted.append(TxnOffsetCommitRequestTopic(name=topic.name, partitions=tuple(
                to_version(p, TxnOffsetCommitRequestPartition) for p in valid)))
    if accepted:
        committing = TxnOffsetCommitRequest(
            transactional_id=request.transactional_id, group_id=request.group_id,
            producer_id=request.producer_id, producer_epoch=request.producer_epoch,
            generation_id=getattr(request, "generation_id", -1),
            member_id=getattr(request, "member_id", ""),
            group_instance_id=getattr(request, "group_instance_id", None),
            topics=tuple(accepted),
        )
        shard_ctx = service.shard_context(ctx)
        try:
            if not request.group_id:
                # As Kafka's service, before the group's partition is looked up.
                raise KafkaError(ErrorCode.invalid_group_id, "empty group id")
            await _verify(service, ctx, request)
            response: TxnOffsetCommitResponse = await service.write(
                committing.group_id,
                lambda shard, _reply_to: shard.commit_transactional_offsets(
                    shard_ctx, committing),
            )
        except KafkaError as e:
            error = service.error_code(e)
            for topic in accepted:
                for p in topic.partitions:
                    errors[(topic.name, p.partition_index)] = error
        else:
            for t in response.topics:
                for rp in t.partitions:
                    errors[(t.name, rp.partition_index)] = rp.error_code
    return _respond(ctx, m, request, errors)


async def _verify(service: GroupCoordinatorService, ctx: RequestContext,
                  request: Any) -> None:
    """KIP-890 part 1, as Kafka's coordinator runtime before a transactional write: the
    transaction coordinator must have the group's offsets partition in the producer's
    transaction (AddOffsetsToTxn), else a late commit could open a transaction nobody
    ends."""
    verifier = ctx.services.coordinators.transaction_verifier()
    if verifier is None or not ctx.services.config.transaction_partition_verification_enable:
        return
    tp = (OFFSETS_TOPIC, service.partition_of(request.group_id))
    answer = await verifier(request.transactional_id, request.producer_id,
                            request.producer_epoch, [tp])
    error = answer.get(tp, ErrorCode.unknown_server_error)
    if error == ErrorCode.none:
        return
    # Kafka's AddPartitionsToTxnManager: what producers expect.
    if error == ErrorCode.producer_fenced:
        error = ErrorCode.invalid_producer_epoch
    elif error == ErrorCode.transaction_abortable and ctx.api_version < 4:
        error = ErrorCode.invalid_txn_state
    raise KafkaError(error, "the offsets partition is not in the transaction")


def _respond(ctx: RequestContext, m: Any, request: Any,
             errors: dict[TopicPartition, ErrorCode]) -> Any:
    """In the request's order. Producers before 2.0 (v0-1) may crash on
    COORDINATOR_LOAD_IN_PROGRESS; Kafka sends them COORDINATOR_NOT_AVAILABLE."""
    def error_of(tp: TopicPartition) -> ErrorCode:
        error = errors[tp]
        if ctx.api_version < 2 and error == ErrorCode.coordinator_load_in_progress:
            return ErrorCode.coordinator_not_available
        return error

    topics = tuple(
        make(m.TxnOffsetCommitResponseTopic, name=topic.name, partitions=tuple(
            make(m.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                 error_code=error_of((topic.name, p.partition_index)))
            for p in topic.partitions
        ))
        for topic in request.topics
    )
    return make(m.TxnOffsetCommitResponse, throttle_time=datetime.timedelta(0), topics=topics)
