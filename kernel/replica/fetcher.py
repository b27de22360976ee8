"""Followers fetch from leaders: Kafka's ReplicaFetcherManager and ReplicaFetcherThread.

One fetcher per leader broker, a task on the broker's event loop, fetches every
partition this broker follows there in one Fetch request (with this broker's id as the
replica id), appends what comes back through the replica manager, takes the leader's
high watermark and asks again at the offset it reached: that request is how the leader
learns the follower's progress (its high watermark, its ISR).

Divergence is found the way Kafka 2.7+ finds it (KIP-595's truncation on fetch): each
partition's request names the epoch of the follower's last record, and a leader whose
log differs there answers with a diverging epoch and where that epoch ends in its log;
the follower truncates to the end of the epoch both logs share and fetches again. A
fetch offset the leader no longer has is answered OFFSET_OUT_OF_RANGE: the follower asks
the leader for its log start and end (ListOffsets as a replica) and truncates to the end
(a leader elected uncleanly) or restarts its log at the start (it fell behind
retention), as Kafka's fetcher does. A partition that fails otherwise is retried after
``replica.fetch.backoff.ms``; a leader that cannot be reached, the same for all of its
partitions.

Each fetcher keeps a KIP-227 fetch session at its leader (Kafka's FetchSessionHandler):
a full fetch opens it, later fetches send only the partitions whose fetch parameters
changed and forget those no longer fetched (removed, or backing off), and the leader
answers only partitions with news. A session error, or a fetch whose answer was lost,
starts over with a full fetch.

Replication quotas (KIP-73, :mod:`kernel.replica.replication_quota`): the fetched bytes
of throttled partitions count against ``follower.replication.throttled.rate``; over it,
those whose replica has not caught up with the leader's high watermark are left out of
the fetch, and a fetch left with nothing waits ``replica.fetch.backoff.ms``, as Kafka's
fetcher does.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v13 import request as fetch_request
from kio.schema.list_offsets.v7 import request as list_offsets_request

from kernel.cluster import BrokerEndpoint
from kernel.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from kernel.log.log import UnexpectedAppendOffsetError
from kernel.protocol.client import BrokerConnection, BrokerConnectionError
from kernel.protocol.errors import KafkaError

if TYPE_CHECKING:
    from kernel.config import BrokerConfig
    from kernel.replica.partition import Partition
    from kernel.replica.replication_quota import ReplicationQuotaManager

TopicPartition = tuple[str, int]
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

# Errors that mean this broker's view of leadership is behind or ahead of the leader's:
# the cluster image brings the news, the partition waits a backoff meanwhile.
_LEADERSHIP_ERRORS = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition,
    ErrorCode.unknown_topic_id,
})


# Answers that end the fetcher's session without any partition data: start over with a
# full fetch at once (Kafka's FetchSessionHandler.handleResponse).
_SESSION_ERRORS = frozenset({
    ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch,
    ErrorCode.fetch_session_topic_id_error,
})

SessionKey = tuple[uuid.UUID, int]
# What a follower's fetch says of one partition: fetch offset, its log start offset, max
# bytes, current leader epoch, last fetched epoch.
FetchParams = tuple[int, int, int, int, int]


@dataclass(slots=True)
class LeaderSession:
    """This fetcher's session at its leader (Kafka's FetchSessionHandler): the partitions
    the leader holds for it and what was last sent for each."""

    session_id: int = INVALID_SESSION_ID
    epoch: int = INITIAL_EPOCH  # INITIAL_EPOCH: the next fetch is full
    sent: dict[SessionKey, FetchParams] = field(default_factory=dict)

    def next_fetch(self, wanted: dict[SessionKey, FetchParams]
                   ) -> tuple[dict[SessionKey, FetchParams], list[SessionKey]]:
        """The partitions to send and the ones to forget for fetching ``wanted``."""
        if self.epoch == INITIAL_EPOCH:
            self.sent = dict(wanted)
            return wanted, []
        changed = {k: v for k, v in wanted.items() if self.sent.get(k) != v}
        forgotten = [k for k in self.sent if k not in wanted]
        self.sent = dict(wanted)
        return changed, forgotten

    def answered(self, error: ErrorCode, session_id: int) -> None:
        """The leader's answer to the last fetch (Kafka's handleResponse)."""
        if error == ErrorCode.fetch_session_id_not_found:
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif error != ErrorCode.none:
            self.failed()
        elif session_id == INVALID_SESSION_ID:  # none made, or the leader closed it
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif self.epoch == INITIAL_EPOCH:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)

    def failed(self) -> None:
        """The last fetch may or may not have moved the session on: the next one is
        full, closing this session and opening another (Kafka's nextCloseExisting)."""
        self.epoch = INITIAL_EPOCH


class FollowerAppender(Protocol):
    """What a fetcher writes through: the replica manager's follower path."""

    def append_records_as_follower(self, partition: Partition, records: bytes | memoryview,
                                   leader_high_watermark: int,
                                   leader_log_start_offset: int) -> None: ...


@dataclass(slots=True)
class PartitionFetchState:
    """One followed partition as its fetcher sees it (Kafka's PartitionFetchState)."""

    partition: Partition
    leader_epoch: int
    fetch_offset: int
    delayed_until: float = 0.0  # monotonic seconds; 0: fetch now
    # The leader's high watermark less the fetch offset, after the last fetch that
    # appended (None: not fetched yet); 0 is Kafka's isReplicaInSync.
    lag: int | None = None

    def delay(self, seconds: float) -> None:
        self.delayed_until = time.monotonic() + seconds


class ReplicaFetcher:
    """Fetches from one leader broker every partition this broker follows there."""

    def __init__(self, manager: ReplicaFetcherManager, source_broker_id: int) -> None:
        self.manager = manager
        self.source_broker_id = source_broker_id
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._wake = asyncio.Event()
        self._connection: BrokerConnection | None = None
        self._endpoint: BrokerEndpoint | None = None
        self._failing = False  # log a lost leader once per outage, not once per retry
        self._session = LeaderSession()
        self._stopped = False
        self._task = asyncio.ensure_future(self._run())

    def add(self, state: PartitionFetchState) -> None:
        self.partitions[state.partition.key] = state
        self._wake.set()

    def remove(self, key: TopicPartition) -> None:
        self.partitions.pop(key, None)

    async def shutdown(self) -> None:
        self._stopped = True
        while not self._task.done():
            self._task.cancel()
            await asyncio.wait([self._task], timeout=1.0)
        if self._connection is not None:
            self._connection.close()

    # -- the loop -------------------------------------------------------------------

    async def _run(self) -> None:
        log = self.manager.log.bind(leader=self.source_broker_id)
        while not self._stopped:
            now = time.monotonic()
            ready = [s for s in self.partitions.values() if s.delayed_until <= now]
            fetchable = self._unthrottled(ready)
            if not fetchable:
                self._wake.clear()
                wait = min((s.delayed_until for s in self.partitions.values()),
                           default=now + 60) - now
                if ready:  # all held back by the quota (Kafka: no request, a backoff)
                    wait = self.manager.config.replica_fetch_backoff_ms / 1000
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the
                # cancellation that shutdown sends when the event fires at that moment.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(wait, 0.001)):
                        await self._wake.wait()
                continue
            ready = fetchable
            try:
                await self._fetch_once(ready)
            except BrokerConnectionError as e:
                if not self._failing:
                    log.warning("cannot fetch from the leader", error=str(e))
                self._failing = True
                self._back_off(ready)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not stop replication for good
                log.exception("replica fetcher failed")
                self._back_off(ready)
            else:
                if self._failing:
                    log.info("fetching from the leader again")
                self._failing = False

    def _unthrottled(self, ready: list[PartitionFetchState]) -> list[PartitionFetchState]:
        """Kafka's shouldFollowerThrottle: over the follower quota, a throttled partition
        whose replica is not in sync is left out of the fetch."""
        quota = self.manager.quota
        if quota is None or not ready or not quota.is_quota_exceeded():
            return ready
        kept = [s for s in ready if (s.lag is not None and s.lag <= 0)
                or not quota.is_throttled(s.partition.topic, s.partition.partition)]
        if len(kept) < len(ready):
            quota.held_back(len(ready) - len(kept))
        return kept

    def _back_off(self, states: list[PartitionFetchState]) -> None:
        for s in states:
            s.delay(self.manager.config.replica_fetch_backoff_ms / 1000)

    def _connection_to_leader(self) -> BrokerConnection:
        endpoint = self.manager.endpoint_of(self.source_broker_id)
        if endpoint is None:
            raise BrokerConnectionError(
                f"broker {self.source_broker_id} has no {self.manager.listener_name} "
                "endpoint registered")
        if self._connection is None or endpoint != self._endpoint:
            if self._connection is not None:
                self._connection.close()
            self._endpoint = endpoint
            self._connection = self.manager.connect(endpoint)
        return self._connection

    async def _fetch_once(self, ready: list[PartitionFetchState]) -> None:
        cfg = self.manager.config
        connection = self._connection_to_leader()
        wanted: dict[SessionKey, FetchParams] = {}
        sent: dict[SessionKey, PartitionFetchState] = {}
        for s in ready:
            p = s.partition
            last_epoch = p.log.latest_epoch
            key = (p.topic_id, p.partition)
            wanted[key] = (s.fetch_offset, p.log.log_start_offset, cfg.replica_fetch_max_bytes,
                           s.leader_epoch,
                           UNDEFINED_EPOCH if last_epoch is None else last_epoch)
            sent[key] = s
        session = self._session
        changed, forgotten = session.next_fetch(wanted)
        by_topic: dict[Any, list[Any]] = {}
        for (topic_id, index), (offset, log_start, max_bytes, leader_epoch, last_fetched) \
                in changed.items():
            by_topic.setdefault(topic_id, []).append(fetch_request.FetchPartition(
                partition=index, current_leader_epoch=leader_epoch, fetch_offset=offset,
                last_fetched_epoch=last_fetched, log_start_offset=log_start,
                partition_max_bytes=max_bytes,
            ))
        forgotten_by_topic: dict[Any, list[int]] = {}
        for topic_id, index in forgotten:
            forgotten_by_topic.setdefault(topic_id, []).append(index)
        request = fetch_request.FetchRequest(
            replica_id=self.manager.broker_id,
            max_wait=datetime.timedelta(milliseconds=cfg.replica_fetch_wait_max_ms),
            min_bytes=cfg.replica_fetch_min_bytes,
            max_bytes=cfg.replica_fetch_response_max_bytes,
            isolation_level=0, session_id=session.session_id, session_epoch=session.epoch,
            topics=tuple(fetch_request.FetchTopic(topic_id=topic_id, partitions=tuple(parts))
                         for topic_id, parts in by_topic.items()),
            forgotten_topics_data=tuple(
                fetch_request.ForgottenTopic(topic_id=topic_id, partitions=tuple(parts))
                for topic_id, parts in forgotten_by_topic.items()),
            rack_id="",
        )
        try:
            response = await connection.request(request)
        except BaseException:
            session.failed()
            raise
        session.answered(response.error_code, response.session_id)
        if response.error_code in _SESSION_ERRORS:
            self.manager.log.info("fetch session refused, starting over with a full fetch",
                                  leader=self.source_broker_id,
                                  error=response.error_code.name)
            return
        if response.error_code != ErrorCode.none:
            raise BrokerConnectionError(
                f"broker {self.source_broker_id} refused the fetch: {response.error_code.name}")
        for topic in response.responses:
            for data in topic.partitions:
                state = sent.get((topic.topic_id, data.partition_index))
                # Dropped or handed to another fetcher while the fetch was out: its
                # answer is stale.
                if state is None or self.partitions.get(state.partition.key) is not state:
                    continue
                await self._handle_partition(connection, state, data)

    async def _handle_partition(self, connection: BrokerConnection,
                                state: PartitionFetchState, data: Any) -> None:
        p = state.partition
        error = data.error_code
        log = self.manager.log
        if error == ErrorCode.none:
            diverging = data.diverging_epoch  # epoch -1: none (Kafka's divergingEpoch)
            if diverging.epoch >= 0 and diverging.end_offset >= 0:
                self._truncate_on_diverging_epoch(state, diverging.epoch, diverging.end_offset)
                return
            records = data.records or b""
            quota = self.manager.quota
            if quota is not None and records and quota.is_throttled(p.topic, p.partition):
                quota.record(len(records))
            try:
                self.manager.appender.append_records_as_follower(
                    p, records, data.high_watermark, data.log_start_offset)
            except UnexpectedAppendOffsetError as e:
                log.warning("follower append out of order", partition=str(p), error=str(e))
                state.fetch_offset = p.log.log_end_offset
                return
            except KafkaError as e:
                log.error("follower append failed", partition=str(p), error=str(e))
                state.delay(self.manager.config.replica_fetch_backoff_ms / 1000)
                return
            state.fetch_offset = p.log.log_end_offset
            if records or state.lag is None:
                state.lag = max(0, data.high_watermark - state.fetch_offset)
        elif error == ErrorCode.offset_out_of_range:
            await self._handle_out_of_range(connection, state)
        else:
            if error not in _LEADERSHIP_ERRORS:
                log.warning("follower fetch refused", partition=str(p), error=error.name)
            state.delay(self.manager.config.replica_fetch_backoff_ms / 1000)

    def _truncate_on_diverging_epoch(self, state: PartitionFetchState, leader_epoch: int,
                                     leader_end_offset: int) -> None:
        """Kafka's getOffsetTruncationState: truncate to where the epoch the leader
        named ends in both logs. When this log's epoch there is an older one, that
        truncation is not final: the next fetch names the new last epoch, and the
        leader checks again."""
        p = state.partition
        log = p.log
        follower_epoch, follower_end = log.end_offset_for_epoch(leader_epoch)
        if follower_epoch == UNDEFINED_EPOCH:
            offset = min(leader_end_offset, log.log_end_offset)
        elif follower_epoch != leader_epoch:
            offset = min(follower_end, log.log_end_offset)
        else:
            offset = min(leader_end_offset, follower_end)
        before = (log.log_end_offset, log.latest_epoch)
        self.manager.log.info("truncating divergent log", partition=str(p), to=offset,
                              log_end_offset=log.log_end_offset, leader_epoch=leader_epoch)
        p.truncate_to(offset)
        state.fetch_offset = log.log_end_offset
        if (log.log_end_offset, log.latest_epoch) == before:
            # Nothing changed, so the next fetch would diverge the same way: never spin.
            self.manager.log.warning("divergent log truncation made no progress",
                                     partition=str(p), log_end_offset=log.log_end_offset,
                                     latest_epoch=log.latest_epoch, leader_epoch=leader_epoch)
            state.delay(self.manager.config.replica_fetch_backoff_ms / 1000)

    async def _handle_out_of_range(self, connection: BrokerConnection,
                                   state: PartitionFetchState) -> None:
        """Kafka's fetchOffsetAndTruncate."""
        p = state.partition
        log = p.log
        leader_end = await self._leader_offset(connection, state, LATEST_TIMESTAMP)
        if leader_end is None:
            return
        if leader_end < log.log_end_offset:
            # Only after an unclean election: the leader has less than this replica.
            self.manager.log.warning(
                "truncating to the leader's log end (unclean leader election?)",
                partition=str(p), to=leader_end, log_end_offset=log.log_end_offset)
            p.truncate_to(leader_end)
            state.fetch_offset = log.log_end_offset
            return
        leader_start = await self._leader_offset(connection, state, EARLIEST_TIMESTAMP)
        if leader_start is None:
            return
        if leader_start > log.log_end_offset:
            self.manager.log.info("restarting a log behind the leader's log start",
                                  partition=str(p), at=leader_start)
            log.truncate_fully_and_start_at(leader_start)
        state.fetch_offset = max(leader_start, log.log_end_offset)

    async def _leader_offset(self, connection: BrokerConnection, state: PartitionFetchState,
                             timestamp: int) -> int | None:
        p = state.partition
        request = list_offsets_request.ListOffsetsRequest(
            replica_id=self.manager.broker_id, isolation_level=0,
            topics=(list_offsets_request.ListOffsetsTopic(
                name=p.topic, partitions=(list_offsets_request.ListOffsetsPartition(
                    partition_index=p.partition, current_leader_epoch=state.leader_epoch,
                    timestamp=timestamp),)),),
        )
        response = await connection.request(request)
        for topic in response.topics:
            for data in topic.partitions:
                if data.partition_index == p.partition and topic.name == p.topic:
                    if data.error_code == ErrorCode.none:
                        return int(data.offset)
                    state.delay(self.manager.config.replica_fetch_backoff_ms / 1000)
                    return None
        state.delay(self.manager.config.replica_fetch_backoff_ms / 1000)
        return None


class BrokerConnector(Protocol):
    """How fetchers reach leaders (the server's InterBrokerChannel): the leader's
    endpoint on the inter-broker listener, and a new connection to it."""

    @property
    def listener_name(self) -> str: ...

    def endpoint_of(self, broker_id: int) -> BrokerEndpoint | None: ...

    def connect(self, endpoint: BrokerEndpoint, *, client_id: str,
                timeout_s: float) -> BrokerConnection: ...


class ReplicaFetcherManager:
    """Which fetcher follows which partition: one fetcher per leader broker (Kafka's
    num.replica.fetchers = 1)."""

    def __init__(self, broker_id: int, config: Callable[[], BrokerConfig],
                 appender: FollowerAppender, channel: BrokerConnector,
                 logger: Any, quota: ReplicationQuotaManager | None = None) -> None:
        self.broker_id = broker_id
        self.quota = quota
        self._config = config
        self.appender = appender
        self.channel = channel
        self.log = logger
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._source_of: dict[TopicPartition, int] = {}
        self._stopping: set[asyncio.Future[None]] = set()

    @property
    def config(self) -> BrokerConfig:
        return self._config()

    @property
    def listener_name(self) -> str:
        return self.channel.listener_name

    def endpoint_of(self, broker_id: int) -> BrokerEndpoint | None:
        return self.channel.endpoint_of(broker_id)

    def connect(self, endpoint: BrokerEndpoint) -> BrokerConnection:
        return self.channel.connect(
            endpoint, client_id=f"broker-{self.broker_id}-fetcher",
            timeout_s=(self.config.replica_socket_timeout_ms
                       + self.config.replica_fetch_wait_max_ms) / 1000)

    def follow(self, partition: Partition, leader_id: int, leader_epoch: int) -> None:
        """Fetch ``partition`` from ``leader_id`` in ``leader_epoch``, from this log's end
        (truncation on fetch corrects it when the logs diverged)."""
        if self._source_of.get(partition.key, leader_id) != leader_id:
            self.unfollow(partition.key)
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id)
        fetcher.add(PartitionFetchState(partition, leader_epoch, partition.log.log_end_offset))
        self._source_of[partition.key] = leader_id

    def unfollow(self, key: TopicPartition) -> None:
        source = self._source_of.pop(key, None)
        fetcher = self.fetchers.get(source) if source is not None else None
        if fetcher is None:
            return
        fetcher.remove(key)
        if not fetcher.partitions:  # nothing left to fetch there: close its connection
            del self.fetchers[fetcher.source_broker_id]
            stopping = asyncio.ensure_future(fetcher.shutdown())
            self._stopping.add(stopping)
            stopping.add_done_callback(self._stopping.discard)

    def fetch_offset(self, key: TopicPartition) -> int | None:
        source = self._source_of.get(key)
        fetcher = self.fetchers.get(source) if source is not None else None
        state = fetcher.partitions.get(key) if fetcher is not None else None
        return state.fetch_offset if state is not None else None

    async def shutdown(self) -> None:
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._source_of.clear()
        for fetcher in fetchers:
            await fetcher.shutdown()
        await asyncio.gather(*self._stopping, return_exceptions=True)
