"""The txn plugin's request handlers, one module per API: ``API_KEY``, ``MIN_VERSION``,
``MAX_VERSION`` and ``handle(coordinator, ctx, request)``."""

from plugins.txn.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    describe_transactions,
    end_txn,
    init_producer_id,
    list_transactions,
)

HANDLER_MODULES = (init_producer_id, add_partitions_to_txn, add_offsets_to_txn, end_txn,
                   describe_transactions, list_transactions)

__all__ = ["HANDLER_MODULES"]
