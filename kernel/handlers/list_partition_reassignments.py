"""ListPartitionReassignments (key 46): the reassignments in progress (KIP-455), as
the cluster image's partitions carry them: every one for a null topic list, else those
of the named partitions (unknown ones are left out, as Kafka's controller does). Needs
DESCRIBE on the cluster."""

from __future__ import annotations

import datetime
from typing import Any

from kernel.cluster import PartitionState
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode
from kernel.requests import RequestContext

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorize(ctx.session, "DESCRIBE", "CLUSTER", CLUSTER_NAME):
        return make(m.ListPartitionReassignmentsResponse,
                    throttle_time=datetime.timedelta(0),
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="DESCRIBE on the cluster is needed to list reassignments.",
                    topics=())
    image = ctx.services.metadata.image
    listed: dict[str, list[PartitionState]] = {}
    if request.topics is None:
        for topic in image.topics.values():
            for state in topic.partitions.values():
                if state.reassigning:
                    listed.setdefault(topic.name, []).append(state)
    else:
        for wanted in request.topics:
            topic = image.topics.get(wanted.name)
            for index in wanted.partition_indexes if topic is not None else ():
                state = topic.partitions.get(index) if topic is not None else None
                if state is not None and state.reassigning:
                    listed.setdefault(wanted.name, []).append(state)
    return make(
        m.ListPartitionReassignmentsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(
            make(m.OngoingTopicReassignment, name=name, partitions=tuple(
                make(m.OngoingPartitionReassignment, partition_index=s.partition,
                     replicas=s.replicas, adding_replicas=s.adding_replicas,
                     removing_replicas=s.removing_replicas)
                for s in sorted(states, key=lambda s: s.partition)))
            for name, states in listed.items()),
    )
