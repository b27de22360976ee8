"""AlterPartitionReassignments (key 45): start, replace or cancel (null replicas)
partition reassignments (KIP-455) through the metadata backend; v1's
allow_replication_factor_change=false refuses a target of another size (KIP-860).
Needs ALTER on the cluster."""

from __future__ import annotations

import datetime
from typing import Any

from kernel.cluster import PartitionOutcome, TopicPartition
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.replication_control import reassignment
from kernel.requests import RequestContext

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    wanted: dict[TopicPartition, tuple[int, ...] | None] = {}
    for topic in request.topics:
        for p in topic.partitions:
            wanted[(topic.name, p.partition_index)] = (
                None if p.replicas is None else tuple(int(b) for b in p.replicas))
    top, message = ErrorCode.none, None
    outcomes: dict[TopicPartition, PartitionOutcome] = {}
    if not ctx.authorize(ctx.session, "ALTER", "CLUSTER", CLUSTER_NAME):
        # As Kafka's error response: the error and its message at the top and on every
        # partition.
        top = ErrorCode.cluster_authorization_failed
        message = "ALTER on the cluster is needed to reassign partitions."
        outcomes = dict.fromkeys(wanted, PartitionOutcome(top, message))
    else:
        image = ctx.services.metadata.image
        if not getattr(request, "allow_replication_factor_change", True):
            for tp, target in list(wanted.items()):
                state = image.partition(*tp)
                if state is None or target is None \
                        or len(target) == len(state.original_replicas):
                    continue
                try:  # as Kafka's controller, a target must be valid before its size counts
                    reassignment(state, target, image.brokers)
                except KafkaError:
                    continue  # the backend answers it
                outcomes[tp] = PartitionOutcome(
                    ErrorCode.invalid_replication_factor,
                    "The replication factor is changed from "
                    f"{len(state.original_replicas)} to {len(target)}")
                del wanted[tp]
        if wanted:
            outcomes.update(await ctx.services.metadata.alter_partition_reassignments(wanted))
    by_topic: dict[str, list[tuple[int, PartitionOutcome]]] = {}
    for (topic, partition), outcome in outcomes.items():
        by_topic.setdefault(topic, []).append((partition, outcome))
    m = response_module(API_KEY, ctx.api_version)
    return make(
        m.AlterPartitionReassignmentsResponse,
        throttle_time=datetime.timedelta(0),
        allow_replication_factor_change=getattr(
            request, "allow_replication_factor_change", True),
        error_code=top,
        error_message=message,
        responses=tuple(
            make(m.ReassignableTopicResponse, name=topic, partitions=tuple(
                make(m.ReassignablePartitionResponse, partition_index=partition,
                     error_code=o.error_code, error_message=o.message)
                for partition, o in sorted(results)))
            for topic, results in by_topic.items()),
    )
