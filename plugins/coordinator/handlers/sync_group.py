"""SyncGroup (key 14): v0-5. Followers stay parked in the shard until the leader's
assignment is written and committed."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.schema.sync_group.v5.response import SyncGroupResponse

from kernel.api.handlers import RequestContext
from kernel.api.protocol import response_module
from plugins.coordinator.service import GroupCoordinatorService
from plugins.coordinator.versions import to_version

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    syncing = to_version(request, SyncGroupRequest)
    response = await service.member_write(
        ctx, syncing.group_id,
        lambda shard, shard_ctx, reply_to: shard.sync_group(shard_ctx, syncing, reply_to),
        error_response,
        # The rebalance died with the previous coordinator: make the member rejoin (old
        # clients do not expect load-in-progress here).
        while_loading=ErrorCode.rebalance_in_progress,
    )
    return to_version(response, m.SyncGroupResponse)


def error_response(error: ErrorCode) -> SyncGroupResponse:
    return SyncGroupResponse(throttle_time=datetime.timedelta(0), error_code=error,
                             assignment=b"")
