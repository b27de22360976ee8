"""AddPartitionsToTxn (key 24), the client versions 0-3, as Kafka's
handleAddPartitionsToTxnRequest: WRITE on the transactional id, WRITE on each topic
(never granted on an internal topic), every partition known, else the whole request
fails (the failing partitions with their error, the others OPERATION_NOT_ATTEMPTED);
then the coordinator adds them to the transaction.

Versions 4-5 are the brokers' batched, verify-only form (KIP-890): not served."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.protocol.build import make, response_module
from kernel.requests import RequestContext
from plugins.txn.handlers.common import for_version
from plugins.txn.service import TransactionCoordinator

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 3

TopicPartition = tuple[str, int]


async def handle(coordinator: TransactionCoordinator, ctx: RequestContext,
                 request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
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


def _respond(m: ModuleType, errors: dict[TopicPartition, ErrorCode]) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(
            m.AddPartitionsToTxnPartitionResult(partition_index=index,
                                                partition_error_code=error))
    return make(m.AddPartitionsToTxnResponse, throttle_time=datetime.timedelta(0),
                results_by_topic_v3_and_below=tuple(
                    m.AddPartitionsToTxnTopicResult(name=topic,
                                                    results_by_partition=tuple(results))
                    for topic, results in by_topic.items()))
