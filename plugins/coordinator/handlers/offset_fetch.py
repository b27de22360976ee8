"""OffsetFetch (key 9): v1-7 ask for one group, v8+ for several (KIP-709); v10 names
topics by id and is not served yet. Topics the client may not describe are refused per
partition when named, and left out when all topics are asked for."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator, Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.offset_fetch.v9.response import (
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopics,
)

from kernel.api.errors import KafkaError
from kernel.api.handlers import BIG_REQUEST_ENTRIES, RequestContext, in_slices
from kernel.api.protocol import make, response_module
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
                    groups=await _to_version(groups, m.OffsetFetchResponseGroup))
    group = await _fetch(service, ctx, request.group_id, request.topics, require_stable)
    topics = group.topics
    if ctx.api_version < 2 and group.error_code != ErrorCode.none:
        # v0-1 have no group-level error: every requested partition carries it.
        topics = tuple(_refused(t.name, t.partition_indexes, group.error_code)
                       for t in request.topics or ())
    return make(m.OffsetFetchResponse, throttle_time=datetime.timedelta(0),
                topics=await _to_version(topics, m.OffsetFetchResponseTopic),
                error_code=group.error_code)


async def _to_version(entities: Sequence[Any], target: type[Any]) -> tuple[Any, ...]:
    """The shard's answers in the client's version. Thousands of partitions are moved in
    a thread: ``to_version`` reads nothing but the immutable entities."""
    if _partitions(entities) <= BIG_REQUEST_ENTRIES:
        return tuple(to_version(e, target) for e in entities)
    return await asyncio.get_running_loop().run_in_executor(
        None, lambda: tuple(to_version(e, target) for e in entities))


def _partitions(entities: Sequence[Any]) -> int:
    """How many partitions groups or topics hold."""
    return sum(len(t.partitions) for e in entities
               for t in (e.topics if hasattr(e, "topics") else (e,)))


async def _fetch(service: GroupCoordinatorService, ctx: RequestContext, group_id: str,
                 topics: Sequence[Any] | None, require_stable: bool) -> OffsetFetchResponseGroup:
    if not service.authorize(ctx, "DESCRIBE", "GROUP", group_id):
        return _group_error(group_id, ErrorCode.group_authorization_failed)
    refused: list[OffsetFetchResponseTopics] = []
    wanted: tuple[OffsetFetchRequestTopics, ...] | None = None
    if topics is not None:
        allowed: list[OffsetFetchRequestTopics] = []
        checking = _authorized(service, ctx, topics, allowed, refused)
        if len(topics) > BIG_REQUEST_ENTRIES:
            await in_slices(checking)
        else:
            for _ in checking:
                pass
        wanted = tuple(allowed)
    fetched: tuple[OffsetFetchResponseTopics, ...] = ()
    if wanted is None or wanted:
        shard_ctx = service.shard_context(ctx)
        topics_by_name: dict[str, list[OffsetFetchResponsePartitions]] = {}
        # Thousands of partitions are read a slice at a time, the loop given back between
        # two (the shard answers one slice in one go).
        for part in _slices(wanted):
            fetching = OffsetFetchRequestGroup(group_id=group_id, member_id=None,
                                               member_epoch=-1, topics=part)
            try:
                group: OffsetFetchResponseGroup = await service.write(
                    group_id, lambda shard, _reply_to, fetching=fetching: shard.fetch_offsets(
                        shard_ctx, fetching, require_stable=require_stable),
                )
            except KafkaError as e:
                return _group_error(group_id, service.error_code(e))
            if group.error_code != ErrorCode.none:
                return group
            if part is wanted:
                fetched = group.topics
                break
            for t in group.topics:
                topics_by_name.setdefault(t.name, []).extend(t.partitions)
            await asyncio.sleep(0)  # a read's answer may be ready at once: no wait above
        else:
            fetched = tuple(OffsetFetchResponseTopics(name=name, partitions=tuple(rows))
                            for name, rows in topics_by_name.items())
        if wanted is None:
            fetched = tuple(t for t in fetched
                            if service.authorize(ctx, "DESCRIBE", "TOPIC", t.name))
    return OffsetFetchResponseGroup(group_id=group_id, topics=fetched + tuple(refused),
                                    error_code=ErrorCode.none)


def _authorized(service: GroupCoordinatorService, ctx: RequestContext, topics: Sequence[Any],
                allowed: list[OffsetFetchRequestTopics],
                refused: list[OffsetFetchResponseTopics]) -> Iterator[None]:
    """The topics the client may describe go to ``allowed``, the others to ``refused``."""
    for t in topics:
        if service.authorize(ctx, "DESCRIBE", "TOPIC", t.name):
            allowed.append(OffsetFetchRequestTopics(
                name=t.name, partition_indexes=tuple(t.partition_indexes)))
        else:
            refused.append(_refused(t.name, t.partition_indexes,
                                    ErrorCode.topic_authorization_failed))
        yield None


def _slices(wanted: tuple[OffsetFetchRequestTopics, ...] | None,
            ) -> Iterator[tuple[OffsetFetchRequestTopics, ...] | None]:
    """``wanted`` itself when it is small or None (all topics), else pieces of at most
    ``BIG_REQUEST_ENTRIES`` partitions, in order."""
    if wanted is None or sum(len(t.partition_indexes) for t in wanted) <= BIG_REQUEST_ENTRIES:
        yield wanted
        return
    piece: list[OffsetFetchRequestTopics] = []
    size = 0
    for t in wanted:
        indexes = t.partition_indexes
        for at in range(0, max(len(indexes), 1), BIG_REQUEST_ENTRIES):
            chunk = indexes[at:at + BIG_REQUEST_ENTRIES]
            piece.append(OffsetFetchRequestTopics(name=t.name, partition_indexes=chunk))
            size += max(len(chunk), 1)
            if size >= BIG_REQUEST_ENTRIES:
                yield tuple(piece)
                piece, size = [], 0
    if piece:
        yield tuple(piece)


def _group_error(group_id: str, error: ErrorCode) -> OffsetFetchResponseGroup:
    return OffsetFetchResponseGroup(group_id=group_id, topics=(), error_code=error)


def _refused(name: str, partitions: Sequence[int], error: ErrorCode) -> OffsetFetchResponseTopics:
    return OffsetFetchResponseTopics(name=name, partitions=tuple(
        OffsetFetchResponsePartitions(partition_index=p, committed_offset=NO_OFFSET,
                                      committed_leader_epoch=-1, metadata="", error_code=error)
        for p in partitions
    ))
