"""OffsetCommit (key 8): v2-9 (v10 names topics by id; not served yet, so clients stay
on v9). Partitions the client may not read, or that do not exist, are answered here
and never reach the shard: nothing is committed for them."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_commit.v9.response import OffsetCommitResponse

from kernel.api.errors import KafkaError
from kernel.api.handlers import RequestContext
from kernel.api.protocol import make, response_module
from plugins.coordinator.service import GroupCoordinatorService
from plugins.coordinator.versions import to_version

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9

TopicPartition = tuple[str, int]


async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    errors: dict[TopicPartition, ErrorCode] = {}
    if not service.authorize(ctx, "READ", "GROUP", request.group_id):
        for topic in request.topics:
            for p in topic.partitions:
                errors[(topic.name, p.partition_index)] = ErrorCode.group_authorization_failed
        return _respond(m, request, errors)
    image = ctx.services.metadata.image
    accepted: list[OffsetCommitRequestTopic] = []
    for topic in request.topics:
        if not service.authorize(ctx, "READ", "TOPIC", topic.name):
            refusal: ErrorCode | None = ErrorCode.topic_authorization_failed
        else:
            refusal = None
        known = image.topic(topic.name)
        valid = []
        for p in topic.partitions:
            if refusal is not None:
                errors[(topic.name, p.partition_index)] = refusal
            elif known is None or p.partition_index not in known.partitions:
                errors[(topic.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                valid.append(p)
        if valid:
            accepted.append(OffsetCommitRequestTopic(name=topic.name, partitions=tuple(
                to_version(p, OffsetCommitRequestPartition) for p in valid
            )))
    if accepted:
        committing = OffsetCommitRequest(
            group_id=request.group_id,
            generation_id_or_member_epoch=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            topics=tuple(accepted),
        )
        retention_ms = -1
        retention = getattr(request, "retention_time", None)
        if retention is not None and retention >= datetime.timedelta(0):
            retention_ms = retention // datetime.timedelta(milliseconds=1)
        shard_ctx = service.shard_context(ctx)
        try:
            response: OffsetCommitResponse = await service.write(
                committing.group_id,
                lambda shard, _reply_to: shard.commit_offsets(
                    shard_ctx, committing, retention_time_ms=retention_ms),
            )
        except KafkaError as e:
            error = service.error_code(e, offset_commit=True)
            for topic in accepted:
                for p in topic.partitions:
                    errors[(topic.name, p.partition_index)] = error
        else:
            committed = 0
            for t in response.topics:
                for rp in t.partitions:
                    errors[(t.name, rp.partition_index)] = rp.error_code
                    committed += rp.error_code == ErrorCode.none
            service.metrics.offset_commits.inc(committed)
    service.metrics.offset_commit_requests.inc()
    return _respond(m, request, errors)


def _respond(m: Any, request: Any, errors: dict[TopicPartition, ErrorCode]) -> Any:
    """In the request's order, as Kafka answers."""
    topics = tuple(
        make(m.OffsetCommitResponseTopic, name=topic.name, partitions=tuple(
            make(m.OffsetCommitResponsePartition, partition_index=p.partition_index,
                 error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions
        ))
        for topic in request.topics
    )
    return make(m.OffsetCommitResponse, throttle_time=datetime.timedelta(0), topics=topics)
