"""ElectLeaders (key 43): preferred or unclean leader elections (KIP-460) through the
metadata backend's controller, answered per partition once the image shows each new
leader, with Kafka's errors: ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT. A null
topic list asks for every partition; as Kafka's KRaft controller, those already led by
the wanted replica are then left out of the answer."""

from __future__ import annotations

import datetime
from typing import Any

from kernel.cluster import ElectionType, PartitionOutcome, TopicPartition
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import RequestContext

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    raw_type = getattr(request, "election_type", ElectionType.PREFERRED)  # v0: preferred
    try:
        election_type = ElectionType(raw_type)
    except ValueError:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Unknown election type {raw_type}") from None
    image = ctx.services.metadata.image
    requested: list[TopicPartition] = []
    every = request.topic_partitions is None
    if every:
        requested = [(t.name, p) for t in image.topics.values() for p in sorted(t.partitions)]
    else:
        requested = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    top = ErrorCode.none
    outcomes: dict[TopicPartition, PartitionOutcome]
    if not ctx.authorize(ctx.session, "ALTER", "CLUSTER", CLUSTER_NAME):
        top = ErrorCode.cluster_authorization_failed
        requested = [] if every else requested
        # As Kafka's error response: the error and its message on every partition.
        outcomes = dict.fromkeys(requested, PartitionOutcome(
            top, "ALTER on the cluster is needed to elect leaders."))
    else:
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        outcomes = await ctx.services.metadata.elect_leaders(
            election_type, requested, timeout_ms)
    by_topic: dict[str, list[tuple[int, PartitionOutcome]]] = {}
    if every:
        by_topic = {name: [] for name in image.topics} if top == ErrorCode.none else {}
    for tp in requested:
        outcome = outcomes.get(tp, PartitionOutcome(ErrorCode.unknown_server_error))
        if every and outcome.error_code == ErrorCode.election_not_needed:
            continue
        by_topic.setdefault(tp[0], []).append((tp[1], outcome))
    m = response_module(API_KEY, ctx.api_version)
    return make(
        m.ElectLeadersResponse,
        throttle_time=datetime.timedelta(0),
        error_code=top,
        replica_election_results=tuple(
            make(m.ReplicaElectionResult, topic=topic, partition_result=tuple(
                make(m.PartitionResult, partition_id=partition, error_code=o.error_code,
                     error_message=o.message)
                for partition, o in results))
            for topic, results in by_topic.items()),
    )
