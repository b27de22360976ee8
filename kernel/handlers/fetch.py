"""Fetch (key 1): records sent from the segment files, with long polls in purgatory.

Consumers read below the high watermark; follower replicas (replica id >= 0) read up to
the log end and report their progress to the leader. A follower needs CLUSTER_ACTION on
the cluster and must be one of the partition's replicas. When fewer than ``min_bytes``
are available the request waits in the Fetch purgatory, watched on its partitions, until
enough bytes become readable between the fetch offset's position and the readable end
(the log end for followers, the high watermark for consumers, the last stable offset
for READ_COMMITTED ones), as Kafka's DelayedFetch measures, or ``max_wait`` passes;
then it reads again and answers. READ_COMMITTED answers list the aborted transactions
overlapping the records returned (the log's transaction index), so consumers can drop
their records.

A follower's fetch of a partition throttled by the leader's replication quota (KIP-73,
kernel/replica/replication_quota.py) is read as usual (the follower's progress counts)
but answered without records while the quota is exceeded and the follower is out of the
ISR; those bytes do not complete a long poll either. The bytes answered for throttled
partitions are recorded against the quota, in sync or not, as Kafka's
sizeOfThrottledPartitions (here: their record bytes).

Incremental fetch sessions (KIP-227, kernel/fetch_session.py) as Kafka's FetchManager: a
full fetch with epoch 0 is answered a new session's id when the broker's cache has room,
epoch -1 fetches without one, and a request naming a session updates it and reads all of
its partitions, answering only those with something to report. A session's errors
(unknown id, wrong epoch, topic ids on one side only) are answered at the top level with
no partitions. Partitions Kafka refuses before reading (unknown topic id, not
authorized, not in the metadata) are answered but do not cut a long poll short.
"""

from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    FullFetch,
    IncrementalFetch,
    Key,
    SessionError,
)
from kernel.handlers.partition_requests import LeaderHints, TopicAccess
from kernel.hookspecs import CLUSTER_NAME
from kernel.log.file_records import FileRecords, next_offset_after
from kernel.log.offset_metadata import LogOffsetMetadata
from kernel.log.txn_index import AbortedTxn
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import KafkaError
from kernel.purgatory import DelayedResponse
from kernel.replica.partition import Partition
from kernel.requests import RequestContext

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 18

READ_COMMITTED = 1
ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class FetchPartitionState:
    topic: str | None  # None: unknown topic id
    topic_id: uuid.UUID | None
    index: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    # A follower's own log start offset (Fetch v5+), for the DeleteRecords low watermark.
    follower_log_start_offset: int = -1
    partition: Partition | None = None
    error: ErrorCode = ErrorCode.none
    records: bytes | memoryview | FileRecords = b""  # FileRecords: sent by sendfile
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    diverging: tuple[int, int] | None = None
    # Where the fetch offset is in the log: the delayed fetch measures bytes from it.
    fetch_offset_metadata: LogOffsetMetadata | None = None
    aborted: list[AbortedTxn] | None = None  # READ_COMMITTED answers


def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    replica_id = fetch_replica_id(request)
    follower = replica_id >= 0
    image = services.metadata.image
    access = TopicAccess(ctx, "READ")
    requested: list[FetchPartitionState] = []
    for topic in request.topics:
        name = access.name(topic, "topic")
        topic_id = getattr(topic, "topic_id", None)
        for p in topic.partitions:
            requested.append(FetchPartitionState(
                name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1), getattr(p, "last_fetched_epoch", -1),
                getattr(p, "log_start_offset", -1),
            ))
    # Fetch v4-6 have no session fields: Kafka reads them as a sessionless full fetch.
    context = services.fetch_sessions.new_context(
        ctx.api_version, getattr(request, "session_id", INVALID_SESSION_ID),
        getattr(request, "session_epoch", FINAL_EPOCH), follower, requested,
        _forgotten(request), _now_ms())
    if isinstance(context, SessionError):
        return _top_level_error(ctx, context.error)
    states = (requested if not isinstance(context, IncrementalFetch)
              else _session_states(context, image))
    # Kafka: a follower fetch needs CLUSTER_ACTION; without it every partition is refused.
    cluster_action = follower and ctx.authorize(
        ctx.session, "CLUSTER_ACTION", "CLUSTER", CLUSTER_NAME)
    check_topic_ids = ctx.api_version >= 13
    for state in states:
        name = state.topic
        if name is None:
            state.error = ErrorCode.unknown_topic_id
            continue
        if not (cluster_action if follower else access.allowed(name)):
            state.error = ErrorCode.topic_authorization_failed
            continue
        try:
            partition = services.replicas.leader_partition(name, state.index, image)
            if check_topic_ids and partition.topic_id != state.topic_id:
                # A session's topic id whose name now belongs to another topic.
                raise KafkaError(ErrorCode.inconsistent_topic_id)
            partition.check_leader_epoch(state.current_leader_epoch)
            if follower:
                partition.check_follower(replica_id, state.current_leader_epoch)
            state.partition = partition
        except KafkaError as e:
            state.error = e.error_code
    total = _read_all(ctx, request, states, replica_id)
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    # As Kafka's fetchMessages: answered at once when nothing can be read (every
    # partition refused before reading), or a read failed or found a diverging epoch.
    refused = _FOLLOWER_REFUSED_BEFORE_READ if follower else _REFUSED_BEFORE_READ
    readable = any(s.error not in refused for s in states)
    errors = any((s.error != ErrorCode.none and s.error not in refused)
                 or s.diverging is not None for s in states)
    if total >= request.min_bytes or max_wait_ms <= 0 or errors or not readable:
        return _response(ctx, request, states, context)
    return _long_poll(ctx, request, states, replica_id, max_wait_ms, context)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _forgotten(request: Any) -> list[Key]:
    """The partitions an incremental fetch removes from its session: by topic id from
    Fetch v13, by name before."""
    keys: list[Key] = []
    for topic in getattr(request, "forgotten_topics_data", ()):
        ref = getattr(topic, "topic_id", None) or getattr(topic, "topic", None)
        keys.extend((ref, p) for p in topic.partitions)
    return keys


def _session_states(context: IncrementalFetch,
                    image: Any) -> list[FetchPartitionState]:
    """Every partition of the session, in its fetch order, with its cached request
    parameters; a topic id unknown when it was added is looked up again (Kafka's
    maybeResolveUnknownName)."""
    states = []
    for c in context.session.partitions.values():
        if c.topic is None:
            found = image.topics_by_id.get(c.topic_id)
            if found is not None:
                c.topic = found.name
        states.append(FetchPartitionState(
            c.topic, c.topic_id, c.index, c.fetch_offset, c.max_bytes,
            c.current_leader_epoch, c.last_fetched_epoch, c.fetcher_log_start_offset))
    return states


def fetch_replica_id(request: Any) -> int:
    """A Fetch's replica id (in replica_state from v15): a follower's id, -1 for a
    consumer."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


def _readable_end(p: Partition, replica_id: int, read_committed: bool) -> int:
    """The offset a fetch may read up to: the log end for a follower, else the high
    watermark (the last stable offset for read_committed consumers)."""
    if replica_id >= 0:
        return p.log_end_offset
    return p.last_stable_offset if read_committed else p.high_watermark


def _read_all(ctx: RequestContext, request: Any, states: list[FetchPartitionState],
              replica_id: int) -> int:
    """Read every partition, sharing the response's max_bytes; the first partition
    with data returns at least one whole batch even when it is larger than the limits
    (KIP-74), so a consumer can always make progress."""
    remaining = request.max_bytes
    if replica_id < 0:
        remaining = min(remaining, ctx.services.config.fetch_max_bytes)
    total = 0
    read_committed = request.isolation_level == READ_COMMITTED
    metrics = ctx.services.metrics
    quotas = ctx.services.replicas.replication_quotas
    for s in states:
        p = s.partition
        if p is None or s.error != ErrorCode.none:
            continue
        s.high_watermark = p.high_watermark
        s.last_stable_offset = p.last_stable_offset
        s.log_start_offset = p.log_start_offset
        if s.last_fetched_epoch >= 0:
            epoch, end_offset = p.last_offset_for_leader_epoch(s.last_fetched_epoch)
            if epoch != s.last_fetched_epoch or end_offset < s.fetch_offset:
                s.diverging = (epoch, end_offset)
                continue
        try:
            info = p.read_records(s.fetch_offset, min(s.max_bytes, remaining),
                                  _readable_end(p, replica_id, read_committed),
                                  min_one_batch=total == 0)
        except KafkaError as e:
            s.error = e.error_code
            continue
        s.fetch_offset_metadata = info.fetch_offset_metadata
        if replica_id >= 0:
            ctx.services.replicas.follower_fetched(p, replica_id, s.fetch_offset,
                                                   s.follower_log_start_offset)
        if replica_id >= 0 and quotas.should_leader_throttle(p.topic, p.partition, p.isr,
                                                             replica_id):
            quotas.leader.held_back()
            continue
        if info.first_entry_incomplete:
            # As Kafka does from Fetch v3: a batch cut by the limits is not sent; the
            # partition comes first in a later request and gets it whole (KIP-74).
            continue
        s.records = info.records
        size = len(info.records)
        if read_committed and replica_id < 0:
            # Kafka's addAbortedTransactions: those overlapping what is returned.
            upper = next_offset_after(info.records) if size else None
            try:
                s.aborted = [] if upper is None else \
                    p.collect_aborted_transactions(s.fetch_offset, upper)
            except KafkaError as e:
                s.error, s.records = e.error_code, b""
                continue
        if size:
            total += size
            remaining = max(remaining - size, 0)
            if replica_id < 0:
                metrics.records_out(p.topic, info.records_count, size)
    return total


class DelayedFetch(DelayedResponse):
    """Completes once enough bytes became readable on the watched partitions, or when
    one of them can no longer be read here (leadership moved, topic deleted)."""

    def __init__(self, ctx: RequestContext, request: Any, states: list[FetchPartitionState],
                 replica_id: int, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.ctx = ctx
        self.states = states
        self.replica_id = replica_id
        self.read_committed = request.isolation_level == READ_COMMITTED
        self.min_bytes = request.min_bytes

    def try_complete(self) -> bool:
        """Kafka's DelayedFetch.tryComplete: the bytes from each fetch offset's position
        to the readable end's, capped by the partition's max bytes; a readable end on
        another segment (a roll, a truncation) completes at once."""
        replicas = self.ctx.services.replicas
        quotas = replicas.replication_quotas
        accumulated = 0
        for s in self.states:
            p = s.partition
            start = s.fetch_offset_metadata
            if p is None or start is None:
                continue
            if replicas.get_partition(p.topic, p.partition) is not p or not p.is_leader:
                return self.force_complete()
            end_offset = _readable_end(p, self.replica_id, self.read_committed)
            if end_offset == start.message_offset:
                continue
            end = p.convert_to_offset_metadata(end_offset)
            if start.message_offset_only or not start.on_same_segment(end):
                return self.force_complete()
            if self.replica_id >= 0 and quotas.should_leader_throttle(
                    p.topic, p.partition, p.isr, self.replica_id):
                continue  # Kafka's DelayedFetch: throttled bytes do not count
            if start.message_offset < end.message_offset:
                accumulated += min(end.position_diff(start), s.max_bytes)
        if accumulated >= self.min_bytes:
            return self.force_complete()
        return False


async def _long_poll(ctx: RequestContext, request: Any, states: list[FetchPartitionState],
                     replica_id: int, max_wait_ms: int, context: FetchContext) -> Any:
    op = DelayedFetch(ctx, request, states, replica_id, max_wait_ms)
    await op.wait_in(ctx.services.fetch_purgatory,
                     [s.partition.key for s in states if s.partition is not None])
    # Read again: the partitions may have moved on, been deleted or changed leader.
    image = ctx.services.metadata.image
    for s in states:
        s.records = b""
        s.diverging = None
        s.aborted = None
        if s.partition is not None and s.topic is not None:
            try:
                s.partition = ctx.services.replicas.leader_partition(s.topic, s.index, image)
            except KafkaError as e:
                s.error = e.error_code
                s.partition = None
    _read_all(ctx, request, states, replica_id)
    return _response(ctx, request, states, context)


# Errors Kafka finds in the request before reading any log (KafkaApis.handleFetchRequest);
# a follower's partitions are not looked up in the metadata first: its unknown partitions
# are found by the read.
_REFUSED_BEFORE_READ = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id,
    ErrorCode.topic_authorization_failed,
})
_FOLLOWER_REFUSED_BEFORE_READ = frozenset({
    ErrorCode.unknown_topic_id, ErrorCode.topic_authorization_failed,
})


def _response(ctx: RequestContext, request: Any, states: list[FetchPartitionState],
              context: FetchContext) -> Any:
    for s in states:
        if s.error != ErrorCode.none:
            # As Kafka: a failed partition reports no offsets (and a session remembers
            # the -1s, so the partition is answered again once it recovers).
            s.high_watermark = s.last_stable_offset = s.log_start_offset = -1
    if fetch_replica_id(request) >= 0:
        leader_quota = ctx.services.replicas.replication_quotas.leader
        leader_quota.record(sum(len(s.records) for s in states if s.partition is not None
                                and leader_quota.is_throttled(s.topic or "", s.index)))
    session_id = INVALID_SESSION_ID
    if isinstance(context, FullFetch):
        session_id = context.session_id(states, _now_ms())
    elif isinstance(context, IncrementalFetch):
        session_id = context.session.id
        error, states = context.answer(states)
        if error != ErrorCode.none:
            return _top_level_error(ctx, error, session_id)
    read_committed = request.isolation_level == READ_COMMITTED
    m = response_module(API_KEY, ctx.api_version)
    hints = LeaderHints(ctx, m)
    by_topic: dict[tuple[str | None, uuid.UUID | None], list[Any]] = {}
    for s in states:
        fields: dict[str, Any] = {
            "partition_index": s.index,
            "error_code": s.error,
            # As Kafka: aborted transactions are null for read_uncommitted, a list for
            # read_committed, and an empty list for a partition refused before any read
            # (FetchResponse.partitionResponse).
            "high_watermark": s.high_watermark,
            "last_stable_offset": s.last_stable_offset,
            "log_start_offset": s.log_start_offset,
            "aborted_transactions": _aborted(m, s) if read_committed
                                    else () if s.error in _REFUSED_BEFORE_READ else None,
            "preferred_read_replica": -1,
            "records": s.records,
        }
        if s.diverging is not None:
            fields["diverging_epoch"] = m.EpochEndOffset(
                epoch=s.diverging[0], end_offset=s.diverging[1])
        fields.update(hints.current_leader(s.topic, s.index, s.error))
        if s.error != ErrorCode.none:
            ctx.services.metrics.error(s.error)
        by_topic.setdefault((s.topic, s.topic_id), []).append(make(m.PartitionData, **fields))
    topics = tuple(
        make(m.FetchableTopicResponse, topic=name or "", topic_id=topic_id or ZERO_UUID,
             partitions=tuple(parts))
        for (name, topic_id), parts in by_topic.items()
    )
    return make(m.FetchResponse, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                session_id=session_id, responses=topics, node_endpoints=hints.node_endpoints)


def _aborted(m: Any, s: FetchPartitionState) -> tuple[Any, ...]:
    return tuple(m.AbortedTransaction(producer_id=txn.producer_id, first_offset=txn.first_offset)
                 for txn in s.aborted or ())


def _top_level_error(ctx: RequestContext, error: ErrorCode,
                     session_id: int = INVALID_SESSION_ID) -> Any:
    ctx.services.metrics.error(error)
    m = response_module(API_KEY, ctx.api_version)
    return make(m.FetchResponse, throttle_time=datetime.timedelta(0), error_code=error,
                session_id=session_id, responses=())
