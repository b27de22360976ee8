"""DescribeTopicPartitions (key 75, KIP-966): topics and their partitions from the
cluster image, sorted by name and paged by a cursor, as Kafka 4's AdminClient
describeTopics (kafka-topics --describe) asks for them. Kafkernel has no eligible leader
replicas, so ELR and last known ELR are empty lists, as Kafka reports them without
unclean-election candidates."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kernel.authorized_operations import OPS_NOT_REQUESTED, authorized_operations
from kernel.cluster import ClusterImage, is_internal_topic, topic_name_problem
from kernel.handlers.metadata import partition_fields
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode
from kernel.requests import RequestContext

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

ZERO_UUID = uuid.UUID(int=0)
# Kafka's max.request.partition.size.limit: the most partitions one answer holds.
MAX_PARTITIONS = 2000


def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    image = ctx.services.metadata.image
    authorize = ctx.authorize
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    requested = image.topics if fetch_all else {t.name for t in request.topics}
    names = sorted(n for n in requested if n >= cursor_topic)
    if cursor is not None and (
            (not fetch_all and cursor_topic not in names) or cursor.partition_index < 0):
        return _invalid_request(m, request)

    topics: list[Any] = []
    refused: list[Any] = []  # unauthorized topics are told so last, with no id
    next_cursor = None
    remaining = max(min(MAX_PARTITIONS, request.response_partition_limit), 1)
    for name in names:
        if not authorize(ctx.session, "DESCRIBE", "TOPIC", name):
            if not fetch_all:
                refused.append(_error_topic(m, name, ErrorCode.topic_authorization_failed,
                                            internal=False))
            continue
        if remaining == 0:
            # The previous topic was answered whole: go on from this one's start.
            next_cursor = make(m.Cursor, topic_name=name, partition_index=0)
            break
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        entry, resume_at = _topic(ctx, m, image, name, start, remaining)
        if entry is None:
            if not fetch_all:
                error = (ErrorCode.invalid_topic_exception if topic_name_problem(name)
                         else ErrorCode.unknown_topic_or_partition)
                # Kafka fills in the operations of every topic it looked up, found or not.
                topics.append(_error_topic(m, name, error, internal=is_internal_topic(name),
                                           operations=authorized_operations(ctx, "TOPIC", name)))
            continue
        topics.append(entry)
        if resume_at is not None:
            next_cursor = make(m.Cursor, topic_name=name, partition_index=resume_at)
            break
        remaining -= len(entry.partitions)
    return make(m.DescribeTopicPartitionsResponse, throttle_time=datetime.timedelta(0),
                topics=(*topics, *refused), next_cursor=next_cursor)


def _topic(ctx: RequestContext, m: Any, image: ClusterImage, name: str, start: int,
           limit: int) -> tuple[Any | None, int | None]:
    """The topic's partitions from ``start``, at most ``limit`` of them, and the partition
    to resume at when some are left (None when none are)."""
    topic = image.topics.get(name)
    if topic is None:
        return None, None
    count = len(topic.partitions)
    end = min(count, start + limit)
    partitions = tuple(
        make(m.DescribeTopicPartitionsResponsePartition, **partition_fields(p),
             eligible_leader_replicas=(), last_known_elr=())
        for p in (topic.partitions[i] for i in range(start, end) if i in topic.partitions)
    )
    entry = make(
        m.DescribeTopicPartitionsResponseTopic,
        error_code=ErrorCode.none,
        name=name,
        topic_id=topic.topic_id,
        is_internal=is_internal_topic(name),
        partitions=partitions,
        topic_authorized_operations=authorized_operations(ctx, "TOPIC", name),
    )
    return entry, (end if end < count else None)


def _error_topic(m: Any, name: str, error: ErrorCode, *, internal: bool,
                 operations: int = OPS_NOT_REQUESTED) -> Any:
    return make(m.DescribeTopicPartitionsResponseTopic, error_code=error, name=name,
                topic_id=ZERO_UUID, is_internal=internal, partitions=(),
                topic_authorized_operations=operations)


def _invalid_request(m: Any, request: Any) -> Any:
    """Kafka's answer to a cursor outside the request: every requested topic with
    INVALID_REQUEST."""
    return make(
        m.DescribeTopicPartitionsResponse, throttle_time=datetime.timedelta(0),
        topics=tuple(_error_topic(m, t.name, ErrorCode.invalid_request, internal=False)
                     for t in request.topics),
        next_cursor=None,
    )

