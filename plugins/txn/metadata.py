"""One transactional id's state (Kafka's ``TransactionMetadata``) and its states
(Kafka's ``TransactionState``, ids as written to ``__transaction_state``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "TransactionMetadata", "TxnState",
           "is_epoch_exhausted"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """Kafka's name, as DescribeTransactions and ListTransactions show it."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

# States a transactional id may be in between transactions.
COMPLETED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch (Short.MaxValue) for fencing: at MaxValue - 1 the id
    is rotated."""
    return epoch >= SHORT_MAX - 1


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    # Not in the log record (Kafka does not persist them either): -1 after a load.
    previous_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
