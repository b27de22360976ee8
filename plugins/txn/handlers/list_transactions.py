"""ListTransactions (key 66), versions 0-1, as Kafka's handleListTransactionsRequest:
the transactional ids of every partition this broker coordinates that the caller may
DESCRIBE, filtered by state names (unknown names are echoed back), producer ids and
(v1) the least time since the transaction started; COORDINATOR_LOAD_IN_PROGRESS while a
partition loads. Version 2 (a transactional id pattern) is not served."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.handlers import RequestContext
from kernel.api.protocol import make, response_module
from plugins.txn.metadata import TxnState
from plugins.txn.service import TransactionCoordinator

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(coordinator: TransactionCoordinator, ctx: RequestContext,
                 request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    runtime = coordinator.runtime
    if "loading" in runtime.partition_states().values():
        return make(m.ListTransactionsResponse, throttle_time=datetime.timedelta(0),
                    error_code=ErrorCode.coordinator_load_in_progress,
                    unknown_state_filters=(), transaction_states=())
    unknown = []
    states: set[TxnState] = set()
    for name in request.state_filters:
        state = TxnState.from_name(name)
        if state is None:
            unknown.append(name)
        else:
            states.add(state)
    state_filter = frozenset(states) if request.state_filters else None
    producer_ids = frozenset(request.producer_id_filters)
    duration = getattr(request, "duration_filter", -1)
    found = []
    for shard in runtime.loaded_shards().values():
        for txn in shard.list_transactions(state_filter, producer_ids, duration):
            if ctx.authorize(ctx.session, "DESCRIBE", "TRANSACTIONAL_ID", txn.transactional_id):
                found.append(m.TransactionState(transactional_id=txn.transactional_id,
                                                producer_id=txn.producer_id,
                                                transaction_state=txn.state.state_name))
    return make(m.ListTransactionsResponse, throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none, unknown_state_filters=tuple(unknown),
                transaction_states=tuple(found))
