"""Produce (key 0): validate and append each partition's batch on the leader.

acks=0 writes no response (an error closes the connection, as Kafka does, so the client
refreshes its metadata); acks=1 answers after the local append; acks=-1 waits in the
Produce purgatory until the high watermark covers the append (the in-sync replicas
have it) or the request's timeout passes.
"""

from __future__ import annotations

import datetime
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
from kernel.protocol.records import ATTRIBUTES_OFFSET, TRANSACTIONAL_FLAG
from kernel.purgatory import DelayedResponse
from kernel.replica.partition import Partition
from kernel.requests import RequestContext

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
    image = services.metadata.image
    replicas = services.replicas
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
            try:
                partition = replicas.leader_partition(name, data.index, image)
                if data.records is None:
                    raise KafkaError(ErrorCode.invalid_record, "null records")
                info = replicas.append_records(partition, data.records, acks, now_ms)
            except KafkaError as e:
                result.error = e.error_code
                result.message = e.message
                if isinstance(e, RecordValidationError):
                    result.record_errors = e.record_errors
                    # Kafka reports it with record errors (processFailedRecord).
                    result.log_start_offset = partition.log.log_start_offset
                elif e.error_code in _PRODUCER_STATE_ERRORS:
                    result.log_start_offset = partition.log.log_start_offset
                if e.error_code in _REFUSED_INPUT and services.refused_input_notices.due(
                        ctx.session.peer.rsplit(":", 1)[0]):
                    services.log.warning("produce refused", topic=name, partition=data.index,
                                         error=e.error_code.name, reason=e.message,
                                         client=ctx.session.peer)
                continue
            services.metrics.records_in(name, info.records_count, len(data.records))
            result.base_offset = info.first_offset
            result.log_append_time = info.log_append_time
            result.log_start_offset = info.log_start_offset
            result.required_offset = info.last_offset + 1
            result.partition = partition
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
