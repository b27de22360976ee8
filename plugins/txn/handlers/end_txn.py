"""EndTxn (key 26), versions 0-4, as Kafka's handleEndTxnRequest with transaction
version 1: WRITE on the transactional id; the answer comes once PrepareCommit or
PrepareAbort is committed, and the markers follow.

Version 5 (KIP-890: the answer carries the epoch the coordinator bumped) is served by
Kafka only under transaction.version 2, which this broker does not finalise."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.handlers import RequestContext
from kernel.api.protocol import make, response_module
from plugins.txn.handlers.common import for_version
from plugins.txn.service import TransactionCoordinator

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(coordinator: TransactionCoordinator, ctx: RequestContext,
                 request: Any) -> Any:
    if not ctx.authorize(ctx.session, "WRITE", "TRANSACTIONAL_ID", request.transactional_id):
        return _answer(ctx, ErrorCode.transactional_id_authorization_failed)
    if not request.transactional_id:
        return _answer(ctx, ErrorCode.invalid_request)
    error = await coordinator.end_transaction(request.transactional_id, request.producer_id,
                                              request.producer_epoch, request.committed)
    return _answer(ctx, for_version(error, ctx.api_version, 2))


def _answer(ctx: RequestContext, error: ErrorCode) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    return make(m.EndTxnResponse, throttle_time=datetime.timedelta(0), error_code=error)
