"""The transaction coordinator of one broker (Kafka's ``TransactionCoordinator`` with its
``TransactionMarkerChannelManager``): the kernel's coordinator runtime over
``__transaction_state`` with one :class:`~plugins.txn.shard.TxnShard` per partition,
the markers of ended transactions written to each partition's leader
(:mod:`plugins.txn.inter_broker`: here through ``PluginServices.write_txn_markers``,
elsewhere with WriteTxnMarkers), and the periodic scans (timed-out transactions, expired
transactional ids, transactions left prepared by an earlier leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from kernel.api.coordination import (
    CoordinatorError,
    CoordinatorRuntime,
    CoordinatorType,
    TransactionResult,
    create_internal_topic,
)
from kernel.api.errors import KafkaError
from kernel.api.services import TxnMarker
from plugins.txn.inter_broker import NO_LEADER, ask_coordinator, write_markers
from plugins.txn.metrics import TxnMetrics
from plugins.txn.producer_ids import ProducerIdManager
from plugins.txn.records import partition_for
from plugins.txn.settings import TxnSettings
from plugins.txn.shard import NEED_PRODUCER_ID, EndResult, InitResult, MarkerJob, TxnShard

if TYPE_CHECKING:
    from kernel.api.services import PluginServices

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionCoordinator"]

TRANSACTION_STATE_TOPIC = "__transaction_state"
# How long a marker write waits before retrying partitions that answered a retriable
# error (Kafka's marker channel retries on its next send, after a metadata refresh).
MARKER_RETRY_BACKOFF_S = 0.1
# Marker errors after which the coordinator stops: a newer coordinator or producer epoch
# owns the partition's transaction state (Kafka's TransactionMarkerRequestCompletionHandler).
_MARKERS_FENCED = frozenset({ErrorCode.invalid_producer_epoch,
                             ErrorCode.transaction_coordinator_fenced,
                             ErrorCode.producer_fenced})
# Kafka treats these as written: the partition cannot take markers.
_MARKERS_SKIPPED = frozenset({ErrorCode.unsupported_for_message_format,
                              ErrorCode.unsupported_version})

T = TypeVar("T")


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def append_error(error: ErrorCode) -> ErrorCode:
    """What a client hears when the state write failed (Kafka's
    TransactionStateManager.appendTransactionToLog)."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                 ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large,
                 ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return error


class TransactionCoordinator:
    def __init__(self, broker: PluginServices, settings: TxnSettings,
                 producer_ids: ProducerIdManager, *,
                 clock: Callable[[], int] = _wall_clock_ms) -> None:
        self.broker = broker
        self.settings = settings
        self.producer_ids = producer_ids
        self.log: Any = broker.log.bind(component="txn-coordinator")
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            broker.partition_writer(), broker.timer, TRANSACTION_STATE_TOPIC,
            lambda partition: TxnShard(
                clock=clock, on_loaded=lambda jobs: self._on_loaded(partition, jobs)),
            logger=broker.log,
        )
        self.metrics = TxnMetrics(self.runtime, broker)
        # (partition, transactional id) -> the task writing that transaction's markers.
        self._marker_tasks: dict[tuple[int, str], asyncio.Task[None]] = {}
        self._scans: list[asyncio.Task[None]] = []
        self._creating: asyncio.Task[None] | None = None
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        # The topic is created on the first FindCoordinator for a transactional id, as
        # Kafka does (coordinator_partition), not at startup.
        self.runtime.start()
        loop = asyncio.get_running_loop()
        s = self.settings
        self._scans = [
            loop.create_task(self._every(
                s.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                self._abort_timed_out)),
            loop.create_task(self._every(
                s.transaction_remove_expired_transaction_cleanup_interval_ms,
                self._remove_expired)),
            # Prepared transactions get their markers at load (_on_loaded); this scan
            # retries those whose marker task gave up (an unexpected error).
            loop.create_task(self._every(
                s.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                self._resume_prepared)),
        ]

    async def stop(self) -> None:
        self._stopped = True
        tasks = [*self._scans, *self._marker_tasks.values(),
                 *([self._creating] if self._creating is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.producer_ids.close()
        await self.runtime.stop()
        self.metrics.close()

    async def _create_topic(self) -> None:
        """With Kafka's enforced configs (compacted, uncompressed, no unclean leader
        election)."""
        s = self.settings
        await create_internal_topic(
            self.broker.metadata, self.log, TRANSACTION_STATE_TOPIC,
            s.transaction_state_log_num_partitions,
            s.transaction_state_log_replication_factor,
            {"cleanup.policy": "compact", "compression.type": "uncompressed",
             "unclean.leader.election.enable": "false",
             "min.insync.replicas": str(s.transaction_state_log_min_isr),
             "segment.bytes": str(s.transaction_state_log_segment_bytes)})

    # -- routing -----------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        topic = self.broker.metadata.image.topic(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.partitions:
            raise CoordinatorError(ErrorCode.coordinator_not_available,
                                   f"{TRANSACTION_STATE_TOPIC} does not exist yet")
        return partition_for(transactional_id, len(topic.partitions))

    def coordinator_partition(self, transactional_id: str) -> tuple[str, int]:
        """FindCoordinator key type 1. As in Kafka, the first one creates
        __transaction_state; until it has leaders the answer is
        COORDINATOR_NOT_AVAILABLE and clients retry."""
        if TRANSACTION_STATE_TOPIC not in self.broker.metadata.image.topics and (
                self._creating is None or self._creating.done()) and not self._stopped:
            self._creating = asyncio.get_running_loop().create_task(self._create_topic())
        return TRANSACTION_STATE_TOPIC, self.partition_of(transactional_id)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        """The __consumer_offsets partition of a group, from the group coordinator."""
        partition_of = self.broker.coordinators.get(CoordinatorType.GROUP)
        if partition_of is None:
            raise CoordinatorError(ErrorCode.coordinator_not_available,
                                   "no group coordinator is enabled")
        return partition_of(group_id)

    async def _write(self, transactional_id: str,
                     op: Callable[[TxnShard, Hashable], Any]) -> tuple[int, Any]:
        partition = self.partition_of(transactional_id)
        return partition, await self.runtime.write(partition, op)

    # -- client operations -------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> InitResult:
        new_producer_id: int | None = None
        try:
            while True:
                partition, result = await self._write(
                    transactional_id,
                    lambda shard, _reply, pid=new_producer_id: shard.init_producer_id(
                        transactional_id, timeout_ms, expected, pid))
                if result is not NEED_PRODUCER_ID:
                    break
                new_producer_id = await self.producer_ids.generate_producer_id()
        except KafkaError as e:
            return InitResult(append_error(e.error_code))
        assert isinstance(result, InitResult)
        if result.markers is not None:
            self.metrics.fenced_producers.inc()
            self._send_markers(partition, result.markers)
        elif result.error == ErrorCode.none:
            self.log.info("initialized transactional id", transactional_id=transactional_id,
                          producer_id=result.producer_id, producer_epoch=result.producer_epoch)
        return result

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int,
                             partitions: list[tuple[str, int]]) -> ErrorCode:
        try:
            _, error = await self._write(
                transactional_id, lambda shard, _reply: shard.add_partitions(
                    transactional_id, producer_id, producer_epoch, partitions))
        except KafkaError as e:
            return append_error(e.error_code)
        return error  # type: ignore[no-any-return]

    async def end_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, commit: bool) -> ErrorCode:
        outcome = TransactionResult.COMMIT if commit else TransactionResult.ABORT
        try:
            partition, result = await self._write(
                transactional_id, lambda shard, _reply: shard.end_transaction(
                    transactional_id, producer_id, producer_epoch, outcome))
        except KafkaError as e:
            return append_error(e.error_code)
        assert isinstance(result, EndResult)
        if result.markers is not None:
            # The prepare record is committed and the client is answered now; the
            # markers and the completion follow (Kafka answers EndTxn v1 the same way).
            (self.metrics.commits if commit else self.metrics.aborts).inc()
            self._send_markers(partition, result.markers)
        return result.error

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Sequence[tuple[str, int]], *,
                     add: bool = False) -> dict[tuple[str, int], ErrorCode]:
        """The produce path's question (KIP-890): asked of the broker that leads the
        transactional id's partition of __transaction_state, this one or another."""
        if not transactional_id:
            return dict.fromkeys(partitions, ErrorCode.invalid_request)
        try:
            partition = self.partition_of(transactional_id)
        except KafkaError as e:
            return dict.fromkeys(partitions, e.error_code)
        state = self.broker.metadata.image.partition(TRANSACTION_STATE_TOPIC, partition)
        if state is None or state.leader == NO_LEADER:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        if state.leader != self.broker.config.broker_id:
            return await ask_coordinator(self.broker, state.leader, transactional_id,
                                         producer_id, producer_epoch, partitions, add=add)
        return await self.verify_here(transactional_id, producer_id, producer_epoch,
                                      partitions, add=add)

    async def verify_here(self, transactional_id: str, producer_id: int,
                          producer_epoch: int, partitions: Sequence[tuple[str, int]], *,
                          add: bool = False) -> dict[tuple[str, int], ErrorCode]:
        """Kafka's handleVerifyPartitionsInTransaction on this broker's coordinator: a
        read of the shard, no write (NOT_COORDINATOR when this broker does not own the
        transactional id); with ``add``, AddPartitionsToTxn as a broker sends it for
        Produce v12+."""
        if not transactional_id:
            return dict.fromkeys(partitions, ErrorCode.invalid_request)
        if add:
            return dict.fromkeys(partitions, await self.add_partitions(
                transactional_id, producer_id, producer_epoch, list(partitions)))
        try:
            return await self.read(transactional_id, lambda shard: shard.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions))
        except KafkaError as e:
            return dict.fromkeys(partitions, e.error_code)

    # -- markers -----------------------------------------------------------------------

    def _send_markers(self, partition: int, job: MarkerJob) -> None:
        key = (partition, job.transactional_id)
        running = self._marker_tasks.get(key)
        if (running is not None and not running.done()) or self._stopped:
            return
        task = asyncio.get_running_loop().create_task(self._markers_task(partition, job))
        self._marker_tasks[key] = task
        task.add_done_callback(lambda t: self._marker_tasks.pop(key, None)
                               if self._marker_tasks.get(key) is t else None)

    async def _markers_task(self, partition: int, job: MarkerJob) -> None:
        try:
            await self._write_markers(partition, job)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the scan of prepared transactions retries
            self.log.error("writing transaction markers failed",
                           transactional_id=job.transactional_id, error=repr(e))

    def _on_loaded(self, partition: int, jobs: list[MarkerJob]) -> None:
        """A partition of __transaction_state is loaded: the transactions a previous
        leader left in PrepareCommit/PrepareAbort get their markers now, as Kafka's
        loadTransactionsForTxnTopicPartition does."""
        for job in jobs:
            self.log.info("resending the markers of a prepared transaction",
                          transactional_id=job.transactional_id, partition=partition,
                          result=job.result.name)
            self._send_markers(partition, job)

    async def _write_markers(self, partition: int, job: MarkerJob) -> None:
        pending = set(job.partitions)
        while pending:
            image = self.broker.metadata.image
            # A deleted topic takes no markers (Kafka's channel drops its partitions).
            pending = {tp for tp in pending if image.partition(*tp) is not None}
            state = image.partition(TRANSACTION_STATE_TOPIC, partition)
            if not pending or state is None:
                break
            if partition not in self.runtime.loaded_shards():
                return  # the next leader resends them
            marker = TxnMarker(job.producer_id, job.producer_epoch, state.leader_epoch,
                               job.result, tuple(sorted(pending)))
            errors = await write_markers(self.broker, marker)
            for tp in list(pending):
                error = errors.get(tp, ErrorCode.unknown_server_error)
                if error == ErrorCode.none or error in _MARKERS_SKIPPED:
                    pending.discard(tp)
                elif error in _MARKERS_FENCED:
                    self.log.warning("transaction markers fenced; leaving the transaction "
                                     "to the newer coordinator",
                                     transactional_id=job.transactional_id,
                                     topic=tp[0], partition=tp[1], error=error.name)
                    return
            if pending:
                self.log.debug("retrying transaction markers",
                               transactional_id=job.transactional_id,
                               partitions=sorted(pending))
                await asyncio.sleep(MARKER_RETRY_BACKOFF_S)
        try:
            await self.runtime.write(partition,
                                     lambda shard, _reply: shard.complete_transaction(job))
        except KafkaError as e:
            # Still prepared in the log: the scan or the next leader completes it.
            self.log.warning("cannot complete the transaction",
                             transactional_id=job.transactional_id, error=e.error_code.name)

    # -- periodic scans ----------------------------------------------------------------

    async def _every(self, interval_ms: int, scan: Callable[[int], Any]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            for partition in list(self.runtime.loaded_shards()):
                try:
                    await scan(partition)
                except KafkaError as e:
                    self.log.debug("transaction scan skipped a partition", partition=partition,
                                   error=e.error_code.name)
                except Exception as e:  # the scans must go on
                    self.log.error("transaction scan failed", partition=partition,
                                   scan=getattr(scan, "__name__", "?"), error=repr(e))

    async def _abort_timed_out(self, partition: int) -> None:
        jobs = await self.runtime.write(partition,
                                        lambda shard, _reply: shard.abort_timed_out())
        for job in jobs:
            self.metrics.aborts.inc()
            self._send_markers(partition, job)

    async def _resume_prepared(self, partition: int) -> None:
        jobs = await self.runtime.write(partition,
                                        lambda shard, _reply: shard.prepared_transactions())
        for job in jobs:
            self._send_markers(partition, job)

    async def _remove_expired(self, partition: int) -> None:
        expiration_ms = self.settings.transactional_id_expiration_ms
        removed = await self.runtime.write(
            partition, lambda shard, _reply: shard.remove_expired(expiration_ms))
        if removed:
            self.log.info("removed expired transactional ids", partition=partition,
                          count=removed)

    # -- reads -------------------------------------------------------------------------

    def read(self, transactional_id: str, fn: Callable[[TxnShard], T]) -> asyncio.Future[T]:
        return self.runtime.read(self.partition_of(transactional_id), fn)
