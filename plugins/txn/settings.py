"""The ``[plugins.txn]`` table: Kafka's broker config names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.config import int_at_least, setting

__all__ = ["TxnSettings"]


@dataclass(frozen=True, slots=True)
class TxnSettings:
    transaction_max_timeout_ms: int = setting(
        "transaction.max.timeout.ms", 900000,
        "The largest transaction timeout a transactional producer may ask for in "
        "InitProducerId; a larger one is answered INVALID_TRANSACTION_TIMEOUT.",
        check=int_at_least(1),
    )
