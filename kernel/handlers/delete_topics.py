"""DeleteTopics (key 20): by name, and (v6) by topic id, as Kafka's controller does.

Like Kafka, internal topics get no special treatment here: a principal allowed to
delete them can (the refusal users see comes from Kafka's command-line tool, not the
broker). With delete.topic.enable=false every topic fails: INVALID_REQUEST before v3,
TOPIC_DELETION_DISABLED from v3.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import RequestContext
from kernel.slices import BIG_REQUEST_ENTRIES, in_slices

API_KEY = 20
# v0 is not in kio (Kafka 4 removed it); v1-6 are fully served.
MIN_VERSION = 1
MAX_VERSION = 6

ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class _Result:
    name: str | None
    topic_id: uuid.UUID
    error: ErrorCode = ErrorCode.none
    message: str | None = None


def _requested(request: Any, version: int) -> Iterator[tuple[str | None, uuid.UUID]]:
    if version >= 6:
        return ((t.name, t.topic_id or ZERO_UUID) for t in request.topics)
    return ((name, ZERO_UUID) for name in request.topic_names)


def _counted(requested: list[tuple[str | None, uuid.UUID]],
             counts: dict[tuple[str | None, uuid.UUID], int],
             names_seen: set[str]) -> Iterator[None]:
    """Counts each (name, id) requested; the names requested alone go to ``names_seen``."""
    for key in requested:
        counts[key] = counts.get(key, 0) + 1
        name, topic_id = key
        if name is not None and topic_id == ZERO_UUID:
            names_seen.add(name)
        yield None


async def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    # Thousands of topics are checked, and answered, in slices that give the loop back.
    big = len(request.topics if ctx.api_version >= 6 else request.topic_names) > (
        BIG_REQUEST_ENTRIES)
    requesting = _requested(request, ctx.api_version)
    requested = await in_slices(requesting) if big else list(requesting)
    if not services.config.delete_topic_enable:
        error = (ErrorCode.invalid_request if ctx.api_version < 3
                 else ErrorCode.topic_deletion_disabled)
        results = [_Result(name, tid, error, "Topic deletion is disabled.")
                   for name, tid in requested]
        return _respond(ctx, results)
    image = services.metadata.image
    authorize = ctx.authorize
    cluster_delete = authorize(ctx.session, "DELETE", "CLUSTER", CLUSTER_NAME)

    def describable(name: str) -> bool:
        return cluster_delete or authorize(ctx.session, "DESCRIBE", "TOPIC", name)

    def deletable(name: str) -> bool:
        return cluster_delete or authorize(ctx.session, "DELETE", "TOPIC", name)

    to_delete: dict[str, _Result] = {}
    names_seen: set[str] = set()
    counts: dict[tuple[str | None, uuid.UUID], int] = {}
    counting = _counted(requested, counts, names_seen)
    if big:
        await in_slices(counting)
    else:
        for _ in counting:
            pass

    def checked() -> Iterator[_Result]:
        """Each distinct topic's result; those to delete go to ``to_delete``."""
        for (name, topic_id), count in counts.items():
            result = _Result(name, topic_id)
            if name is None and topic_id == ZERO_UUID:
                result.error = ErrorCode.invalid_request
                result.message = "Neither topic name nor id were specified."
            elif name is not None and topic_id != ZERO_UUID:
                result.error = ErrorCode.invalid_request
                result.message = "You may not specify both topic name and topic id."
            elif count > 1:
                result.error = ErrorCode.invalid_request
                result.message = ("Duplicate topic name." if name is not None
                                  else "Duplicate topic id.")
            elif name is None:
                topic = image.topics_by_id.get(topic_id)
                if topic is None:
                    result.error = ErrorCode.unknown_topic_id
                    result.message = "This server does not host this topic ID."
                elif not deletable(topic.name):
                    # Naming the topic only to those who may see it keeps ids from
                    # leaking names.
                    result.name = topic.name if describable(topic.name) else None
                    result.error = ErrorCode.topic_authorization_failed
                elif topic.name in names_seen:
                    result.name = topic.name
                    result.error = ErrorCode.invalid_request
                    result.message = ("The provided topic name maps to an ID that was "
                                      "already supplied.")
                else:
                    result.name = topic.name
                    _take(ctx, result, len(topic.partitions), to_delete)
            else:
                topic = image.topics.get(name)
                if not describable(name):
                    result.error = ErrorCode.topic_authorization_failed
                elif topic is None:
                    result.error = ErrorCode.unknown_topic_or_partition
                    result.message = "This server does not host this topic-partition."
                elif not deletable(name):
                    result.error = ErrorCode.topic_authorization_failed
                else:
                    result.topic_id = topic.topic_id
                    _take(ctx, result, len(topic.partitions), to_delete)
            yield result

    results = await in_slices(checked()) if big else list(checked())
    await _delete(ctx, to_delete)
    if big:
        entries = await in_slices(_entries(ctx, results))
        ctx.big_answer = True
        return _response(ctx, entries)
    return _respond(ctx, results)


def _take(ctx: RequestContext, result: _Result, partitions: int,
          to_delete: dict[str, _Result]) -> None:
    """The topic goes to the deletion unless the client's controller mutation quota
    (KIP-599) refuses its partitions."""
    try:
        ctx.mutation_quota.record(partitions)
    except KafkaError as e:
        result.error, result.message = e.error_code, e.message
    else:
        assert result.name is not None
        to_delete[result.name] = result


async def _delete(ctx: RequestContext, to_delete: dict[str, _Result]) -> None:
    if not to_delete:
        return
    backend = ctx.services.metadata
    try:
        await backend.delete_topics(list(to_delete))
    except KafkaError:
        # One of them went away meanwhile: answer each topic on its own.
        for name, result in to_delete.items():
            try:
                await backend.delete_topics([name])
            except KafkaError as e:
                result.error, result.message = e.error_code, e.message


def _respond(ctx: RequestContext, results: list[_Result]) -> Any:
    return _response(ctx, list(_entries(ctx, results)))


def _entries(ctx: RequestContext, results: list[_Result]) -> Iterator[Any]:
    m = response_module(API_KEY, ctx.api_version)
    by_name = ctx.api_version < 6
    for r in results:
        yield make(
            m.DeletableTopicResult,
            # Before v6 the name is not nullable and every entry was requested by name.
            name=(r.name or "") if by_name else r.name,
            topic_id=r.topic_id,
            error_code=r.error,
            error_message=r.message,
        )


def _response(ctx: RequestContext, entries: list[Any]) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    return make(m.DeleteTopicsResponse, throttle_time=datetime.timedelta(0),
                responses=tuple(entries))
