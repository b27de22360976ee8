"""The group coordinator's APIs, one module per API key. Each module declares
``API_KEY``, ``MIN_VERSION``, ``MAX_VERSION`` and ``handle(service, ctx, request)``: it
authorizes, converts the request to the shard's version, delegates to the
:class:`~plugins.coordinator.service.GroupCoordinatorService` and answers in the
client's version. FindCoordinator is the kernel's: the plugin registers the group
coordinator for key type 0 (``kafkernel_register_coordinators``). ConsumerGroupHeartbeat
(KIP-848) is deliberately absent: clients then stay on the classic protocol."""

from __future__ import annotations

from types import ModuleType

from plugins.coordinator.handlers import (
    delete_groups,
    describe_groups,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
    txn_offset_commit,
)

HANDLER_MODULES: tuple[ModuleType, ...] = (
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
    txn_offset_commit,
)
