"""DescribeProducers (key 61): the producer state of partitions hosted here, as the
admin client's ``describeProducers`` and ``kafka-transactions describe-producers`` read
it (e.g. to find a hanging transaction): per producer id its epoch, last sequence, last
timestamp, coordinator epoch and the first offset of its open transaction.

As Kafka's ``handleDescribeProducersRequest``: a topic name that is not valid answers
INVALID_TOPIC_EXCEPTION, a topic the client may not READ TOPIC_AUTHORIZATION_FAILED, an
unknown topic UNKNOWN_TOPIC_OR_PARTITION; then any replica hosted here answers from its
log (Kafka's ``Partition.activeProducerState`` reads the local log, leader or not), a
partition of the topic that is not hosted here NOT_LEADER_OR_FOLLOWER, and one that does
not exist UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.cluster import topic_name_problem
from kernel.protocol.build import make, response_module
from kernel.requests import RequestContext

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    services = ctx.services
    image = services.metadata.image
    topics = []
    for topic in request.topics:
        name = topic.name
        error: ErrorCode | None = None
        message: str | None = None
        problem = topic_name_problem(name)
        if problem is not None:
            error, message = ErrorCode.invalid_topic_exception, problem
        elif not ctx.authorize(ctx.session, "READ", "TOPIC", name):
            error = ErrorCode.topic_authorization_failed
            message = "Topic authorization failed."
        elif image.topic(name) is None:
            # As Kafka, a topic's error carries a message; a partition's does not.
            error = ErrorCode.unknown_topic_or_partition
            message = "This server does not host this topic-partition."
        partitions = []
        for index in topic.partition_indexes:
            if error is not None:
                partitions.append(make(m.PartitionResponse, partition_index=index,
                                       error_code=error, error_message=message,
                                       active_producers=()))
                continue
            partitions.append(_partition(ctx, m, name, index))
        topics.append(make(m.TopicResponse, name=name, partitions=tuple(partitions)))
    for t in topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                services.metrics.error(p.error_code)
    return make(m.DescribeProducersResponse, throttle_time=datetime.timedelta(0),
                topics=tuple(topics))


def _partition(ctx: RequestContext, m: Any, topic: str, index: int) -> Any:
    services = ctx.services
    replica = services.replicas.get_partition(topic, index)
    if replica is None:
        exists = services.metadata.image.partition(topic, index) is not None
        return make(m.PartitionResponse, partition_index=index, active_producers=(),
                    error_code=ErrorCode.not_leader_or_follower if exists
                    else ErrorCode.unknown_topic_or_partition)
    producers = tuple(
        make(m.ProducerState, producer_id=entry.producer_id,
             producer_epoch=entry.producer_epoch, last_sequence=entry.last_seq,
             last_timestamp=entry.last_timestamp, coordinator_epoch=entry.coordinator_epoch,
             current_txn_start_offset=entry.current_txn_first_offset)
        for entry in replica.active_producers()
    )
    return make(m.PartitionResponse, partition_index=index, error_code=ErrorCode.none,
                active_producers=producers)
