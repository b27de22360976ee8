"""OffsetFetch (key 9): v1-7 ask for one group, v8+ for several (KIP-709); v10 names
topics by id and is not served yet. Topics the client may not describe are refused per
partition when named, and left out when all topics are asked for."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.offset_fetch.v9.response import (
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopics,
)

from kernel.protocol.build import make, response_module
from kernel.protocol.errors import KafkaError
from kernel.requests import RequestContext
from plugins.coordinator.service import GroupCoordinatorService
from plugins.coordinator.versions import to_version

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9

NO_OFFSET = -1


async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    require_stable = getattr(request, "require_stable", False)
    if ctx.api_version >= 8:
        groups = await asyncio.gather(*(
            _fetch(service, ctx, g.group_id, g.topics, require_stable) for g in request.groups
        ))
        return make(m.OffsetFetchResponse, throttle_time=datetime.timedelta(0),
                    groups=tuple(to_version(g, m.OffsetFetchResponseGroup) for g in groups))
    group = await _fetch(service, ctx, request.group_id, request.topics, require_stable)
    topics = group.topics
    if ctx.api_version < 2 and group.error_code != ErrorCode.none:
        # v0-1 have no group-level error: every requested partition carries it.
        topics = tuple(_refused(t.name, t.partition_indexes, group.error_code)
                       for t in request.topics or ())
    return make(m.OffsetFetchResponse, throttle_time=datetime.timedelta(0),
                topics=tuple(to_version(t, m.OffsetFetchResponseTopic) for t in topics),
                error_code=group.error_code)


async def _fetch(service: GroupCoordinatorService, ctx: RequestContext, group_id: str,
                 topics: Sequence[Any] | None, require_stable: bool) -> OffsetFetchResponseGroup:
    if not service.authorize(ctx, "DESCRIBE", "GROUP", group_id):
        return _group_error(group_id, ErrorCode.group_authorization_failed)
    refused: list[OffsetFetchResponseTopics] = []
    wanted: tuple[OffsetFetchRequestTopics, ...] | None = None
    if topics is not None:
        allowed = []
        for t in topics:
            if service.authorize(ctx, "DESCRIBE", "TOPIC", t.name):
                allowed.append(OffsetFetchRequestTopics(
                    name=t.name, partition_indexes=tuple(t.partition_indexes)))
            else:
                refused.append(_refused(t.name, t.partition_indexes,
                                        ErrorCode.topic_authorization_failed))
        wanted = tuple(allowed)
    fetched: tuple[OffsetFetchResponseTopics, ...] = ()
    if wanted is None or wanted:
        fetching = OffsetFetchRequestGroup(group_id=group_id, member_id=None, member_epoch=-1,
                                           topics=wanted)
        shard_ctx = service.shard_context(ctx)
        try:
            group: OffsetFetchResponseGroup = await service.write(
                group_id, lambda shard, _reply_to: shard.fetch_offsets(
                    shard_ctx, fetching, require_stable=require_stable),
            )
        except KafkaError as e:
            return _group_error(group_id, service.error_code(e))
        if group.error_code != ErrorCode.none:
            return group
        fetched = group.topics
        if wanted is None:
            fetched = tuple(t for t in fetched
                            if service.authorize(ctx, "DESCRIBE", "TOPIC", t.name))
    return OffsetFetchResponseGroup(group_id=group_id, topics=fetched + tuple(refused),
                                    error_code=ErrorCode.none)


def _group_error(group_id: str, error: ErrorCode) -> OffsetFetchResponseGroup:
    return OffsetFetchResponseGroup(group_id=group_id, topics=(), error_code=error)


def _refused(name: str, partitions: Sequence[int], error: ErrorCode) -> OffsetFetchResponseTopics:
    return OffsetFetchResponseTopics(name=name, partitions=tuple(
        OffsetFetchResponsePartitions(partition_index=p, committed_offset=NO_OFFSET,
                                      committed_leader_epoch=-1, metadata="", error_code=error)
        for p in partitions
    ))
