"""Produce (key 0): validate and append each partition's batch on the leader.

acks=0 writes no response (an error closes the connection, as Kafka does, so the client
refreshes its metadata); acks=1 answers after the local append; acks=-1 waits in the
Produce purgatory until the high watermark covers the append (the in-sync replicas
have it) or the request's timeout passes.
"""

from __future__ import annotations

import datetime
import inspect
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.cluster import is_internal_topic
from kernel.handlers.partition_requests import LeaderHints, TopicAccess
from kernel.log.validator import RecordValidationError
from kernel.protocol.build import make, response_module
from kernel.protocol.codec import InvalidRequest
from kernel.protocol.errors import KafkaError
from kernel.protocol.records import (
    ATTRIBUTES_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG,
    read_batch_header,
)
from kernel.purgatory import DelayedResponse
from kernel.replica.partition import Partition
from kernel.requests import RequestContext
from kernel.services import TransactionVerifier

API_KEY = 0
MIN_VERSION = 3
# v13 (KIP-516) addresses topics by id, which the handler serves.
MAX_VERSION = 13
# KAFKA-18659, as Kafka 4 does: served from v3 but advertised from v0. librdkafka before
# the fix of its issue #4956 (kcat 1.7 ships librdkafka 2.0) checks gzip, snappy and lz4
# support against Produce v0 exactly, and otherwise sends those batches uncompressed
# without a word. Clients pick the highest version both sides have, so none sends v0-2;
# a request that does is refused like any version outside the served range.
ADVERTISED_MIN_VERSION = 0

EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)

# A client's batch the broker will not store: a log line says why (a poison batch is
# otherwise only visible to the client that sent it), once per client address per
# period, since the client chooses how often to send one.
_REFUSED_INPUT = frozenset({ErrorCode.corrupt_message, ErrorCode.invalid_record,
                            ErrorCode.message_too_large})
# The log's producer-state checks: Kafka answers them with the log start offset
# (ReplicaManager's catch-all, processFailedRecord).
_PRODUCER_STATE_ERRORS = frozenset({ErrorCode.out_of_order_sequence_number,
                                    ErrorCode.invalid_producer_epoch})


def _has_transactional_records(request: Any) -> bool:
    """Kafka's ProduceRequest.hasTransactionalRecords: the first batch's attributes of
    each partition (a batch header field, no record read)."""
    for topic_data in request.topic_data:
        for data in topic_data.partition_data:
            records = data.records
            if records is not None and len(records) > ATTRIBUTES_OFFSET + 1 and \
                    records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
                return True
    return False


@dataclass(slots=True)
class PartitionResult:
    topic: str | None  # as the request names it (None in v13, which uses ids)
    topic_id: uuid.UUID | None
    index: int
    name: str | None  # the topic's name, resolved from its id where needed
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


def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    acks = request.acks
    access = TopicAccess(ctx, "WRITE")
    now_ms = int(time.time() * 1000)
    results: list[PartitionResult] = []
    # As Kafka: transactional records need the request's transactional id and WRITE on
    # it, or every partition is refused.
    transactional_id = getattr(request, "transactional_id", None)
    refused = ErrorCode.none
    if _has_transactional_records(request) and (
            transactional_id is None
            or not ctx.authorize(ctx.session, "WRITE", "TRANSACTIONAL_ID", transactional_id)):
        refused = ErrorCode.transactional_id_authorization_failed
    accepted: list[tuple[PartitionResult, str, Any]] = []
    for topic_data in request.topic_data:
        name = access.name(topic_data, "name")
        topic_id = getattr(topic_data, "topic_id", None)
        for data in topic_data.partition_data:
            result = PartitionResult(getattr(topic_data, "name", None), topic_id, data.index,
                                     name)
            results.append(result)
            if refused != ErrorCode.none:
                result.error = refused
                continue
            if name is None:
                result.error = ErrorCode.unknown_topic_id
                continue
            if acks not in (-1, 0, 1):
                result.error = ErrorCode.invalid_required_acks
                continue
            if not access.allowed(name):
                result.error = ErrorCode.topic_authorization_failed
                continue
            if is_internal_topic(name):
                # Only the coordinators write here. (Kafka still lets a client whose id
                # is "__admin_client" append; any client can send that id, and one
                # undecodable record stops the coordinator loading its partition.)
                result.error = ErrorCode.invalid_topic_exception
                continue
            accepted.append((result, name, data))
    if transactional_id is not None and refused == ErrorCode.none and \
            services.config.transaction_partition_verification_enable:
        verifying = _first_transactional_batches(ctx, accepted)
        if verifying:
            verifier = services.coordinators.transaction_verifier()
            if verifier is not None:
                return _verify_then_append(ctx, request, transactional_id, verifier,
                                           results, accepted, verifying, now_ms)
    for result, name, data in accepted:
        _append(ctx, result, name, data, acks, now_ms)
    return _finish(ctx, request, results)


@dataclass(slots=True)
class _Verifying:
    """A transactional batch that would open its producer's transaction in a partition."""

    partition: Partition
    producer_id: int
    producer_epoch: int


def _first_transactional_batches(ctx: RequestContext, accepted: list[
        tuple[PartitionResult, str, Any]]) -> dict[int, _Verifying]:
    """By index in ``accepted``: the partitions where the producer has no open
    transaction yet, which the transaction coordinator must confirm were added (KIP-890
    part 1). A batch of an already open transaction costs a header read and a lookup."""
    verifying: dict[int, _Verifying] = {}
    image = ctx.services.metadata.image
    for i, (_result, name, data) in enumerate(accepted):
        records = data.records
        if records is None or len(records) < RECORD_BATCH_OVERHEAD or \
                not records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
            continue
        try:
            partition = ctx.services.replicas.leader_partition(name, data.index, image)
        except KafkaError:
            continue  # answered by the append
        header = read_batch_header(records)
        if partition.log.producer_state.needs_verification(header.producer_id,
                                                           header.producer_epoch):
            verifying[i] = _Verifying(partition, header.producer_id, header.producer_epoch)
    return verifying


# Verification answers older clients may not retry: Kafka turns them into
# NOT_ENOUGH_REPLICAS, which clients retry without a metadata refresh.
_VERIFICATION_RETRIABLE = frozenset({
    ErrorCode.concurrent_transactions, ErrorCode.network_exception,
    ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator})


def _verification_error(error: ErrorCode, api_version: int) -> tuple[ErrorCode, str | None]:
    """What the producer hears (Kafka's AddPartitionsToTxnManager and ReplicaManager)."""
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch, None
    if error == ErrorCode.transaction_abortable and api_version <= 10:
        error = ErrorCode.invalid_txn_state  # clients before KIP-890 part 2
    if error == ErrorCode.invalid_txn_state:
        return error, "Partition was not added to the transaction"
    if error in _VERIFICATION_RETRIABLE:
        return ErrorCode.not_enough_replicas, (
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {error.name.upper()}")
    return error, None


async def _verify_then_append(ctx: RequestContext, request: Any, transactional_id: str,
                              verifier: TransactionVerifier, results: list[PartitionResult],
                              accepted: list[tuple[PartitionResult, str, Any]],
                              verifying: dict[int, _Verifying], now_ms: int) -> Any:
    # Taken before asking: a marker written meanwhile drops it (Kafka's VerificationGuard).
    guards = {i: v.partition.log.producer_state.start_verification(v.producer_id)
              for i, v in verifying.items()}
    first = next(iter(verifying.values()))
    tps = [(accepted[i][1], accepted[i][2].index) for i in verifying]
    # Produce v12+ is KIP-890 part 2's: the broker adds the partition itself (Kafka's
    # addPartition operation); before, it only verifies.
    answers = await verifier(transactional_id, first.producer_id, first.producer_epoch, tps,
                             add=ctx.api_version >= 12)
    for (i, v), tp in zip(verifying.items(), tps, strict=True):
        result = accepted[i][0]
        error = answers.get(tp, ErrorCode.unknown_server_error)
        if error != ErrorCode.none:
            result.error, result.message = _verification_error(error, ctx.api_version)
            continue
        state = v.partition.log.producer_state
        if state.needs_verification(v.producer_id, v.producer_epoch) and \
                not state.is_verified(v.producer_id, guards[i]):
            # The transaction ended while it was verified: appending would open a new
            # one nobody ends (Kafka's check in UnifiedLog).
            result.error = ErrorCode.invalid_txn_state
            result.message = "Record was not part of an ongoing transaction"
    for result, name, data in accepted:
        if result.error == ErrorCode.none:
            _append(ctx, result, name, data, request.acks, now_ms)
    answer = _finish(ctx, request, results)
    return await answer if inspect.isawaitable(answer) else answer


def _append(ctx: RequestContext, result: PartitionResult, name: str, data: Any, acks: int,
            now_ms: int) -> None:
    services = ctx.services
    partition: Partition | None = None
    try:
        partition = services.replicas.leader_partition(name, data.index,
                                                       services.metadata.image)
        if data.records is None:
            raise KafkaError(ErrorCode.invalid_record, "null records")
        info = services.replicas.append_records(partition, data.records, acks, now_ms)
    except KafkaError as e:
        result.error = e.error_code
        result.message = e.message
        if isinstance(e, RecordValidationError) and partition is not None:
            result.record_errors = e.record_errors
            # Kafka reports it with record errors (processFailedRecord).
            result.log_start_offset = partition.log.log_start_offset
        elif e.error_code in _PRODUCER_STATE_ERRORS and partition is not None:
            result.log_start_offset = partition.log.log_start_offset
        if e.error_code in _REFUSED_INPUT and services.refused_input_notices.due(
                ctx.session.peer.rsplit(":", 1)[0]):
            services.log.warning("produce refused", topic=name, partition=data.index,
                                 error=e.error_code.name, reason=e.message,
                                 client=ctx.session.peer)
        return
    services.metrics.records_in(name, info.records_count, len(data.records))
    result.base_offset = info.first_offset
    result.log_append_time = info.log_append_time
    result.log_start_offset = info.log_start_offset
    result.required_offset = info.last_offset + 1
    result.partition = partition


def _finish(ctx: RequestContext, request: Any, results: list[PartitionResult]) -> Any:
    acks = request.acks
    if acks == 0:
        failed = [r for r in results if r.error != ErrorCode.none]
        if failed:
            raise InvalidRequest(
                f"produce with acks=0 failed for {failed[0].topic}-{failed[0].index}: "
                f"{failed[0].error.name}; closing so the client refreshes metadata"
            )
        return None
    # flush.messages reached (e.g. 1: fsync every message): as Kafka, the append is
    # acknowledged only once it is on disk; the fsync runs off the event loop.
    must_flush = [r.partition for r in results if r.partition is not None
                  and r.partition.log.unflushed_messages >= r.partition.log.config.flush_messages]
    if must_flush or (acks == -1 and any(not _replicated(r) for r in results)):
        return _wait_for_durability(ctx, request, results, must_flush)
    return _response(ctx, results)


def _replicated(result: PartitionResult) -> bool:
    p = result.partition
    return p is None or result.error != ErrorCode.none or p.high_watermark >= result.required_offset


class DelayedProduce(DelayedResponse):
    """Waits until every appended partition's high watermark passes its append."""

    def __init__(self, timeout_ms: int, results: list[PartitionResult]) -> None:
        super().__init__(timeout_ms)
        self.results = results

    def try_complete(self) -> bool:
        for r in self.results:
            if r.partition is not None and not r.partition.is_leader \
                    and r.error == ErrorCode.none:
                r.error = ErrorCode.not_leader_or_follower
        if all(_replicated(r) for r in self.results):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        for r in self.results:
            if not _replicated(r):
                r.error = ErrorCode.request_timed_out
            elif r.error == ErrorCode.none and r.partition is not None and \
                    len(r.partition.maximal_isr) < r.partition.log.config.min_insync_replicas:
                # Kafka's checkEnoughReplicasReachOffset: the ISR shrank below
                # min.insync.replicas while the write waited; it is in the log, but not
                # as safe as acks=all promised.
                r.error = ErrorCode.not_enough_replicas_after_append
        super().on_complete()


async def _wait_for_durability(ctx: RequestContext, request: Any,
                               results: list[PartitionResult],
                               must_flush: list[Partition]) -> Any:
    for partition in must_flush:
        await ctx.services.logs.flush_log(partition.log)
    if request.acks != -1 or all(_replicated(r) for r in results):
        return _response(ctx, results)
    op = DelayedProduce(int(request.timeout.total_seconds() * 1000), results)
    await op.wait_in(ctx.services.produce_purgatory,
                     [r.partition.key for r in results if r.partition is not None])
    return _response(ctx, results)


def _response(ctx: RequestContext, results: list[PartitionResult]) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    hints = LeaderHints(ctx, m)
    by_topic: dict[tuple[str | None, uuid.UUID | None], list[Any]] = {}
    for r in results:
        if r.error != ErrorCode.none:
            ctx.services.metrics.error(r.error)
        by_topic.setdefault((r.topic, r.topic_id), []).append(make(
            m.PartitionProduceResponse,
            index=r.index,
            error_code=r.error,
            base_offset=r.base_offset,
            log_append_time=(EPOCH + datetime.timedelta(milliseconds=r.log_append_time)
                             if r.log_append_time >= 0 else None),
            log_start_offset=r.log_start_offset,
            record_errors=tuple(
                make(m.BatchIndexAndErrorMessage, batch_index=index,
                     batch_index_error_message=text)
                for index, text in r.record_errors
            ) if r.record_errors and hasattr(m, "BatchIndexAndErrorMessage") else (),
            error_message=r.message if r.error != ErrorCode.none else None,
            **hints.current_leader(r.name, r.index, r.error),
        ))
    topics = tuple(
        make(m.TopicProduceResponse, name=name, topic_id=topic_id,
             partition_responses=tuple(parts))
        for (name, topic_id), parts in by_topic.items()
    )
    return make(m.ProduceResponse, responses=topics, throttle_time=datetime.timedelta(0),
                node_endpoints=hints.node_endpoints)
