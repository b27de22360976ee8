"""ListGroups (key 16): v0-5, the groups of every __consumer_offsets partition this
broker leads (clients ask each broker), filtered by state (v4+) and type (v5+). A
partition still loading makes the answer COORDINATOR_LOAD_IN_PROGRESS, with the groups
of the others, as in Kafka."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5.response import ListGroupsResponse

from kernel.api.errors import KafkaError
from kernel.api.handlers import RequestContext
from kernel.api.hooks import CLUSTER_NAME
from kernel.api.protocol import make, response_module
from plugins.coordinator.service import GroupCoordinatorService
from plugins.coordinator.versions import to_version

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5



async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    states = tuple(getattr(request, "states_filter", ()) or ())
    types = tuple(getattr(request, "types_filter", ()) or ())
    error = ErrorCode.none
    reads = []
    for partition, state in service.led_partitions().items():
        if state == "loading":
            error = ErrorCode.coordinator_load_in_progress
        elif state == "active":
            reads.append(_list(service, partition, states, types))
    listed = []
    for outcome in await asyncio.gather(*reads):
        if isinstance(outcome, ErrorCode):
            error = outcome
            continue
        if outcome.error_code != ErrorCode.none:
            error = outcome.error_code
        listed.extend(outcome.groups)
    if not service.authorize(ctx, "DESCRIBE", "CLUSTER", CLUSTER_NAME):
        listed = [g for g in listed if service.authorize(ctx, "DESCRIBE", "GROUP", g.group_id)]
    return make(m.ListGroupsResponse, throttle_time=datetime.timedelta(0), error_code=error,
                groups=tuple(to_version(g, m.ListedGroup) for g in listed))


async def _list(service: GroupCoordinatorService, partition: int, states: tuple[str, ...],
                types: tuple[str, ...]) -> ListGroupsResponse | ErrorCode:
    try:
        return await service.runtime.read(partition, lambda s: s.list_groups(states, types))
    except KafkaError as e:
        return service.error_code(e)
