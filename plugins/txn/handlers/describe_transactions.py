"""DescribeTransactions (key 65), version 0, as Kafka's
handleDescribeTransactionsRequest: DESCRIBE on each transactional id, the partitions of
topics the caller may DESCRIBE, TRANSACTIONAL_ID_NOT_FOUND for an unknown id and the
coordinator's error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) for an id this
broker does not serve."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.errors import KafkaError
from kernel.api.handlers import RequestContext
from kernel.api.protocol import make, response_module
from plugins.txn.metadata import TransactionMetadata, TxnState
from plugins.txn.service import TransactionCoordinator

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


def _copy(txn: TransactionMetadata | None) -> TransactionMetadata | None:
    if txn is None:
        return None
    return TransactionMetadata(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                               txn.timeout_ms, txn.state, set(txn.partitions), txn.start_ms,
                               txn.last_update_ms)


async def handle(coordinator: TransactionCoordinator, ctx: RequestContext,
                 request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    states = []
    for transactional_id in request.transactional_ids:
        if not ctx.authorize(ctx.session, "DESCRIBE", "TRANSACTIONAL_ID", transactional_id):
            states.append(_state(m, transactional_id,
                                 ErrorCode.transactional_id_authorization_failed))
            continue
        try:
            txn = await coordinator.read(transactional_id,
                                         lambda shard, t=transactional_id: _copy(shard.get(t)))
        except KafkaError as e:
            states.append(_state(m, transactional_id, e.error_code))
            continue
        if txn is None or txn.state is TxnState.DEAD:
            states.append(_state(m, transactional_id, ErrorCode.transactional_id_not_found))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(index)
        topics = tuple(m.TopicData(topic=topic, partitions=tuple(indexes))
                       for topic, indexes in by_topic.items()
                       if ctx.authorize(ctx.session, "DESCRIBE", "TOPIC", topic))
        states.append(_state(m, transactional_id, ErrorCode.none, txn, topics))
    return make(m.DescribeTransactionsResponse, throttle_time=datetime.timedelta(0),
                transaction_states=tuple(states))


def _state(m: ModuleType, transactional_id: str, error: ErrorCode,
           txn: TransactionMetadata | None = None, topics: tuple[Any, ...] = ()) -> Any:
    return m.TransactionState(
        error_code=error, transactional_id=transactional_id,
        transaction_state=txn.state.state_name if txn else "",
        transaction_timeout=datetime.timedelta(milliseconds=txn.timeout_ms if txn else 0),
        transaction_start_time=datetime.datetime.fromtimestamp(
            (txn.start_ms if txn else -1) / 1000, tz=datetime.UTC),
        producer_id=txn.producer_id if txn else -1,
        producer_epoch=txn.producer_epoch if txn else -1,
        topics=topics,
    )
