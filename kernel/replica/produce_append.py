"""What a Produce append needs beyond the log, as Kafka's replica layer has it: the
per-partition status a request carries through ``ReplicaManager.handle_produce_append``,
the KIP-890 transaction verification (``AddPartitionsToTxnManager`` and its
``VerificationGuard``) with the answers producers hear, and ``DelayedProduce``.

The flow itself reads top-down in :meth:`ReplicaManager.handle_produce_append
<kernel.replica.manager.ReplicaManager.handle_produce_append>`.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from kernel.cluster import ClusterImage
from kernel.protocol.errors import KafkaError
from kernel.protocol.records import (
    ATTRIBUTES_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG,
    read_batch_header,
)
from kernel.purgatory import DelayedResponse
from kernel.replica.partition import Partition

if TYPE_CHECKING:
    from kernel.replica.manager import ReplicaManager


class TransactionVerifier(Protocol):
    """The transaction coordinator's check that partitions are in a producer's ongoing
    transaction before its first transactional write there (KIP-890 part 1, Kafka's
    ``handleVerifyPartitionsInTransaction``): NONE, TRANSACTION_ABORTABLE (not added), or
    one error for all (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
    CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, ...). With ``add`` the partitions are added
    instead, as for Produce v12+ (KIP-890 part 2's implicit AddPartitionsToTxn)."""

    def __call__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 partitions: Sequence[tuple[str, int]], *,
                 add: bool = False) -> Awaitable[dict[tuple[str, int], ErrorCode]]: ...


class TransactionSupportedOperation(enum.Enum):
    """What the producer's Produce version understands of verification (Kafka's
    ``AddPartitionsToTxnManager.produceRequestVersionToTransactionSupportedOperation``)."""

    DEFAULT_ERROR = 0  # v10 and older: TRANSACTION_ABORTABLE is unknown to them
    GENERIC_ERROR_SUPPORTED = 1  # v11
    ADD_PARTITION = 2  # v12+ (KIP-890 part 2): the broker adds the partition itself

    @staticmethod
    def for_produce_version(version: int) -> TransactionSupportedOperation:
        if version > 11:
            return TransactionSupportedOperation.ADD_PARTITION
        if version > 10:
            return TransactionSupportedOperation.GENERIC_ERROR_SUPPORTED
        return TransactionSupportedOperation.DEFAULT_ERROR


@dataclass(slots=True)
class ProducePartitionStatus:
    """One partition of a Produce request, from the handler's checks to the answer
    (Kafka's ``ProducePartitionStatus``): what to append, then what the append did. An
    entry the handler already refused (``error`` set) is not appended."""

    topic: str | None  # resolved from the topic id where the request uses ids
    index: int
    records: bytes | memoryview | None
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    # (index in the batch, message) of each rejected record (KIP-467, Produce v8+).
    record_errors: tuple[tuple[int, str | None], ...] = ()
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    # The offset the high watermark must pass for acks=-1 (last offset + 1).
    required_offset: int = -1
    partition: Partition | None = None

    def replicated(self) -> bool:
        p = self.partition
        return p is None or self.error != ErrorCode.none or \
            p.high_watermark >= self.required_offset


class DelayedProduce(DelayedResponse):
    """Waits until every appended partition's high watermark passes its append."""

    def __init__(self, timeout_ms: int, statuses: Sequence[ProducePartitionStatus]) -> None:
        super().__init__(timeout_ms)
        self.statuses = statuses

    def try_complete(self) -> bool:
        for s in self.statuses:
            if s.partition is not None and not s.partition.is_leader \
                    and s.error == ErrorCode.none:
                s.error = ErrorCode.not_leader_or_follower
        if all(s.replicated() for s in self.statuses):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        for s in self.statuses:
            if not s.replicated():
                s.error = ErrorCode.request_timed_out
            elif s.error == ErrorCode.none and s.partition is not None and \
                    len(s.partition.maximal_isr) < s.partition.min_insync_replicas:
                # Kafka's checkEnoughReplicasReachOffset: the ISR shrank below
                # min.insync.replicas while the write waited; it is in the log, but not
                # as safe as acks=all promised.
                s.error = ErrorCode.not_enough_replicas_after_append
        super().on_complete()


# -- transaction verification (KIP-890) ---------------------------------------------


@dataclass(slots=True)
class Verifying:
    """A transactional batch that would open its producer's transaction in a partition."""

    status: ProducePartitionStatus
    partition: Partition
    producer_id: int
    producer_epoch: int


def first_transactional_batches(replicas: ReplicaManager,
                                statuses: Sequence[ProducePartitionStatus],
                                image: ClusterImage) -> list[Verifying]:
    """The partitions where the producer has no open transaction yet, which the
    transaction coordinator must confirm were added (KIP-890 part 1). A batch of an
    already open transaction costs a header read and a lookup."""
    verifying: list[Verifying] = []
    for s in statuses:
        records = s.records
        if s.error != ErrorCode.none or records is None or \
                len(records) < RECORD_BATCH_OVERHEAD or \
                not records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
            continue
        assert s.topic is not None  # an entry without a name was refused
        try:
            partition = replicas.leader_partition(s.topic, s.index, image)
        except KafkaError:
            continue  # answered by the append
        header = read_batch_header(records)
        if partition.log.producer_state.needs_verification(header.producer_id,
                                                           header.producer_epoch):
            verifying.append(Verifying(s, partition, header.producer_id,
                                       header.producer_epoch))
    return verifying


async def verify_transactions(verifier: TransactionVerifier, transactional_id: str,
                              verifying: list[Verifying],
                              operation: TransactionSupportedOperation) -> None:
    """Ask the coordinator about ``verifying``'s partitions; each refused one gets the
    error its producer understands and is not appended."""
    # Taken before asking: a marker written meanwhile drops it (Kafka's VerificationGuard).
    guards = [v.partition.log.producer_state.start_verification(v.producer_id)
              for v in verifying]
    first = verifying[0]
    tps = [(v.partition.topic, v.partition.partition) for v in verifying]
    answers = await verifier(transactional_id, first.producer_id, first.producer_epoch, tps,
                             add=operation is TransactionSupportedOperation.ADD_PARTITION)
    for v, guard, tp in zip(verifying, guards, tps, strict=True):
        status = v.status
        error = answers.get(tp, ErrorCode.unknown_server_error)
        if error != ErrorCode.none:
            status.error, status.message = _verification_error(error, operation)
            continue
        state = v.partition.log.producer_state
        if state.needs_verification(v.producer_id, v.producer_epoch) and \
                not state.is_verified(v.producer_id, guard):
            # The transaction ended while it was verified: appending would open a new
            # one nobody ends (Kafka's check in UnifiedLog).
            status.error = ErrorCode.invalid_txn_state
            status.message = "Record was not part of an ongoing transaction"


# Verification answers older clients may not retry: Kafka turns them into
# NOT_ENOUGH_REPLICAS, which clients retry without a metadata refresh.
_VERIFICATION_RETRIABLE = frozenset({
    ErrorCode.concurrent_transactions, ErrorCode.network_exception,
    ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator})


def _verification_error(error: ErrorCode, operation: TransactionSupportedOperation,
                        ) -> tuple[ErrorCode, str | None]:
    """What the producer hears (Kafka's AddPartitionsToTxnManager and ReplicaManager)."""
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch, None
    if error == ErrorCode.transaction_abortable and \
            operation is TransactionSupportedOperation.DEFAULT_ERROR:
        error = ErrorCode.invalid_txn_state  # clients before KIP-890 part 2
    if error == ErrorCode.invalid_txn_state:
        return error, "Partition was not added to the transaction"
    if error in _VERIFICATION_RETRIABLE:
        return ErrorCode.not_enough_replicas, (
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {error.name.upper()}")
    return error, None
