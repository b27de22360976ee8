"""JoinGroup (key 11): v0-9. The request may stay parked in the shard until the join
phase ends; its response then arrives as a completion of another operation."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequest
from kio.schema.join_group.v9.response import JoinGroupResponse

from kernel.api.handlers import RequestContext
from kernel.api.protocol import response_module
from plugins.coordinator.service import GroupCoordinatorService
from plugins.coordinator.versions import to_version

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    joining = to_version(request, JoinGroupRequest)
    response = await service.member_write(
        ctx, joining.group_id,
        lambda shard, shard_ctx, reply_to: shard.join_group(shard_ctx, joining, reply_to),
        lambda error: error_response(joining.member_id, error),
    )
    if (
        response.error_code == ErrorCode.none
        and response.leader == response.member_id
        and response.members
    ):
        # Only the leader's response lists members: one per generation formed.
        service.metrics.rebalances.inc()
    return to_version(response, m.JoinGroupResponse)


def error_response(member_id: str, error: ErrorCode) -> JoinGroupResponse:
    return JoinGroupResponse(
        throttle_time=datetime.timedelta(0), error_code=error, generation_id=-1,
        protocol_type=None, protocol_name=None, leader="", member_id=member_id, members=(),
    )
