"""The transaction coordinator of one ``__transaction_state`` partition, as a sans-io
state machine (Kafka's ``TransactionStateManager`` cache plus the transitions of
``TransactionCoordinator`` and ``TransactionMetadata``), driven by the kernel's
``CoordinatorRuntime``.

Every operation changes the state at once and returns a :class:`TxnResult`: the records
to append (the runtime answers only once they are committed; a failed append reloads
the shard from the log, so no "pending transition" is needed as in Kafka). Writing
markers is not the shard's business: an operation that leaves a transaction in
PrepareCommit/PrepareAbort hands back a :class:`MarkerJob`; the service writes the
markers and then calls :meth:`TxnShard.complete_transaction`.

Errors are Kafka's newest (PRODUCER_FENCED); handlers map them to what older request
versions expect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.coordination import TransactionResult
from plugins.txn.metadata import (
    COMPLETED,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TransactionMetadata,
    TxnState,
    is_epoch_exhausted,
)
from plugins.txn.records import (
    RecordDecodeError,
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

__all__ = ["NEED_PRODUCER_ID", "InitResult", "MarkerJob", "TxnResult", "TxnShard"]

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class TxnResult:
    """What the runtime applies (its ``ShardResult``); this shard never parks requests
    nor arms timers (the service runs the periodic scans)."""

    records: tuple[Record, ...] = ()
    response: Any = None
    completions: tuple[Any, ...] = ()
    timers: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers to write for a transaction in PrepareCommit/PrepareAbort, then complete it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    result: TransactionResult
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    markers: MarkerJob | None = None
    """Set when an ongoing transaction was aborted to fence its producer (the answer is
    then CONCURRENT_TRANSACTIONS and the client retries)."""


@dataclass(frozen=True, slots=True)
class EndResult:
    error: ErrorCode
    markers: MarkerJob | None = None


NEED_PRODUCER_ID = object()
"""InitProducerId's answer when it needs a fresh producer id: the caller allocates one
(an async call) and runs the operation again with it."""


@dataclass(slots=True)
class _Changes:
    records: list[Record] = field(default_factory=list)


class TxnShard:
    """The transactional ids of one ``__transaction_state`` partition."""

    def __init__(self, *, clock: Callable[[], int],
                 on_loaded: Callable[[list[MarkerJob]], None] | None = None) -> None:
        self._clock = clock
        # Told, once every record is replayed, the marker jobs of the transactions a
        # previous leader left prepared (Kafka sends them at load: sendPendingTxnMarkers).
        self._on_loaded = on_loaded
        self._txns: dict[str, TransactionMetadata] = {}

    # ------------------------------------------------------------------ reads

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        """Read only, for handlers, metrics and tests."""
        return self._txns.get(transactional_id)

    def transactions(self) -> Iterable[TransactionMetadata]:
        return self._txns.values()

    def verify_partitions(self, transactional_id: str, producer_id: int,
                          producer_epoch: int, partitions: Iterable[tuple[str, int]],
                          ) -> dict[tuple[str, int], ErrorCode]:
        """Kafka's handleVerifyPartitionsInTransaction: NONE for each partition of the
        ongoing transaction, TRANSACTION_ABORTABLE for the others. Only an Ongoing
        transaction has partitions (Kafka empties them when it completes)."""
        txn, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if txn is not None and txn.state in PREPARED:
            error = ErrorCode.concurrent_transactions
        if error != ErrorCode.none:
            return dict.fromkeys(partitions, error)
        ongoing = txn.partitions if txn is not None and txn.state is TxnState.ONGOING else ()
        return {tp: ErrorCode.none if tp in ongoing else ErrorCode.transaction_abortable
                for tp in partitions}

    # ---------------------------------------------------------------- loading

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: bytes, value: bytes | None) -> None:
        try:
            transactional_id = decode_key(key)
            if value is None:
                self._txns.pop(transactional_id, None)
                return
            v = decode_value(value)
        except RecordDecodeError as e:
            log.warning("skipping an unreadable __transaction_state record at offset %d: %s",
                        offset, e)
            return
        self._txns[transactional_id] = TransactionMetadata(
            transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms,
            TxnState(v.state) if v.state in TxnState._value2member_map_ else TxnState.DEAD,
            set(v.partitions), v.start_ms, v.last_update_ms,
        )

    def replay_end_transaction(self, offset: int, producer_id: int, producer_epoch: int,
                               result: TransactionResult) -> None:
        """__transaction_state is never written transactionally."""

    def on_loaded(self) -> TxnResult:
        if self._on_loaded is not None:
            self._on_loaded([self._job(t) for t in self._txns.values() if t.state in PREPARED])
        return TxnResult()

    def on_unloaded(self) -> TxnResult:
        return TxnResult()

    def on_timer(self, key: Any) -> TxnResult:
        return TxnResult()

    # ------------------------------------------------------------- operations

    def _write(self, txn: TransactionMetadata, changes: _Changes) -> None:
        value = TransactionLogValue(
            txn.producer_id, txn.producer_epoch, txn.timeout_ms, int(txn.state),
            tuple(sorted(txn.partitions)), txn.last_update_ms, txn.start_ms,
        )
        changes.records.append((encode_key(txn.transactional_id), encode_value(value)))

    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         expected: tuple[int, int] | None, new_producer_id: int | None,
                         reply_to: Hashable = None) -> TxnResult:
        """InitProducerId with a transactional id (Kafka's handleInitProducerId and
        prepareInitProducerIdTransit). ``expected`` is KIP-360's (producer id, epoch)."""
        now = self._clock()
        changes = _Changes()
        txn = self._txns.get(transactional_id)
        if txn is None:
            if new_producer_id is None:
                return TxnResult(response=NEED_PRODUCER_ID)
            txn = TransactionMetadata(transactional_id, new_producer_id, timeout_ms=timeout_ms,
                                      last_update_ms=now)
            new_producer_id = None
            self._txns[transactional_id] = txn
            created = True
        else:
            created = False
        if expected is not None and not (
            txn.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == txn.producer_id
            or (expected[0] == txn.previous_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return self._init_error(ErrorCode.producer_fenced, created, transactional_id)
        if txn.state in PREPARED:
            return TxnResult(response=InitResult(ErrorCode.concurrent_transactions))
        if txn.state is TxnState.ONGOING:
            # Fence the producer: abort with a bumped epoch that is never handed out; the
            # client retries and gets the next one (or a new id if this one exhausts it).
            job = self._prepare_end(txn, TransactionResult.ABORT, txn.producer_epoch + 1,
                                    now, changes)
            return TxnResult(records=tuple(changes.records),
                             response=InitResult(ErrorCode.concurrent_transactions,
                                                 markers=job))
        if txn.state not in COMPLETED:
            return TxnResult(response=InitResult(ErrorCode.unknown_server_error))
        if is_epoch_exhausted(txn.producer_epoch) and (
                expected is None or expected[1] == txn.producer_epoch):
            if new_producer_id is None:
                return TxnResult(response=NEED_PRODUCER_ID)
            txn.previous_producer_id = txn.producer_id
            txn.last_producer_epoch = (txn.producer_epoch if expected is not None
                                       else NO_PRODUCER_EPOCH)
            txn.producer_id, txn.producer_epoch = new_producer_id, 0
        elif expected is None:
            txn.producer_epoch, txn.last_producer_epoch = txn.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == txn.producer_epoch:
            txn.producer_epoch, txn.last_producer_epoch = txn.producer_epoch + 1, txn.producer_epoch
        elif expected[1] == txn.last_producer_epoch:
            pass  # a retry of a bump whose answer was lost: the same epoch again
        else:
            return TxnResult(response=InitResult(ErrorCode.producer_fenced))
        txn.state = TxnState.EMPTY
        txn.partitions.clear()
        txn.timeout_ms = timeout_ms
        txn.start_ms = -1
        txn.last_update_ms = now
        self._write(txn, changes)
        return TxnResult(records=tuple(changes.records),
                         response=InitResult(ErrorCode.none, txn.producer_id, txn.producer_epoch))

    def _init_error(self, error: ErrorCode, created: bool, transactional_id: str) -> TxnResult:
        if created:  # nothing was written for it
            del self._txns[transactional_id]
        return TxnResult(response=InitResult(error))

    def _check_producer(self, transactional_id: str, producer_id: int,
                        producer_epoch: int) -> tuple[TransactionMetadata | None, ErrorCode]:
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return None, ErrorCode.invalid_producer_id_mapping
        if txn.producer_epoch != producer_epoch:
            return None, ErrorCode.producer_fenced
        return txn, ErrorCode.none

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]],
                       reply_to: Hashable = None) -> TxnResult:
        """AddPartitionsToTxn (and AddOffsetsToTxn with the group's offsets partition):
        the transaction becomes Ongoing with the partitions added."""
        txn, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return TxnResult(response=error)
        if txn.state in PREPARED:
            return TxnResult(response=ErrorCode.concurrent_transactions)
        added = set(partitions)
        if txn.state is TxnState.ONGOING and added <= txn.partitions:
            return TxnResult(response=ErrorCode.none)
        if txn.state not in COMPLETED and txn.state is not TxnState.ONGOING:
            return TxnResult(response=ErrorCode.invalid_txn_state)
        now = self._clock()
        if txn.state is not TxnState.ONGOING:
            txn.start_ms = now
            txn.partitions.clear()
        txn.state = TxnState.ONGOING
        txn.partitions |= added
        txn.last_update_ms = now
        changes = _Changes()
        self._write(txn, changes)
        return TxnResult(records=tuple(changes.records), response=ErrorCode.none)

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        result: TransactionResult, reply_to: Hashable = None) -> TxnResult:
        """EndTxn from a client on the v1 protocol (no epoch bump at the end)."""
        txn, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return TxnResult(response=EndResult(error))
        commit = result is TransactionResult.COMMIT
        match txn.state:
            case TxnState.ONGOING:
                changes = _Changes()
                job = self._prepare_end(txn, result, txn.producer_epoch, self._clock(), changes)
                return TxnResult(records=tuple(changes.records),
                                 response=EndResult(ErrorCode.none, job))
            case TxnState.COMPLETE_COMMIT if commit:
                return TxnResult(response=EndResult(ErrorCode.none))
            case TxnState.COMPLETE_ABORT if not commit:
                return TxnResult(response=EndResult(ErrorCode.none))
            case TxnState.PREPARE_COMMIT if commit:
                return TxnResult(response=EndResult(ErrorCode.concurrent_transactions))
            case TxnState.PREPARE_ABORT if not commit:
                return TxnResult(response=EndResult(ErrorCode.concurrent_transactions))
        return TxnResult(response=EndResult(ErrorCode.invalid_txn_state))

    def _prepare_end(self, txn: TransactionMetadata, result: TransactionResult, epoch: int,
                     now: int, changes: _Changes) -> MarkerJob:
        fencing = epoch != txn.producer_epoch
        txn.state = (TxnState.PREPARE_COMMIT if result is TransactionResult.COMMIT
                     else TxnState.PREPARE_ABORT)
        if fencing:
            txn.producer_epoch, txn.last_producer_epoch = epoch, NO_PRODUCER_EPOCH
        txn.last_update_ms = now
        self._write(txn, changes)
        return self._job(txn)

    @staticmethod
    def _job(txn: TransactionMetadata) -> MarkerJob:
        result = (TransactionResult.COMMIT if txn.state is TxnState.PREPARE_COMMIT
                  else TransactionResult.ABORT)
        return MarkerJob(txn.transactional_id, txn.producer_id, txn.producer_epoch, result,
                         tuple(sorted(txn.partitions)))

    def complete_transaction(self, job: MarkerJob, reply_to: Hashable = None) -> TxnResult:
        """Every marker of ``job`` is written: CompleteCommit/CompleteAbort. Does nothing
        (answers False) when the transaction moved on meanwhile."""
        txn = self._txns.get(job.transactional_id)
        if (txn is None or txn.state not in PREPARED or txn.producer_id != job.producer_id
                or txn.producer_epoch != job.producer_epoch):
            return TxnResult(response=False)
        txn.state = (TxnState.COMPLETE_COMMIT if txn.state is TxnState.PREPARE_COMMIT
                     else TxnState.COMPLETE_ABORT)
        txn.partitions.clear()
        txn.last_update_ms = self._clock()
        changes = _Changes()
        self._write(txn, changes)
        return TxnResult(records=tuple(changes.records), response=True)

    def prepared_transactions(self, reply_to: Hashable = None) -> TxnResult:
        """Marker jobs of every transaction in PrepareCommit/PrepareAbort (after a load,
        Kafka's coordinator resends their markers)."""
        return TxnResult(response=[self._job(t) for t in self._txns.values()
                                   if t.state in PREPARED])

    def abort_timed_out(self, reply_to: Hashable = None) -> TxnResult:
        """Ongoing transactions past their timeout are aborted with a bumped epoch, which
        fences their producer (Kafka's abortTimedOutTransactions)."""
        now = self._clock()
        changes = _Changes()
        jobs = []
        for txn in self._txns.values():
            if (txn.state is TxnState.ONGOING and txn.start_ms + txn.timeout_ms < now
                    and txn.producer_epoch < 32767):
                log.info("aborting transaction %r (producer id %d): timed out after %d ms",
                         txn.transactional_id, txn.producer_id, txn.timeout_ms)
                jobs.append(self._prepare_end(txn, TransactionResult.ABORT,
                                              txn.producer_epoch + 1, now, changes))
        return TxnResult(records=tuple(changes.records), response=jobs)

    def remove_expired(self, expiration_ms: int, reply_to: Hashable = None) -> TxnResult:
        """Transactional ids with no transaction in progress and no update for
        ``expiration_ms`` are removed (a tombstone each); answers how many."""
        now = self._clock()
        expired = [t.transactional_id for t in self._txns.values()
                   if t.state in COMPLETED and t.last_update_ms + expiration_ms <= now]
        for transactional_id in expired:
            del self._txns[transactional_id]
        records = tuple((encode_key(t), None) for t in expired)
        return TxnResult(records=records, response=len(expired))

    def list_transactions(self, states: frozenset[TxnState] | None,
                          producer_ids: frozenset[int],
                          min_duration_ms: int) -> list[TransactionMetadata]:
        """ListTransactions' filters as Kafka applies them: ``states`` None or
        ``producer_ids`` empty means any; ``min_duration_ms`` >= 0 keeps transactions
        started longer ago than that. Dead ids are never listed."""
        now = self._clock()
        found = []
        for txn in self._txns.values():
            if txn.state is TxnState.DEAD:
                continue
            if producer_ids and txn.producer_id not in producer_ids:
                continue
            if states is not None and txn.state not in states:
                continue
            if min_duration_ms >= 0 and now - txn.start_ms <= min_duration_ms:
                continue
            found.append(txn)
        return found
