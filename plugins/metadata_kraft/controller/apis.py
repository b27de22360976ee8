"""What brokers ask of the active controller, on the controller listener, at Kafka
4.3.1's versions: BrokerRegistration v0-4, BrokerHeartbeat v0-2, UnregisterBroker v0,
AllocateProducerIds v0, AlterPartition v2-3. Each runs as one controller operation
(``QuorumController.run``) and is answered once its records are committed; a controller
that is not the active one answers NOT_CONTROLLER, so the broker asks another."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kernel.api.errors import ErrorCode, KafkaError
from kernel.api.handlers import CONTROLLER, ApiRegistry, RequestContext

from ..raft.rpc import authorize_cluster
from .alter_partition import alter_partition
from .producer_ids import allocate_producer_ids
from .quorum_controller import Operation, QuorumController

__all__ = ["CONTROLLER_APIS", "register"]

ALTER_PARTITION, BROKER_REGISTRATION, BROKER_HEARTBEAT = 56, 62, 63
UNREGISTER_BROKER, ALLOCATE_PRODUCER_IDS = 64, 67

# api key -> (min, max) served, Kafka 4.3.1's ranges.
CONTROLLER_APIS = {
    BROKER_REGISTRATION: (0, 4),
    BROKER_HEARTBEAT: (0, 2),
    UNREGISTER_BROKER: (0, 0),
    ALLOCATE_PRODUCER_IDS: (0, 0),
    ALTER_PARTITION: (2, 3),
}


def _operation(controller: QuorumController, api_key: int, request: Any) -> Operation:
    control = controller.cluster_control
    if api_key == BROKER_REGISTRATION:
        return lambda state, offset, now: control.register_broker(
            state, request, offset=offset, now=now)
    if api_key == BROKER_HEARTBEAT:
        return lambda state, offset, now: control.heartbeat(
            state, request, offset=offset, now=now)
    if api_key == UNREGISTER_BROKER:
        return lambda state, offset, now: control.unregister_broker(state, request)
    if api_key == ALLOCATE_PRODUCER_IDS:
        return lambda state, offset, now: allocate_producer_ids(state, request)
    return lambda state, offset, now: alter_partition(state, request)


def register(registry: ApiRegistry, controller: Callable[[], QuorumController | None]
             ) -> None:
    def handle(ctx: RequestContext, request: Any) -> Awaitable[Any]:
        authorize_cluster(ctx, "ALTER" if ctx.api_key == UNREGISTER_BROKER
                          else "CLUSTER_ACTION")
        active = controller()
        if active is None or not active.active:
            raise KafkaError(ErrorCode.not_controller,
                             "this controller is not the active one")
        return active.run(_operation(active, ctx.api_key, request))

    for api_key, (low, high) in CONTROLLER_APIS.items():
        registry.register(api_key, handle, min_version=low, max_version=high,
                          listeners=(CONTROLLER,))
