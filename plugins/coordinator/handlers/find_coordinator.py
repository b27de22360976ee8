"""FindCoordinator (key 10): the broker leading the internal-topic partition of a group
id (``__consumer_offsets``) or a transactional id (``__transaction_state``, created by
the transaction plugin; without it transactions have no coordinator). v4+ batches keys."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.protocol.build import make, response_module
from kernel.protocol.errors import KafkaError
from kernel.routing import RequestContext
from plugins.coordinator.service import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    GroupCoordinatorService,
)

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

GROUP_KEY = 0
TRANSACTION_KEY = 1

_Found = tuple[ErrorCode, str | None, int, str, int]


def handle(service: GroupCoordinatorService, ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    key_type = getattr(request, "key_type", GROUP_KEY)
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node_id, host, port = _find(service, ctx, key_type, key)
            coordinators.append(make(m.Coordinator, key=key, node_id=node_id, host=host,
                                     port=port, error_code=error, error_message=message))
        return make(m.FindCoordinatorResponse, throttle_time=datetime.timedelta(0),
                    coordinators=tuple(coordinators))
    error, message, node_id, host, port = _find(service, ctx, key_type, request.key)
    # v1-3 carry Errors.message() even for NONE, which is the name "NONE".
    return make(m.FindCoordinatorResponse, throttle_time=datetime.timedelta(0),
                error_code=error, error_message=message if message is not None else "NONE",
                node_id=node_id, host=host, port=port)


def _find(service: GroupCoordinatorService, ctx: RequestContext, key_type: int,
          key: str) -> _Found:
    if key_type == GROUP_KEY:
        if not service.authorize(ctx, "DESCRIBE", "GROUP", key):
            return _error(ErrorCode.group_authorization_failed)
        topic = OFFSETS_TOPIC
    elif key_type == TRANSACTION_KEY:
        if not service.authorize(ctx, "DESCRIBE", "TRANSACTIONAL_ID", key):
            return _error(ErrorCode.transactional_id_authorization_failed)
        topic = TRANSACTION_STATE_TOPIC
    else:
        return _error(ErrorCode.invalid_request, f"unsupported key type {key_type}")
    try:
        node_id, host, port = service.find_coordinator(topic, key)
    except KafkaError as e:
        if topic == OFFSETS_TOPIC and topic not in ctx.services.metadata.image.topics:
            service.recreate_offsets_topic()
        return _error(e.error_code)
    return ErrorCode.none, None, node_id, host, port


def _error(error: ErrorCode, message: str | None = None) -> _Found:
    # Kafka sends the exception's default message with the code.
    return error, message or error.name, -1, "", -1
