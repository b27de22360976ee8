"""The replica manager: which partitions this broker hosts, in which role.

It follows the cluster image: a partition whose replicas include this broker gets a
log and a Partition (leader or follower as the image says); a deleted topic's logs are
deleted; changed topic configs reach the logs. Every append to a leader goes through
:meth:`ReplicaManager.append_records` (Kafka's ``appendRecords``), whoever the writer:
Produce and the coordinators alike; Produce's policy around it (KIP-890 verification,
the flush and acks decision, DelayedProduce) is :meth:`ReplicaManager.handle_produce_append`
(Kafka's ``handleProduceAppend``). Appends, high-watermark moves and follower fetches
wake the operations waiting in the Produce, Fetch and DeleteRecords purgatories.
After applying an image it publishes each local replica's change of role (leader,
follower, deleted) to its leadership listeners.

A follower replica is fetched from its leader by the replica fetchers
(:mod:`kernel.replica.fetcher`), which write through :meth:`append_records_as_follower`.
A leader keeps its ISR: followers that catch up join it, and a periodic check
(:meth:`shrink_isrs`, every half ``replica.lag.time.max.ms`` as Kafka's isr-expiration)
drops those that lag; each change is sent to the controller through the metadata
backend's ``alter_partition`` and applied when the image brings it back. A leader that
becomes a follower answers its waiting produces and fetches at once, as Kafka's
makeFollowers does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Container, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from kernel.cluster import NO_LEADER, ClusterImage, PartitionState, TopicImage
from kernel.config import BrokerConfig
from kernel.log.validator import AppendOrigin, RecordValidationError
from kernel.log.volume import volume_bytes
from kernel.logging import Notices
from kernel.metrics import BrokerMetrics
from kernel.protocol.errors import KafkaError
from kernel.purgatory import Purgatory
from kernel.replica.leadership import LeadershipChange, LeadershipListener, Role
from kernel.replica.partition import Partition
from kernel.replica.produce_append import (
    DelayedProduce,
    ProducePartitionStatus,
    TransactionSupportedOperation,
    TransactionVerifier,
    Verifying,
    first_transactional_batches,
    verify_transactions,
)
from kernel.replica.replication_quota import ReplicationQuotas

# An image that adds or removes more logs than this here is applied by a task, after the
# images before it: its new logs are made in the log manager's threads (1-3 ms of file
# system calls each, and a call can stall far longer), then it is applied in slices of
# STEPS_PER_SLICE replicas per turn of the loop. A smaller image is applied at once.
MAX_LOGS_CHANGED_AT_ONCE = 20
STEPS_PER_SLICE = 50
# A replica whose log could not be created (out of descriptors or disk space) is left
# out of the image; the next image, or this timer, tries it again.
CREATE_RETRY_S = 5.0

if TYPE_CHECKING:
    from kernel.log import LogAppendInfo

TopicPartition = tuple[str, int]
# The log's producer-state checks: Kafka answers them with the log start offset
# (ReplicaManager's catch-all, processFailedRecord).
_PRODUCER_STATE_ERRORS = frozenset({ErrorCode.out_of_order_sequence_number,
                                    ErrorCode.invalid_producer_epoch})
# The metadata backend's alter_partition: (topic, partition, isr, leader_epoch,
# partition_epoch) -> the new state.
AlterPartition = Callable[[str, int, tuple[int, ...], int, int], Awaitable[PartitionState]]


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """One log in a log dir, as DescribeLogDirs tells it."""

    topic: str
    partition: int
    size: int
    # The high watermark's lead over the log end (Kafka's getLogEndOffsetLag); -1 for a
    # log no replica here owns (DescribeLogDirsResponse.INVALID_OFFSET_LAG).
    offset_lag: int


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """One directory of log.dirs (Kafka's DescribeLogDirsResult): KAFKA_STORAGE_ERROR
    with -1 sizes when its volume cannot be read."""

    path: str
    error: ErrorCode
    total_bytes: int
    usable_bytes: int
    logs: tuple[ReplicaLogInfo, ...]


class Follower(Protocol):
    """Who fetches followed partitions from their leaders (the fetcher manager)."""

    def follow(self, partition: Partition, leader_id: int, leader_epoch: int) -> None: ...

    def unfollow(self, key: TopicPartition) -> None: ...


class ReplicaObservers(Protocol):
    """Who hears of local appends and high-watermark moves: the plugins' observer hooks
    (``kernel.plugins.PluginFacade``), which the replica layer does not import."""

    def log_appended(self, topic: str, partition: int, base_offset: int,
                     last_offset: int) -> None: ...

    def high_watermark_changed(self, topic: str, partition: int,
                               high_watermark: int) -> None: ...


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_manager: Any,
        produce_purgatory: Purgatory[Any],
        fetch_purgatory: Purgatory[Any],
        delete_records_purgatory: Purgatory[Any],
        plugins: ReplicaObservers,
        logger: Any,
        metrics: BrokerMetrics | None = None,
        *,
        config: BrokerConfig | None = None,
        transaction_verifier: Callable[[], TransactionVerifier | None] | None = None,
    ) -> None:
        """``transaction_verifier``: the registered transaction coordinator's KIP-890
        verification, looked up per request (Kafka's AddPartitionsToTxnManager)."""
        self.broker_id = broker_id
        self.logs = log_manager
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        self.delete_records_purgatory = delete_records_purgatory
        self._plugins = plugins
        self._log = logger
        self.partitions: dict[TopicPartition, Partition] = {}
        self._leadership_listeners: list[LeadershipListener] = []
        self._follower: Follower | None = None
        self._alter_partition: AlterPartition | None = None
        self._isr_tasks: set[asyncio.Task[None]] = set()
        # Images waiting for their new logs, applied in order by one task.
        self._backlog: collections.deque[tuple[ClusterImage | None, ClusterImage]] = (
            collections.deque())
        self._applier: asyncio.Task[None] | None = None
        self._image: ClusterImage | None = None  # the last one received
        # Replicas of the last application whose log could not be created, to retry.
        self._uncreated: dict[TopicPartition, OSError] = {}
        self._retry: asyncio.TimerHandle | None = None
        self._notices = Notices()
        self.replication_quotas = ReplicationQuotas(broker_id, metrics)
        self._metrics = metrics
        self._transaction_verifier = transaction_verifier
        self._verify_transactions = (config is None
                                     or config.transaction_partition_verification_enable)

    def start_replication(self, follower: Follower, alter_partition: AlterPartition) -> None:
        """From now on followed partitions are fetched through ``follower`` and ISR
        changes go to ``alter_partition``; the partitions hosted already start too."""
        self._follower = follower
        self._alter_partition = alter_partition
        for partition in self.partitions.values():
            if partition.state is not None and not partition.is_leader:
                self._follow(partition, partition.state)

    async def stop_replication(self) -> None:
        if self._applier is not None:
            self._applier.cancel()
            await asyncio.gather(self._applier, return_exceptions=True)
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._backlog.clear()
        self._follower = None
        self._alter_partition = None
        tasks = list(self._isr_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- following the cluster image -----------------------------------------

    def apply_image(self, old: ClusterImage | None, new: ClusterImage) -> None:
        self._image = new
        """Follow ``new``: at once, or (many new logs, or images already waiting) after
        the images before it, once its logs are made off the event loop."""
        if (self._backlog or len(self._new_logs(old, new)) > MAX_LOGS_CHANGED_AT_ONCE
                or len(self._removed(old, new)) > MAX_LOGS_CHANGED_AT_ONCE) and \
                _running_loop() is not None:
            self._backlog.append((old, new))
            if self._applier is None:
                self._applier = asyncio.ensure_future(self._apply_backlog())
            return
        self._apply_image(old, new)

    async def caught_up(self) -> None:
        """Return once every image received so far is applied (CreateTopics answers
        after its partitions are hosted, as when they were made at once)."""
        while self._applier is not None:
            await asyncio.shield(self._applier)

    async def _apply_backlog(self) -> None:
        try:
            while self._backlog:
                old, new = self._backlog[0]
                try:
                    await self.logs.create_logs(self._new_logs(old, new))
                except Exception as e:  # applied anyway: what is missing is made on the loop
                    if self._notices.due("create_logs"):
                        self._log.error("creating logs failed; the image makes them one "
                                        "at a time", error=repr(e))
                try:
                    for step, _ in enumerate(self._applying(old, new), 1):
                        if step % STEPS_PER_SLICE == 0:
                            await asyncio.sleep(0)  # let the loop serve others meanwhile
                except Exception:
                    self._log.exception("applying the cluster image failed")
                self._backlog.popleft()
        finally:
            self._applier = None

    def _new_logs(self, old: ClusterImage | None,
                  new: ClusterImage) -> list[tuple[str, int, Any, int | None]]:
        """The replicas ``new`` puts here that have no log yet: (topic, partition,
        configs, the leader epoch when this broker leads). A topic the change left
        alone is the same object in both images, and is skipped."""
        me, logs = self.broker_id, self.logs
        before = old.topics if old is not None else {}
        return [(topic.name, state.partition, topic.configs,
                 state.leader_epoch if state.leader == me else None)
                for topic in new.topics.values() if before.get(topic.name) is not topic
                for state in topic.partitions.values()
                if me in state.replicas and logs.get_log(topic.name, state.partition) is None]

    def _removed(self, old: ClusterImage | None, new: ClusterImage) -> list[TopicPartition]:
        """The replicas hosted here of the topics ``new`` deleted (or deleted and made
        again: another topic id)."""
        if old is None or not self.partitions or old.topics is new.topics:
            return []
        removed: list[TopicPartition] = []
        for name, topic in old.topics.items():
            current = new.topics.get(name)
            if current is None or current.topic_id != topic.topic_id:
                removed.extend(key for index in topic.partitions
                               if (key := (name, index)) in self.partitions)
        return removed

    def _apply_image(self, old: ClusterImage | None, new: ClusterImage) -> None:
        for _ in self._applying(old, new):
            pass

    def _applying(self, old: ClusterImage | None, new: ClusterImage) -> Iterator[None]:
        """Apply ``new``, yielding after each replica it removes, adds or changes: the
        steps a sliced application spreads over turns of the loop."""
        self.replication_quotas.follow_topics(new.topics)
        changes: list[LeadershipChange] = []
        self._uncreated.clear()  # every replica without a log is tried again below
        if old is not None and old.topics is not new.topics:
            for name, topic in old.topics.items():
                current = new.topics.get(name)
                if current is None or current.topic_id != topic.topic_id:
                    for index in topic.partitions:
                        self._remove_partition((name, index), changes)
                        yield
                    self._log.info("deleted topic logs", topic=name)
        for topic in new.topics.values():
            previous = old.topics.get(topic.name) if old is not None else None
            configs_changed = previous is None or previous.configs != topic.configs
            if previous is not None and configs_changed:
                self.logs.update_topic_config(topic.name, topic.configs)
            for state in topic.partitions.values():
                key = (topic.name, state.partition)
                if self.broker_id not in state.replicas:
                    if key in self.partitions:  # reassigned away: Kafka's StopReplica
                        self._remove_partition(key, changes)
                        yield
                    continue
                partition = self.partitions.get(key)
                if partition is None:
                    try:
                        partition = self._create_partition(topic, state.partition)
                    except OSError as e:  # the rest of the image is applied all the same
                        self._uncreated[key] = e
                        continue
                if previous is not None and partition.state == state and not configs_changed:
                    continue
                was = _role(partition)
                before = partition.state
                if state.leader == self.broker_id:
                    partition.make_leader(state)
                    if self._follower is not None:
                        self._follower.unfollow(key)
                else:
                    partition.make_follower(state)
                    if (before is None or before.leader != state.leader
                            or before.leader_epoch != state.leader_epoch):
                        self._follow(partition, state)
                    if was[0] is Role.LEADER:
                        # As Kafka's makeFollowers: waiting produces and fetches are
                        # answered now (NOT_LEADER_OR_FOLLOWER), not at their timeout.
                        self._wake_all(key)
                if _role(partition) != was:
                    changes.append(LeadershipChange(partition.topic, partition.partition,
                                                    *_role(partition)))
                yield
        for change in changes:
            self._publish(change)
            yield
        if self._uncreated:
            self._creation_failed()

    def _creation_failed(self) -> None:
        """One line per period for every replica left without a log (thousands can
        fail together), and a retry."""
        (topic, index), error = next(iter(self._uncreated.items()))
        if self._notices.due("create_partition"):
            self._log.warning(
                f"could not create the logs of {len(self._uncreated)} replicas; retried "
                f"every {CREATE_RETRY_S:.0f} s and with each new image; logged once every "
                f"{self._notices.period_s:.0f} s", first=f"{topic}-{index}", error=str(error))
        if self._retry is None:
            with contextlib.suppress(RuntimeError):  # no loop (tests): the next image
                self._retry = asyncio.get_running_loop().call_later(
                    CREATE_RETRY_S, self._retry_uncreated)

    def _retry_uncreated(self) -> None:
        self._retry = None
        image = self._image
        if self._uncreated and image is not None:
            self._backlog.append((image, image))  # sliced, after the images waiting
            if self._applier is None:
                self._applier = asyncio.ensure_future(self._apply_backlog())

    def _create_partition(self, topic: TopicImage, index: int) -> Partition:
        log = self.logs.get_or_create_log(topic.name, index, topic.configs)
        partition = Partition(topic.name, index, topic.topic_id, log, self.broker_id,
                              self._on_high_watermark, self._request_isr_change)
        # As Kafka: the high watermark the last run checkpointed, so a restarted leader
        # does not hide committed records until its followers report again.
        partition.high_watermark = self.logs.saved_high_watermark(topic.name, index)
        log.on_high_watermark_updated(partition.high_watermark)
        self.partitions[(topic.name, index)] = partition
        return partition

    def _follow(self, partition: Partition, state: PartitionState) -> None:
        if self._follower is None:
            return
        if state.leader == NO_LEADER or state.leader == self.broker_id:
            self._follower.unfollow(partition.key)
        else:
            self._follower.follow(partition, state.leader, state.leader_epoch)

    def _remove_partition(self, key: TopicPartition,
                          changes: list[LeadershipChange]) -> None:
        """The replica leaves this broker (topic deleted, or reassigned elsewhere): no
        more fetching, its log deleted, its waiting operations answered now."""
        partition = self.partitions.pop(key, None)
        if partition is None:
            return
        if self._follower is not None:
            self._follower.unfollow(key)
        self.logs.delete_log(*key)
        self._wake_all(key)
        changes.append(LeadershipChange(key[0], key[1], Role.DELETED, -1))

    def _wake_all(self, key: TopicPartition) -> None:
        self.fetch_purgatory.check_and_complete(key)
        self.produce_purgatory.check_and_complete(key)
        self.delete_records_purgatory.check_and_complete(key)

    def reconfigure(self, config: BrokerConfig) -> None:
        """Broker-level defaults changed (dynamic broker configs): refresh every log."""
        self.logs.update_broker_config(config)
        self._verify_transactions = config.transaction_partition_verification_enable
        self.replication_quotas.reconfigure(config)

    # -- leadership events -------------------------------------------------

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        """Call ``listener`` with the role of every hosted partition now, then with each
        change once the image that made it is applied (Kafka's coordinators hear
        ``onElection`` / ``onResignation`` the same way)."""
        self._leadership_listeners.append(listener)
        for partition in list(self.partitions.values()):
            if partition.state is not None:
                listener(LeadershipChange(partition.topic, partition.partition,
                                          *_role(partition)))

    def remove_leadership_listener(self, listener: LeadershipListener) -> None:
        self._leadership_listeners.remove(listener)

    def _publish(self, change: LeadershipChange) -> None:
        for listener in list(self._leadership_listeners):
            try:
                listener(change)
            except Exception:  # one failing subscriber must not hide the change from others
                self._log.exception("leadership listener failed", topic=change.topic,
                                    partition=change.partition, role=change.role.value)

    # -- lookups ------------------------------------------------------------

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def leader_partition(self, topic: str, partition: int, image: ClusterImage) -> Partition:
        """The local leader replica, or Kafka's error for why it is not here."""
        p = self.partitions.get((topic, partition))
        if p is not None and p.is_leader:
            return p
        if image.partition(topic, partition) is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"this server does not host {topic}-{partition}")
        raise KafkaError(ErrorCode.not_leader_or_follower,
                         f"broker {self.broker_id} is not the leader of {topic}-{partition}")

    def describe_log_dirs(self, partitions: Container[TopicPartition] | None,
                          ) -> list[LogDirInfo]:
        """Kafka's describeLogDirs: each log dir with its volume's sizes and the logs
        it holds (all, or those of ``partitions``)."""
        described: list[LogDirInfo] = []
        for directory, logs in self.logs.logs_by_dir().items():
            path = os.path.abspath(directory)
            try:
                total, usable = volume_bytes(directory)
            except OSError:
                described.append(LogDirInfo(path, ErrorCode.kafka_storage_error, -1, -1, ()))
                continue
            described.append(LogDirInfo(path, ErrorCode.none, total, usable, tuple(
                ReplicaLogInfo(log.topic, log.partition, log.size, self._offset_lag(log))
                for log in logs
                if partitions is None or (log.topic, log.partition) in partitions)))
        return described

    def _offset_lag(self, log: Any) -> int:
        partition = self.partitions.get((log.topic, log.partition))
        if partition is None:
            return -1
        return max(partition.high_watermark - log.log_end_offset, 0)

    # -- wake-ups -----------------------------------------------------------

    def follower_fetched(self, partition: Partition, replica_id: int, fetch_offset: int,
                         log_start_offset: int) -> None:
        """A follower's fetch reports its log end (moving the high watermark, which wakes
        produces and consumer fetches) and its log start offset (DeleteRecords)."""
        partition.update_follower_fetch_state(replica_id, fetch_offset, log_start_offset)
        self.delete_records_purgatory.check_and_complete(partition.key)

    # -- the ISR ------------------------------------------------------------------

    def _request_isr_change(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """A leader's proposed ISR goes to the controller; the image brings the answer."""
        alter = self._alter_partition
        state = partition.state
        if alter is None or state is None:  # replication not started, or stopping
            partition.alter_isr_answered(isr)
            return
        self._log.info("proposing ISR", topic=partition.topic, partition=partition.partition,
                       isr=list(isr), was=list(state.isr))

        async def send() -> None:
            try:
                await alter(partition.topic, partition.partition, isr, state.leader_epoch,
                            state.partition_epoch)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # refused (fenced, stale) or the controller unreachable
                self._log.info("ISR change not made", topic=partition.topic,
                               partition=partition.partition, isr=list(isr),
                               error=str(e) or type(e).__name__)
            partition.alter_isr_answered(isr)

        task = asyncio.ensure_future(send())
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    def shrink_isrs(self, lag_time_max_ms: int, now_ms: int | None = None) -> None:
        """Kafka's isr-expiration: every led partition drops the followers that have not
        caught up for ``lag_time_max_ms``."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for partition in list(self.partitions.values()):
            partition.maybe_shrink_isr(now, lag_time_max_ms)

    # -- the follower path --------------------------------------------------------

    def append_records_as_follower(self, partition: Partition, records: bytes | memoryview,
                                   leader_high_watermark: int,
                                   leader_log_start_offset: int) -> None:
        """What a fetch from the leader brought: its batches (offsets as the leader
        assigned them), then the leader's high watermark and log start offset."""
        if partition.is_leader:
            return  # became leader while the fetch was out
        log = partition.log
        if records:
            info = log.append_as_follower(records)
            if info.last_offset >= 0:
                self._plugins.log_appended(partition.topic, partition.partition,
                                           info.first_offset, info.last_offset)
        partition.update_follower_high_watermark(leader_high_watermark)
        start = min(leader_log_start_offset, partition.high_watermark)
        if start > log.log_start_offset:
            log.delete_records_before(start, partition.high_watermark)

    def _on_high_watermark(self, partition: Partition, high_watermark: int) -> None:
        key = partition.key
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)
        self._plugins.high_watermark_changed(partition.topic, partition.partition, high_watermark)

    # -- Produce --------------------------------------------------------------

    def handle_produce_append(
        self, statuses: Sequence[ProducePartitionStatus], required_acks: int,
        timeout_ms: int, now_ms: int, image: ClusterImage, transactional_id: str | None,
        operation: TransactionSupportedOperation,
    ) -> Awaitable[None] | None:
        """Append a Produce request's partitions (those the handler did not refuse) and
        fill in each status, as Kafka's ``handleProduceAppend`` and ``appendRecords``:

        1. a transactional batch that would open its producer's transaction here waits
           for the transaction coordinator's verification (KIP-890), when
           transaction.partition.verification.enable;
        2. :meth:`_append_to_local_log`: each partition through :meth:`append_records`;
        3. :meth:`_maybe_wait`: flush.messages reached, or acks=-1 not yet replicated.

        Returns None when every status is final (the hot path: no coroutine, no await),
        else what to await first."""
        if transactional_id is not None and self._verify_transactions and \
                self._transaction_verifier is not None:
            verifier = self._transaction_verifier()
            if verifier is not None:
                verifying = first_transactional_batches(self, statuses, image)
                if verifying:
                    return self._verify_then_append(
                        statuses, required_acks, timeout_ms, now_ms, image,
                        verifier, transactional_id, verifying, operation)
        self._append_to_local_log(statuses, required_acks, now_ms, image)
        return self._maybe_wait(statuses, required_acks, timeout_ms)

    async def _verify_then_append(
        self, statuses: Sequence[ProducePartitionStatus], required_acks: int,
        timeout_ms: int, now_ms: int, image: ClusterImage, verifier: TransactionVerifier,
        transactional_id: str, verifying: list[Verifying],
        operation: TransactionSupportedOperation,
    ) -> None:
        await verify_transactions(verifier, transactional_id, verifying, operation)
        self._append_to_local_log(statuses, required_acks, now_ms, image)
        waiting = self._maybe_wait(statuses, required_acks, timeout_ms)
        if waiting is not None:
            await waiting

    def _append_to_local_log(self, statuses: Sequence[ProducePartitionStatus],
                             required_acks: int, now_ms: int, image: ClusterImage) -> None:
        """Kafka's ``appendToLocalLog``: each partition's append, its failure mapped to
        the answer (``processFailedRecord``), its records counted."""
        metrics = self._metrics
        for s in statuses:
            if s.error != ErrorCode.none:
                continue
            partition: Partition | None = None
            try:
                assert s.topic is not None  # an entry without a name was refused
                partition = self.leader_partition(s.topic, s.index, image)
                if s.records is None:
                    raise KafkaError(ErrorCode.invalid_record, "null records")
                info = self.append_records(partition, s.records, required_acks, now_ms)
            except KafkaError as e:
                s.error = e.error_code
                s.message = e.message
                if partition is not None:
                    if isinstance(e, RecordValidationError):
                        s.record_errors = e.record_errors
                        s.log_start_offset = partition.log_start_offset
                    elif e.error_code in _PRODUCER_STATE_ERRORS:
                        s.log_start_offset = partition.log_start_offset
                continue
            if metrics is not None:
                metrics.records_in(s.topic, info.records_count, len(s.records))
            s.base_offset = info.first_offset
            s.log_append_time = info.log_append_time
            s.log_start_offset = info.log_start_offset
            s.required_offset = info.last_offset + 1
            s.partition = partition

    def _maybe_wait(self, statuses: Sequence[ProducePartitionStatus], required_acks: int,
                    timeout_ms: int) -> Awaitable[None] | None:
        """What the answer waits for, if anything. acks=0 has no answer to hold."""
        if required_acks == 0:
            return None
        # flush.messages reached (e.g. 1: fsync every message): as Kafka, the append is
        # acknowledged only once it is on disk; the fsync runs off the event loop.
        must_flush = [s.partition for s in statuses if s.partition is not None
                      and s.partition.log.unflushed_messages
                      >= s.partition.log.config.flush_messages]
        if must_flush or (required_acks == -1 and not all(s.replicated() for s in statuses)):
            return self._wait_for_durability(statuses, required_acks, timeout_ms, must_flush)
        return None

    async def _wait_for_durability(self, statuses: Sequence[ProducePartitionStatus],
                                   required_acks: int, timeout_ms: int,
                                   must_flush: list[Partition]) -> None:
        for partition in must_flush:
            await self.logs.flush_log(partition.log)
        if required_acks == -1:
            await self.wait_for_replication(statuses, timeout_ms)

    async def wait_for_replication(self, statuses: Sequence[ProducePartitionStatus],
                                   timeout_ms: int) -> None:
        """acks=-1's wait (Kafka's DelayedProduce, also WriteTxnMarkers'): until the high
        watermark passes each appended status's ``required_offset``, else the status
        says why (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND). Returns at once when all are replicated."""
        if all(s.replicated() for s in statuses):
            return
        await DelayedProduce(timeout_ms, statuses).wait_in(
            self.produce_purgatory, [s.partition.key for s in statuses if s.partition is not None])

    # -- appends ----------------------------------------------------------

    def append_records(self, partition: Partition, records: bytes | memoryview,
                       required_acks: int, now_ms: int, *,
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Append a batch (or several) to a leader replica, all of Kafka's
        ``appendRecords`` for one partition: the leader and min.insync.replicas checks
        (acks=-1), batch validation, offset assignment and the producer state's checks
        (the log; a retried batch is answered with its original offsets), then the
        replica bookkeeping: the high watermark and the purgatories it wakes.
        ``origin`` is who writes: CLIENT (Produce) may not append control batches,
        COORDINATOR (the coordinators, transaction markers) may. Raises
        :class:`KafkaError` and appends nothing when a check fails. One call per
        partition, no await: Produce's hot path."""
        info = partition.append_records_to_leader(
            records, required_acks, partition.log.config.min_insync_replicas, now_ms, origin
        )
        if info.duplicate:  # a retried batch already in the log: nothing was appended
            return info
        # Before the high watermark can pass the records (the log keeps producer and
        # transaction state inside the append, as Kafka's does).
        self._plugins.log_appended(partition.topic, partition.partition, info.first_offset,
                                   info.last_offset)
        # With an ISR of one the high watermark moves now and wakes Produce and Fetch.
        # Else it waits for followers: only their fetches can complete now (as Kafka
        # checks the Fetch purgatory after every append).
        if not partition.maybe_increment_high_watermark():
            self.fetch_purgatory.check_and_complete(partition.key)
        return info


def _role(partition: Partition) -> tuple[Role, int]:
    return (Role.LEADER if partition.is_leader else Role.FOLLOWER), partition.leader_epoch


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
