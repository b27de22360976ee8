"""The replica manager: which partitions this broker hosts, in which role.

It follows the cluster image: a partition whose replicas include this broker gets a
log and a Partition (leader or follower as the image says); a deleted topic's logs are
deleted; changed topic configs reach the logs. Every append to a leader goes through
:meth:`ReplicaManager.append_records` (Kafka's ``appendRecords``), whoever the writer:
Produce and the coordinators alike. Appends, high-watermark moves and follower fetches
wake the operations waiting in the Produce, Fetch and DeleteRecords purgatories.
After applying an image it publishes each local replica's change of role (leader,
follower, deleted) to its leadership listeners.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from kernel.cluster import ClusterImage, TopicImage
from kernel.config import BrokerConfig
from kernel.log.validator import AppendOrigin
from kernel.protocol.errors import KafkaError
from kernel.purgatory import Purgatory
from kernel.replica.leadership import LeadershipChange, LeadershipListener, Role
from kernel.replica.partition import Partition

if TYPE_CHECKING:
    from kernel.log import LogAppendInfo

TopicPartition = tuple[str, int]


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
    ) -> None:
        self.broker_id = broker_id
        self.logs = log_manager
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        self.delete_records_purgatory = delete_records_purgatory
        self._plugins = plugins
        self._log = logger
        self.partitions: dict[TopicPartition, Partition] = {}
        self._leadership_listeners: list[LeadershipListener] = []

    # -- following the cluster image -----------------------------------------

    def apply_image(self, old: ClusterImage | None, new: ClusterImage) -> None:
        changes: list[LeadershipChange] = []
        if old is not None:
            for name, topic in old.topics.items():
                current = new.topics.get(name)
                if current is None or current.topic_id != topic.topic_id:
                    self._delete_topic(topic, changes)
        for topic in new.topics.values():
            previous = old.topics.get(topic.name) if old is not None else None
            configs_changed = previous is None or previous.configs != topic.configs
            if previous is not None and configs_changed:
                self.logs.update_topic_config(topic.name, topic.configs)
            for state in topic.partitions.values():
                if self.broker_id not in state.replicas:
                    continue
                key = (topic.name, state.partition)
                partition = self.partitions.get(key)
                if partition is None:
                    partition = self._create_partition(topic, state.partition)
                if previous is not None and partition.state == state and not configs_changed:
                    continue
                was = _role(partition)
                if state.leader == self.broker_id:
                    partition.make_leader(state)
                else:
                    partition.make_follower(state)
                if _role(partition) != was:
                    changes.append(LeadershipChange(partition.topic, partition.partition,
                                                    *_role(partition)))
        for change in changes:
            self._publish(change)

    def _create_partition(self, topic: TopicImage, index: int) -> Partition:
        log = self.logs.get_or_create_log(topic.name, index, topic.configs)
        partition = Partition(topic.name, index, topic.topic_id, log, self.broker_id,
                              self._on_high_watermark)
        self.partitions[(topic.name, index)] = partition
        return partition

    def _delete_topic(self, topic: TopicImage, changes: list[LeadershipChange]) -> None:
        for index in topic.partitions:
            partition = self.partitions.pop((topic.name, index), None)
            if partition is not None:
                self.logs.delete_log(topic.name, index)
                self._wake_all(partition.key)  # waiting operations answer now
                changes.append(LeadershipChange(topic.name, index, Role.DELETED, -1))
        self._log.info("deleted topic logs", topic=topic.name)

    def _wake_all(self, key: TopicPartition) -> None:
        self.fetch_purgatory.check_and_complete(key)
        self.produce_purgatory.check_and_complete(key)
        self.delete_records_purgatory.check_and_complete(key)

    def reconfigure(self, config: BrokerConfig) -> None:
        """Broker-level defaults changed (dynamic broker configs): refresh every log."""
        self.logs.update_broker_config(config)

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

    # -- wake-ups -----------------------------------------------------------

    def follower_fetched(self, partition: Partition, replica_id: int, fetch_offset: int,
                         log_start_offset: int) -> None:
        """A follower's fetch reports its log end (moving the high watermark, which wakes
        produces and consumer fetches) and its log start offset (DeleteRecords)."""
        partition.update_follower_fetch_state(replica_id, fetch_offset, log_start_offset)
        self.delete_records_purgatory.check_and_complete(partition.key)

    def _on_high_watermark(self, partition: Partition, high_watermark: int) -> None:
        key = partition.key
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)
        self._plugins.high_watermark_changed(partition.topic, partition.partition, high_watermark)

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
