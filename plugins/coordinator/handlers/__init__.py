"""The group coordinator's APIs, one module per API key. Each module declares
``API_KEY``, ``MIN_VERSION``, ``MAX_VERSION`` and ``handle(service, ctx, request)``: it
authorizes, converts the request to the shard's version, delegates to the
:class:`~plugins.coordinator.service.GroupCoordinatorService` and answers in the
client's version. ConsumerGroupHeartbeat (KIP-848) is deliberately absent: clients then
stay on the classic protocol."""

from __future__ import annotations

from types import ModuleType

from plugins.coordinator.handlers import (
    delete_groups,
    describe_groups,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
)

HANDLER_MODULES: tuple[ModuleType, ...] = (
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    list_groups,
    describe_groups,
    delete_groups,
    offset_delete,
)
