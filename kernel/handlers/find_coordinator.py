"""FindCoordinator (key 10): the broker leading the internal-topic partition that owns a
key, asked of the coordinator a plugin registered for the key type (a group id:
``__consumer_offsets``; a transactional id: ``__transaction_state``). v4+ batches keys.
Served once some plugin registers a coordinator (see :func:`register`)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.coordination.registry import Coordinators, CoordinatorType
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import KafkaError
from kernel.requests import ApiRegistry, RequestContext

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

# What Kafka checks before it looks a key up: (operation, resource type, error if denied).
_AUTHORIZATION = {
    CoordinatorType.GROUP: ("DESCRIBE", "GROUP", ErrorCode.group_authorization_failed),
    CoordinatorType.TRANSACTION: ("DESCRIBE", "TRANSACTIONAL_ID",
                                  ErrorCode.transactional_id_authorization_failed),
    CoordinatorType.SHARE: ("CLUSTER_ACTION", "CLUSTER", ErrorCode.cluster_authorization_failed),
}

_Found = tuple[ErrorCode, str | None, int, str, int]


def register(routes: ApiRegistry, coordinators: Coordinators) -> None:
    """Serve FindCoordinator when some plugin runs a coordinator: a broker without one
    does not advertise the API."""
    if coordinators:
        routes.register(API_KEY, handle, min_version=MIN_VERSION, max_version=MAX_VERSION)


def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    key_type = getattr(request, "key_type", CoordinatorType.GROUP)
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node_id, host, port = _find(ctx, key_type, key)
            coordinators.append(make(m.Coordinator, key=key, node_id=node_id, host=host,
                                     port=port, error_code=error, error_message=message))
        return make(m.FindCoordinatorResponse, throttle_time=datetime.timedelta(0),
                    coordinators=tuple(coordinators))
    error, message, node_id, host, port = _find(ctx, key_type, request.key)
    # v1-3 carry Errors.message() even for NONE, which is the name "NONE".
    return make(m.FindCoordinatorResponse, throttle_time=datetime.timedelta(0),
                error_code=error, error_message=message if message is not None else "NONE",
                node_id=node_id, host=host, port=port)


def _find(ctx: RequestContext, key_type: int, key: str) -> _Found:
    services = ctx.services
    partition_of = services.coordinators.get(key_type)
    if partition_of is None and key_type == CoordinatorType.SHARE:
        # Share groups with no share coordinator: Kafka 4.3 sends no message.
        return ErrorCode.invalid_request, None, -1, "", -1
    if partition_of is None and key_type not in (CoordinatorType.GROUP,
                                                 CoordinatorType.TRANSACTION):
        return _error(ErrorCode.invalid_request, f"unsupported key type {key_type}")
    operation, resource_type, denied = _AUTHORIZATION[CoordinatorType(key_type)]
    resource = CLUSTER_NAME if resource_type == "CLUSTER" else key
    if not ctx.authorize(ctx.session, operation, resource_type, resource):
        return _error(denied)
    if partition_of is None:
        # Kafka always runs its group and transaction coordinators; no plugin runs this one.
        return _error(ErrorCode.coordinator_not_available)
    try:
        topic, partition = partition_of(key)
    except KafkaError as e:
        return _error(e.error_code)
    image = services.metadata.image
    state = image.partition(topic, partition)
    leader = image.brokers.get(state.leader) if state is not None else None
    # The coordinator's endpoint on the client's listener; none there is no coordinator
    # to this client (Kafka's getAliveBrokerNode(leader, listenerName)).
    endpoint = leader.endpoint(ctx.session.listener_name) if leader is not None else None
    if leader is None or endpoint is None:
        return _error(ErrorCode.coordinator_not_available)
    replicas = services.replicas
    if leader.node_id == replicas.broker_id:
        hosted = replicas.get_partition(topic, partition)
        if hosted is None or not hosted.is_leader:
            # In the image, not applied here yet: an image of many new partitions (a new
            # __consumer_offsets) is applied off the loop. Retriable for every client.
            return _error(ErrorCode.coordinator_not_available)
    return ErrorCode.none, None, leader.node_id, endpoint.host, endpoint.port


def _error(error: ErrorCode, message: str | None = None) -> _Found:
    # Kafka sends the exception's default message with the code.
    return error, message or error.name, -1, "", -1
