"""DescribeGroups (key 15): v0-6; v3+ may ask for the operations the caller is allowed
on each group."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from typing import Any

from kio.schema.describe_groups.v6.response import DescribedGroup
from kio.schema.errors import ErrorCode

from kernel.api.errors import KafkaError
from kernel.api.handlers import RequestContext, authorized_operations
from kernel.api.protocol import make, response_module
from plugins.coordinator.service import GroupCoordinatorService
from plugins.coordinator.versions import to_version

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6

async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    include_operations = getattr(request, "include_authorized_operations", False)
    described = await asyncio.gather(*(
        _describe(service, ctx, group_id, include_operations) for group_id in request.groups
    ))
    return make(m.DescribeGroupsResponse, throttle_time=datetime.timedelta(0),
                groups=tuple(to_version(d, m.DescribedGroup) for d in described))


async def _describe(service: GroupCoordinatorService, ctx: RequestContext, group_id: str,
                    include_operations: bool) -> DescribedGroup:
    if not service.authorize(ctx, "DESCRIBE", "GROUP", group_id):
        return _error(group_id, ErrorCode.group_authorization_failed)
    shard_ctx = service.shard_context(ctx)
    try:
        described = await service.read(group_id,
                                       lambda s: s.describe_group(shard_ctx, group_id))
    except KafkaError as e:
        return _error(group_id, service.error_code(e))
    if include_operations and described.error_code == ErrorCode.none:
        described = dataclasses.replace(
            described, authorized_operations=authorized_operations(ctx, "GROUP", group_id))
    return described


def _error(group_id: str, error: ErrorCode) -> DescribedGroup:
    return DescribedGroup(error_code=error, group_id=group_id, group_state="",
                          protocol_type="", protocol_data="", members=())
