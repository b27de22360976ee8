"""InitProducerId (key 22): v0-5, as Kafka's KafkaApis.handleInitProducerIdRequest and
TransactionCoordinator.handleInitProducerId.

Without a transactional id every request gets a fresh producer id and epoch 0, a given
producer id and epoch (KIP-360, v3+) included: Kafka "blindly accepts" such a request,
as an idempotent producer's state is not kept across ids. With a transactional id the
request is checked as Kafka checks it (empty id, transaction timeout) and then goes to
the transaction coordinator. Version 6 (KIP-939's two-phase commit) is not served."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.errors import KafkaError
from kernel.api.handlers import RequestContext
from kernel.api.hooks import CLUSTER_NAME
from kernel.api.protocol import make, response_module
from plugins.txn.handlers.common import for_version
from plugins.txn.service import TransactionCoordinator

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


async def handle(coordinator: TransactionCoordinator, ctx: RequestContext,
                 request: Any) -> Any:
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not ctx.authorize(ctx.session, "WRITE", "TRANSACTIONAL_ID", transactional_id):
            return _answer(ctx, ErrorCode.transactional_id_authorization_failed)
    # KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic.
    elif not (ctx.authorize(ctx.session, "IDEMPOTENT_WRITE", "CLUSTER", CLUSTER_NAME)
              or ctx.authorize_by_resource_type(ctx.session, "WRITE", "TOPIC")):
        return _answer(ctx, ErrorCode.cluster_authorization_failed)
    # v0-2 lack both fields: their defaults are (-1, -1).
    producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)
    producer_epoch = getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return _answer(ctx, ErrorCode.invalid_request)
    if transactional_id is None:
        try:
            producer_id = await coordinator.producer_ids.generate_producer_id()
            return _answer(ctx, ErrorCode.none, producer_id, 0)
        except KafkaError as e:
            ctx.services.log.warning("no producer id to hand out", error=str(e))
            return _answer(ctx, e.error_code)
    if not transactional_id:
        return _answer(ctx, ErrorCode.invalid_request)
    timeout_ms = request.transaction_timeout // datetime.timedelta(milliseconds=1)
    if not 0 < timeout_ms <= coordinator.settings.transaction_max_timeout_ms:
        return _answer(ctx, ErrorCode.invalid_transaction_timeout)
    expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
    result = await coordinator.init_producer_id(transactional_id, timeout_ms, expected)
    return _answer(ctx, for_version(result.error, ctx.api_version, 4), result.producer_id,
                   result.producer_epoch)


def _answer(ctx: RequestContext, error: ErrorCode, producer_id: int = NO_PRODUCER_ID,
            producer_epoch: int = NO_PRODUCER_EPOCH) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    return make(m.InitProducerIdResponse, throttle_time=datetime.timedelta(0),
                error_code=error, producer_id=producer_id, producer_epoch=producer_epoch)
