"""OffsetDelete (key 47): v0. Partitions the client may not read or that do not exist
are refused here; the shard decides for the rest (GROUP_SUBSCRIBED_TO_TOPIC,
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_delete.v0.response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

from kernel.api.errors import KafkaError
from kernel.api.handlers import RequestContext
from plugins.coordinator.service import GroupCoordinatorService

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(service: GroupCoordinatorService, ctx: RequestContext,
                 request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    if not service.authorize(ctx, "DELETE", "GROUP", request.group_id):
        return _top_level(ErrorCode.group_authorization_failed)
    image = ctx.services.metadata.image
    errors: dict[tuple[str, int], ErrorCode] = {}
    accepted: list[OffsetDeleteRequestTopic] = []
    for topic in request.topics:
        allowed = service.authorize(ctx, "READ", "TOPIC", topic.name)
        known = image.topic(topic.name)
        valid: list[OffsetDeleteRequestPartition] = []
        for p in topic.partitions:
            if not allowed:
                errors[(topic.name, p.partition_index)] = ErrorCode.topic_authorization_failed
            elif known is None or p.partition_index not in known.partitions:
                errors[(topic.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                valid.append(p)
        if valid:
            accepted.append(OffsetDeleteRequestTopic(name=topic.name, partitions=tuple(valid)))
    deleting = OffsetDeleteRequest(group_id=request.group_id, topics=tuple(accepted))
    shard_ctx = service.shard_context(ctx)
    try:
        response: OffsetDeleteResponse = await service.write(
            request.group_id,
            lambda shard, _reply_to: shard.delete_offsets(shard_ctx, deleting),
        )
    except KafkaError as e:
        return _top_level(service.error_code(e))
    if response.error_code != ErrorCode.none:
        return response
    for t in response.topics:
        for rp in t.partitions:
            errors[(t.name, rp.partition_index)] = rp.error_code
    return OffsetDeleteResponse(
        error_code=ErrorCode.none, throttle_time=datetime.timedelta(0), topics=tuple(
            OffsetDeleteResponseTopic(name=topic.name, partitions=tuple(
                OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                              error_code=errors[(topic.name, p.partition_index)])
                for p in topic.partitions
            ))
            for topic in request.topics
        ),
    )


def _top_level(error: ErrorCode) -> OffsetDeleteResponse:
    return OffsetDeleteResponse(error_code=error, throttle_time=datetime.timedelta(0), topics=())
