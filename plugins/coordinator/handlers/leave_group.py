"""LeaveGroup (key 13): v0-2 name one member at the top level, v3+ a batch (KIP-345,
also how an admin removes static members)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.leave_group.v5.response import LeaveGroupResponse

from kernel.api.handlers import RequestContext
from kernel.api.protocol import make, response_module
from plugins.coordinator.service import GroupCoordinatorService
from plugins.coordinator.versions import to_version

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if ctx.api_version < 3:
        leaving = LeaveGroupRequest(group_id=request.group_id, members=(
            MemberIdentity(member_id=request.member_id, group_instance_id=None, reason=None),
        ))
    else:
        leaving = to_version(request, LeaveGroupRequest)
    response = await service.member_write(
        ctx, leaving.group_id,
        lambda shard, shard_ctx, _reply_to: shard.leave_group(shard_ctx, leaving),
        _error,
    )
    if ctx.api_version < 3:
        error = response.error_code
        if error == ErrorCode.none and response.members:
            error = response.members[0].error_code
        return make(m.LeaveGroupResponse, throttle_time=datetime.timedelta(0), error_code=error)
    return to_version(response, m.LeaveGroupResponse)


def _error(error: ErrorCode) -> LeaveGroupResponse:
    return LeaveGroupResponse(throttle_time=datetime.timedelta(0), error_code=error, members=())
