"""DeleteGroups (key 42): v0-2. Only Empty groups go, with their offsets; each group is
deleted by the shard that owns it."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.errors import KafkaError
from kernel.api.handlers import RequestContext
from kernel.api.protocol import make, response_module
from plugins.coordinator.service import GroupCoordinatorService

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    names = list(dict.fromkeys(request.groups_names))
    errors: dict[str, ErrorCode] = {}
    by_partition: dict[int, list[str]] = {}
    for group_id in names:
        if not service.authorize(ctx, "DELETE", "GROUP", group_id):
            errors[group_id] = ErrorCode.group_authorization_failed
            continue
        try:
            by_partition.setdefault(service.partition_of(group_id), []).append(group_id)
        except KafkaError as e:
            errors[group_id] = service.error_code(e)

    async def delete(partition: int, group_ids: list[str]) -> None:
        try:
            results = await service.runtime.write(
                partition, lambda shard, _reply_to: shard.delete_groups(group_ids))
        except KafkaError as e:
            errors.update(dict.fromkeys(group_ids, service.error_code(e)))
        else:
            errors.update((r.group_id, r.error_code) for r in results)

    await asyncio.gather(*(delete(p, ids) for p, ids in by_partition.items()))
    return make(m.DeleteGroupsResponse, throttle_time=datetime.timedelta(0), results=tuple(
        make(m.DeletableGroupResult, group_id=g, error_code=errors[g]) for g in names
    ))
