"""AddOffsetsToTxn (key 25), versions 0-4, as Kafka's handleAddOffsetsToTxnRequest:
WRITE on the transactional id, READ on the group, then the group's ``__consumer_offsets``
partition is added to the transaction (its TxnOffsetCommit follows)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.errors import KafkaError
from kernel.api.handlers import RequestContext
from kernel.api.protocol import make, response_module
from plugins.txn.handlers.common import for_version
from plugins.txn.service import TransactionCoordinator

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(coordinator: TransactionCoordinator, ctx: RequestContext,
                 request: Any) -> Any:
    if not ctx.authorize(ctx.session, "WRITE", "TRANSACTIONAL_ID", request.transactional_id):
        return _answer(ctx, ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorize(ctx.session, "READ", "GROUP", request.group_id):
        return _answer(ctx, ErrorCode.group_authorization_failed)
    if not request.transactional_id:
        return _answer(ctx, ErrorCode.invalid_request)
    try:
        offsets_partition = coordinator.offsets_partition(request.group_id)
    except KafkaError as e:
        return _answer(ctx, e.error_code)
    error = await coordinator.add_partitions(request.transactional_id, request.producer_id,
                                             request.producer_epoch, [offsets_partition])
    return _answer(ctx, for_version(error, ctx.api_version, 2))


def _answer(ctx: RequestContext, error: ErrorCode) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    return make(m.AddOffsetsToTxnResponse, throttle_time=datetime.timedelta(0),
                error_code=error)
