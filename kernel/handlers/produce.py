"""Produce (key 0): the walk of a batch from the socket to the disk and back.

1. :func:`handle`: the request's checks per partition (acks, topic id, WRITE on the
   topic, internal topics; transactional records need WRITE on the transactional id),
   each partition a :class:`PartitionResult`.
2. ``ReplicaManager.handle_produce_append`` (kernel/replica/manager.py, Kafka's
   ``appendRecords``): KIP-890 verification of a transaction's first batch in a
   partition (``produce_append.verify_transactions``), then ``_append_to_local_log`` ->
   ``append_records`` -> ``Partition.append_records_to_leader`` ->
   ``Log.append_as_leader`` (validation, offsets, producer state, the segment write),
   then ``_maybe_wait``: the fsync flush.messages asks for, and for acks=-1 the
   ``DelayedProduce`` in the Produce purgatory until the high watermark (the in-sync
   replicas) passes the append or the request's timeout does.
3. :func:`_finish`: acks=0 writes no response (an error closes the connection, as Kafka
   does, so the client refreshes its metadata); else :func:`_response` builds the
   answer.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.cluster import is_internal_topic
from kernel.handlers.partition_requests import LeaderHints, TopicAccess
from kernel.protocol.build import make, response_module
from kernel.protocol.codec import InvalidRequest
from kernel.protocol.records import ATTRIBUTES_OFFSET, TRANSACTIONAL_FLAG
from kernel.replica.produce_append import ProducePartitionStatus, TransactionSupportedOperation
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


@dataclass(slots=True)
class PartitionResult(ProducePartitionStatus):
    """A partition's status, with the topic as the request names it."""

    request_topic: str | None = None  # None in v13, which names topics by id
    topic_id: uuid.UUID | None = None


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
        transactional_id = None
    for topic_data in request.topic_data:
        name = access.name(topic_data, "name")
        topic_id = getattr(topic_data, "topic_id", None)
        request_topic = getattr(topic_data, "name", None)
        for data in topic_data.partition_data:
            result = PartitionResult(name, data.index, data.records,
                                     request_topic=request_topic, topic_id=topic_id)
            results.append(result)
            if refused != ErrorCode.none:
                result.error = refused
            elif name is None:
                result.error = ErrorCode.unknown_topic_id
            elif acks not in (-1, 0, 1):
                result.error = ErrorCode.invalid_required_acks
            elif not access.allowed(name):
                result.error = ErrorCode.topic_authorization_failed
            elif is_internal_topic(name):
                # Only the coordinators write here. (Kafka still lets a client whose id
                # is "__admin_client" append; any client can send that id, and one
                # undecodable record stops the coordinator loading its partition.)
                result.error = ErrorCode.invalid_topic_exception
    waiting = services.replicas.handle_produce_append(
        results, acks, int(request.timeout.total_seconds() * 1000), now_ms,
        services.metadata.image, transactional_id,
        TransactionSupportedOperation.for_produce_version(ctx.api_version))
    if waiting is None:
        return _finish(ctx, request, results)
    return _finish_after(waiting, ctx, request, results)


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


async def _finish_after(waiting: Awaitable[None], ctx: RequestContext, request: Any,
                        results: list[PartitionResult]) -> Any:
    await waiting
    return _finish(ctx, request, results)


def _finish(ctx: RequestContext, request: Any, results: list[PartitionResult]) -> Any:
    if request.acks == 0:
        failed = [r for r in results if r.error != ErrorCode.none]
        for r in failed:
            _note_refused(ctx, r)
        if failed:
            raise InvalidRequest(
                f"produce with acks=0 failed for {failed[0].request_topic}-{failed[0].index}: "
                f"{failed[0].error.name}; closing so the client refreshes metadata"
            )
        return None
    return _response(ctx, results)


def _note_refused(ctx: RequestContext, r: PartitionResult) -> None:
    """One log line per client address per period for a batch the broker will not store."""
    services = ctx.services
    if r.error in _REFUSED_INPUT and services.refused_input_notices.due(
            ctx.session.peer.rsplit(":", 1)[0]):
        services.log.warning("produce refused", topic=r.topic, partition=r.index,
                             error=r.error.name, reason=r.message, client=ctx.session.peer)


def _response(ctx: RequestContext, results: list[PartitionResult]) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    hints = LeaderHints(ctx, m)
    by_topic: dict[tuple[str | None, uuid.UUID | None], list[Any]] = {}
    for r in results:
        if r.error != ErrorCode.none:
            ctx.services.metrics.error(r.error)
            _note_refused(ctx, r)
        by_topic.setdefault((r.request_topic, r.topic_id), []).append(make(
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
            **hints.current_leader(r.topic, r.index, r.error),
        ))
    topics = tuple(
        make(m.TopicProduceResponse, name=name, topic_id=topic_id,
             partition_responses=tuple(parts))
        for (name, topic_id), parts in by_topic.items()
    )
    return make(m.ProduceResponse, responses=topics, throttle_time=datetime.timedelta(0),
                node_endpoints=hints.node_endpoints)
