"""CreatePartitions (key 37): grow a topic's partition count, with automatic or manual
replica placement, following Kafka's controller (ReplicationControlManager)."""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Any

from kernel.cluster import ClusterImage
from kernel.handlers.create_topics import (
    MAX_PARTITIONS_PER_BATCH,
    TOO_MANY_PARTITIONS,
    check_replicas,
)
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import RequestContext

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    authorize = ctx.authorize
    cluster_alter = authorize(ctx.session, "ALTER", "CLUSTER", CLUSTER_NAME)
    counts = Counter(t.name for t in request.topics)
    answered: dict[str, tuple[ErrorCode, str | None]] = {}
    if _added_partitions(request.topics, services.metadata.image) > MAX_PARTITIONS_PER_BATCH:
        # The same bound as CreateTopics (Kafka applies it since KAFKA-19673).
        answered = {n: (ErrorCode.policy_violation, TOO_MANY_PARTITIONS) for n in counts}
    for topic in request.topics:
        name = topic.name
        if name in answered:
            continue
        if counts[name] > 1:
            answered[name] = (ErrorCode.invalid_request, "Duplicate topic name.")
            continue
        if not (cluster_alter or authorize(ctx.session, "ALTER", "TOPIC", name)):
            answered[name] = (ErrorCode.topic_authorization_failed, None)
            continue
        try:
            assignments = _validate(ctx, topic, services.metadata.image)
            if not request.validate_only:
                await services.metadata.create_partitions(name, topic.count, assignments)
        except KafkaError as e:
            answered[name] = (e.error_code, e.message)
        else:
            answered[name] = (ErrorCode.none, None)
    await services.replicas.caught_up()  # new logs made off the loop exist now
    m = response_module(API_KEY, ctx.api_version)
    return make(
        m.CreatePartitionsResponse,
        throttle_time=datetime.timedelta(0),
        results=tuple(
            make(m.CreatePartitionsTopicResult, name=name, error_code=error,
                 error_message=message)
            for name, (error, message) in answered.items()
        ),
    )


def _added_partitions(topics: Any, image: ClusterImage) -> int:
    total = 0
    for topic in topics:
        current = image.topics.get(topic.name)
        if current is not None:
            total += max(0, topic.count - len(current.partitions))
    return total


def _validate(ctx: RequestContext, topic: Any,
              image: ClusterImage) -> list[tuple[int, ...]] | None:
    current = image.topics.get(topic.name)
    if current is None:
        # Kafka's controller says no more (UnknownTopicOrPartitionException()).
        raise KafkaError(ErrorCode.unknown_topic_or_partition)
    have = len(current.partitions)
    if topic.count == have:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {have} partition(s).")
    if topic.count < have:
        raise KafkaError(ErrorCode.invalid_partitions,
                         f"The topic {topic.name} currently has {have} partition(s); "
                         f"{topic.count} would not be an increase.")
    additional = topic.count - have
    if topic.assignments is not None and len(topic.assignments) != additional:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"Attempted to add {additional} additional partition(s), but only "
                         f"{len(topic.assignments)} assignment(s) were specified.")
    ctx.mutation_quota.record(additional)  # KIP-599, where Kafka's controller takes it
    if topic.assignments is None:
        return None
    # New partitions keep the topic's replication factor, taken from its partition 0.
    replication = len(current.partitions[min(current.partitions)].replicas)
    assignments = []
    for a in topic.assignments:
        replicas = tuple(int(b) for b in a.broker_ids)
        check_replicas(replicas, image, replication)
        assignments.append(replicas)
    return assignments
