"""Heartbeat (key 12): v0-4."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.heartbeat.v4.response import HeartbeatResponse

from kernel.api.handlers import RequestContext
from kernel.api.protocol import response_module
from plugins.coordinator.service import GroupCoordinatorService
from plugins.coordinator.versions import to_version

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    beat = to_version(request, HeartbeatRequest)
    response = await service.member_write(
        ctx, beat.group_id,
        lambda shard, shard_ctx, _reply_to: shard.heartbeat(shard_ctx, beat),
        lambda error: HeartbeatResponse(throttle_time=datetime.timedelta(0), error_code=error),
        # As Kafka: answer blindly while loading, the member's state is coming back.
        while_loading=ErrorCode.none,
    )
    return to_version(response, m.HeartbeatResponse)
