"""AddPartitionsToTxn (key 24), as Kafka's handleAddPartitionsToTxnRequest.

Versions 0-3 come from clients: WRITE on the transactional id, WRITE on each topic
(never granted on an internal topic), every partition known, else the whole request
fails (the failing partitions with their error, the others OPERATION_NOT_ATTEMPTED);
then the coordinator adds them to the transaction.

Versions 4-5 come from other brokers (KIP-890): a batch of transactions, CLUSTER_ACTION
on the cluster instead of the per-resource checks (else the whole answer is
CLUSTER_AUTHORIZATION_FAILED), each transaction either verified (``verify_only``: are
these partitions in it?) or added to, answered per transaction. Only this broker's
coordinator answers: a transactional id it does not own is NOT_COORDINATOR, never
forwarded again."""

from __future__ import annotations

import asyncio
import datetime
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.handlers import RequestContext
from kernel.api.hooks import CLUSTER_NAME
from kernel.api.protocol import make, response_module
from plugins.txn.handlers.common import for_version
from plugins.txn.service import TransactionCoordinator

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5
FIRST_BROKER_VERSION = 4

TopicPartition = tuple[str, int]


async def handle(coordinator: TransactionCoordinator, ctx: RequestContext,
                 request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if ctx.api_version >= FIRST_BROKER_VERSION:
        return await _handle_batch(coordinator, ctx, request, m)
    transactional_id = request.v3_and_below_transactional_id
    partitions = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    if not ctx.authorize(ctx.session, "WRITE", "TRANSACTIONAL_ID", transactional_id):
        return _respond(m, dict.fromkeys(partitions,
                                         ErrorCode.transactional_id_authorization_failed))
    image = ctx.services.metadata.image
    errors: dict[TopicPartition, ErrorCode] = {}
    allowed: dict[str, bool] = {}
    for topic, index in partitions:
        if topic not in allowed:
            # Kafka authorizes no internal topic here: a client adds __consumer_offsets
            # only through AddOffsetsToTxn.
            known = image.topic(topic)
            allowed[topic] = (known is None or not known.internal) and ctx.authorize(
                ctx.session, "WRITE", "TOPIC", topic)
        if not allowed[topic]:
            errors[(topic, index)] = ErrorCode.topic_authorization_failed
        elif image.partition(topic, index) is None:
            errors[(topic, index)] = ErrorCode.unknown_topic_or_partition
    if errors:
        return _respond(m, {tp: errors.get(tp, ErrorCode.operation_not_attempted)
                            for tp in partitions})
    if not transactional_id:
        error = ErrorCode.invalid_request
    else:
        error = await coordinator.add_partitions(
            transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, partitions)
    return _respond(m, dict.fromkeys(partitions, for_version(error, ctx.api_version, 2)))


async def _handle_batch(coordinator: TransactionCoordinator, ctx: RequestContext,
                        request: Any, m: ModuleType) -> Any:
    if not ctx.authorize(ctx.session, "CLUSTER_ACTION", "CLUSTER", CLUSTER_NAME):
        return make(m.AddPartitionsToTxnResponse, throttle_time=datetime.timedelta(0),
                    error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())
    if any(t.transactional_id is None for t in request.transactions):
        return make(m.AddPartitionsToTxnResponse, throttle_time=datetime.timedelta(0),
                    error_code=ErrorCode.invalid_request, results_by_transaction=())
    results = await asyncio.gather(*(_transaction(coordinator, ctx, t)
                                     for t in request.transactions))
    return make(m.AddPartitionsToTxnResponse, throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none, results_by_transaction=tuple(
                    m.AddPartitionsToTxnResult(transactional_id=t.transactional_id,
                                               topic_results=_topic_results(m, errors))
                    for t, errors in zip(request.transactions, results, strict=True)))


async def _transaction(coordinator: TransactionCoordinator, ctx: RequestContext,
                       transaction: Any) -> dict[TopicPartition, ErrorCode]:
    partitions = [(t.name, p) for t in transaction.topics for p in t.partitions]
    image = ctx.services.metadata.image
    unknown = {tp for tp in partitions if image.partition(*tp) is None}
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                else ErrorCode.operation_not_attempted for tp in partitions}
    return await coordinator.verify_here(
        transaction.transactional_id, transaction.producer_id, transaction.producer_epoch,
        partitions, add=not transaction.verify_only)


def _topic_results(m: ModuleType, errors: dict[TopicPartition, ErrorCode]) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(
            m.AddPartitionsToTxnPartitionResult(partition_index=index,
                                                partition_error_code=error))
    return tuple(m.AddPartitionsToTxnTopicResult(name=topic,
                                                 results_by_partition=tuple(results))
                 for topic, results in by_topic.items())


def _respond(m: ModuleType, errors: dict[TopicPartition, ErrorCode]) -> Any:
    return make(m.AddPartitionsToTxnResponse, throttle_time=datetime.timedelta(0),
                results_by_topic_v3_and_below=_topic_results(m, errors))
