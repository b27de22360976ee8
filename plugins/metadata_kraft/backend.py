"""The KRaft-style metadata backend: the active controller of a single-node quorum.

Every change follows KRaft's controller: validate against the current image, turn the
request into metadata records, replay them onto the image (so a batch that would not
replay never reaches the log), append them as one batch and fsync, and only then
publish the new image and tell listeners. With one voter the fsynced append is the
commit; a replicated quorum would wait for a majority at the same point.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import structlog

from kernel.api.cluster import (
    CLUSTER_METADATA_PROHIBITED,
    CLUSTER_METADATA_TOPIC,
    NO_LEADER,
    AclBinding,
    BrokerRegistration,
    ClusterImage,
    ElectionType,
    ImageListener,
    MetadataHealth,
    NewTopic,
    PartitionOutcome,
    PartitionState,
    QuotaEntity,
    QuotaValues,
    ScramCredential,
    TopicImage,
    TopicPartition,
)
from kernel.api.controller import (
    NewTopicNames,
    added_partitions_assignment,
    check_alter_partition,
    election_partition,
    initial_state,
    new_topic_assignment,
    reassignment,
    requested_election,
    topics_to_delete,
)
from kernel.api.errors import ErrorCode, KafkaError
from kernel.api.log import PluginLogConfig

from .convert import convert_legacy_log
from .features import (
    METADATA_VERSION,
    METADATA_VERSION_LEVEL,
    SUPPORTED_FEATURES,
    feature_level_records,
)
from .image import (
    CLUSTER_DEFAULT_BROKER,
    ConfigResourceType,
    MetadataDelta,
    SecurityProtocol,
    broker_resource_name,
    empty_image,
)
from .image_records import MetadataState
from .log import MetadataLog, versioned
from .properties import ensure_meta_properties
from .records.schema import (
    AccessControlEntryRecord,
    BrokerEndpoint,
    BrokerFeature,
    ClientQuotaRecord,
    ConfigRecord,
    EntityData,
    FeatureLevelRecord,
    Message,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from .records.serde import MetadataBatch, iter_metadata_records
from .snapshotter import PendingSnapshot, SnapshotPolicy, Snapshotter
from .storage import read_bootstrap_records

T = TypeVar("T")

# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE: ids a broker gets per allocation.
PRODUCER_ID_BLOCK_SIZE = 1000
# A commit of more records than this (a topic of many partitions) is replayed into the
# next image in a worker thread, not on the event loop.
_RECORDS_REPLAYED_ON_LOOP = 200
MAX_PRODUCER_ID = 2**63 - 1
# DirectoryId.UNASSIGNED: a new replica of a broker with several log dirs, until the
# broker says where it lives.
UNASSIGNED_DIR = uuid.UUID(int=1)


def _retrieve_result(task: asyncio.Task[Any]) -> None:
    # A caller cancelled while its change was being committed: the change still
    # completes, and its result or error is dropped without a "never retrieved" warning.
    if not task.cancelled():
        task.exception()


class KRaftMetadataBackend:
    """Metadata log + controller of a single-node KRaft quorum; implements
    ``kernel.api.cluster.MetadataBackend``.

    :param metadata_log_dir: Kafka's ``metadata.log.dir``; the log lives in its
        ``__cluster_metadata-0`` subdirectory.
    :param log_dirs: the broker's ``log.dirs``; each gets a ``meta.properties``.
    :param node_id: this node's id (``broker.id``); it is also the controller id.
    :param registration: how clients reach this broker; registered on ``start()``.
    :param logger: a structlog logger (the broker's); a default one when omitted.
    :param rng: randomness of replica placement (tests pass a seeded one).
    :param lock_fd: the ``.lock`` held on a metadata log dir outside ``log.dirs``;
        closed (released) by ``stop()``.
    :param snapshot_policy: when snapshots are taken and how long old ones are kept.
    :param log_config: segment settings of the metadata log.
    :param supported_features: feature name -> (min, max) level this node supports
        (``features.SUPPORTED_FEATURES``; tests widen it to exercise upgrades).
    """

    def __init__(
        self,
        metadata_log_dir: Path,
        log_dirs: Sequence[Path],
        node_id: int,
        registration: BrokerRegistration,
        *,
        logger: Any = None,
        rng: random.Random | None = None,
        lock_fd: int | None = None,
        snapshot_policy: SnapshotPolicy | None = None,
        log_config: PluginLogConfig | None = None,
        supported_features: Mapping[str, tuple[int, int]] = SUPPORTED_FEATURES,
    ) -> None:
        if registration.node_id != node_id:
            raise ValueError(
                f"registration is for node {registration.node_id}, this node is {node_id}"
            )
        self._metadata_log_dir = Path(metadata_log_dir)
        self._log_dirs = [Path(d) for d in log_dirs]
        self._node_id = node_id
        self._registration = registration
        self._log: Any = (logger or structlog.get_logger()).bind(component="metadata_kraft")
        self._rng = rng or random.Random()
        self._metadata_log = MetadataLog(self._metadata_log_dir, node_id, self._log,
                                         log_config)
        self._snapshotter = Snapshotter(self._metadata_log,
                                        snapshot_policy or SnapshotPolicy(), self._log)
        self._snapshot_task: asyncio.Task[None] | None = None
        self._snapshot_timer: asyncio.TimerHandle | None = None
        # directory.id of each of log.dirs (meta.properties), registered as LogDirs
        self._dir_ids: tuple[uuid.UUID, ...] = ()
        self._image = empty_image("", node_id)
        self._listeners: list[ImageListener] = []
        # Created in start() so it belongs to the loop that runs the backend.
        self._lock: asyncio.Lock | None = None
        self._started = False
        self._incarnation_id = uuid.uuid4()
        self._broker_epoch: int | None = None
        # The committed state: the image and what only the controller keeps.
        self._state = MetadataState.empty("", node_id)
        self._lock_fd = lock_fd
        self._supported_features = MappingProxyType(dict(supported_features))

    # -- reading ----------------------------------------------------------------

    @property
    def image(self) -> ClusterImage:
        return self._image

    @property
    def cluster_id(self) -> str:
        return self._image.cluster_id

    @property
    def broker_epoch(self) -> int | None:
        """Offset of this broker's latest RegisterBrokerRecord, as KRaft's broker epoch."""
        return self._broker_epoch

    @property
    def metadata_log(self) -> MetadataLog:
        return self._metadata_log

    def add_listener(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            raise RuntimeError("metadata backend already started")
        loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        cluster_id, dir_ids = await loop.run_in_executor(
            None, ensure_meta_properties, [*self._log_dirs, self._metadata_log_dir],
            self._node_id,
        )
        self._dir_ids = tuple(dict.fromkeys(dir_ids[d] for d in self._log_dirs))
        state = await loop.run_in_executor(None, self._load, cluster_id)
        self._started = True
        self._state = state
        self._publish(state.image)
        self._broker_epoch = await self.register_broker(
            self._registration, incarnation_id=self._incarnation_id
        )
        self._log.info(
            "metadata log loaded", cluster_id=cluster_id, node_id=self._node_id,
            path=str(self._metadata_log.path), next_offset=self._metadata_log.next_offset,
            epoch=self._metadata_log.epoch,
            snapshot=self._snapshotter.latest and self._snapshotter.latest.filename,
            topics=len(self._image.topics),
        )

    def _load(self, cluster_id: str) -> MetadataState:
        """Replay the latest snapshot and the log after it into one state, then begin
        this start's epoch (blocking)."""
        convert_legacy_log(self._metadata_log_dir, self._node_id, METADATA_VERSION_LEVEL,
                           self._default_dir, self._log)
        state, snapshot = self._snapshotter.load(MetadataState.empty(cluster_id, self._node_id))
        batches = self._metadata_log.open(snapshot.end_offset if snapshot else 0)
        try:
            delta = state.delta()
            replay_batches(delta, batches)
            self._metadata_log.begin_epoch(snapshot.epoch if snapshot else 0)
            if not delta.features:
                # A new cluster: the bootstrap records (`kafkernel storage format`'s
                # bootstrap.checkpoint, else metadata.version alone) come first.
                bootstrap = read_bootstrap_records(self._metadata_log_dir) or [
                    FeatureLevelRecord(name=METADATA_VERSION, feature_level=METADATA_VERSION_LEVEL)]
                for record in bootstrap:
                    delta.replay(record)
                self._metadata_log.append_blocking([versioned(r) for r in bootstrap])
            return MetadataState.of(delta, self._at_log_end(delta.apply()))
        except BaseException:
            self._metadata_log.close()
            raise

    async def stop(self) -> None:
        if self._snapshot_timer is not None:
            self._snapshot_timer.cancel()
            self._snapshot_timer = None
        if self._snapshot_task is not None:
            await asyncio.wait([self._snapshot_task])  # a snapshot ends before the log
        if self._lock is None:
            self._metadata_log.close()
        else:
            async with self._lock:  # let an in-flight commit finish
                self._started = False
                self._metadata_log.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- the commit path --------------------------------------------------------

    async def _serialized(self, operation: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run one controller operation alone, and to the end even if the caller is
        cancelled: once a batch may be on disk, the published image must follow it."""
        lock = self._lock
        if lock is None or not self._started:
            raise RuntimeError("metadata backend is not started")

        async def run() -> T:
            async with lock:
                if not self._started:
                    raise RuntimeError("metadata backend is stopped")
                return await operation()

        task = asyncio.ensure_future(run())
        task.add_done_callback(_retrieve_result)
        return await asyncio.shield(task)

    async def _commit(self, records: list[Message]) -> ClusterImage:
        delta = self._state.delta()

        def replay() -> ClusterImage:
            for record in records:
                delta.replay(record)
            return delta.apply()

        if len(records) > _RECORDS_REPLAYED_ON_LOOP:
            # The delta reads the current image and builds a new one: nothing another
            # task can see, and commits are serialized.
            image = await asyncio.get_running_loop().run_in_executor(None, replay)
        else:
            image = replay()
        await self._metadata_log.append([versioned(r) for r in records])
        image = self._at_log_end(image)
        self._state = MetadataState.of(delta, image)
        self._publish(image)
        self._maybe_snapshot()
        return image

    # -- snapshots --------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        """After a commit: snapshot the committed state when due (one at a time, in a
        worker thread), else arm the interval's timer."""
        if self._snapshot_task is not None or not self._started:
            return
        if not self._snapshotter.due():
            if self._snapshot_timer is None and self._snapshotter.interval_ms > 0:
                self._snapshot_timer = asyncio.get_running_loop().call_later(
                    max(self._snapshotter.ms_until_interval(), 0) / 1000, self._on_timer)
            return
        if self._snapshot_timer is not None:
            self._snapshot_timer.cancel()
            self._snapshot_timer = None
        pending = self._snapshotter.capture(self._state)
        self._snapshot_task = asyncio.ensure_future(self._snapshot(pending))

    def _on_timer(self) -> None:
        self._snapshot_timer = None
        self._maybe_snapshot()

    async def _snapshot(self, pending: PendingSnapshot) -> None:
        loop = asyncio.get_running_loop()
        try:
            path = await loop.run_in_executor(None, self._snapshotter.write, pending,
                                              self._default_dir)
            self._log.info("wrote a metadata snapshot", path=str(path),
                           records_below=pending.id.end_offset)

            async def clean() -> None:
                await loop.run_in_executor(None, self._snapshotter.clean)

            await self._serialized(clean)  # moves the log start: not during an append
        except Exception as e:  # the log still holds everything: retried when due again
            self._log.error("metadata snapshot failed", snapshot=pending.id.filename,
                            error=str(e))
        finally:
            self._snapshot_task = None
        if self._started and self._metadata_log.bytes_since_snapshot > 0:
            self._maybe_snapshot()

    def _at_log_end(self, image: ClusterImage) -> ClusterImage:
        """``image`` as of the log's last offset (its FinalizedFeaturesEpoch)."""
        return dataclasses.replace(image, metadata_offset=self._metadata_log.next_offset - 1)

    def _publish(self, image: ClusterImage) -> None:
        previous, self._image = self._image, image
        for listener in tuple(self._listeners):
            try:
                listener(previous, image)
            except Exception:
                # The change is committed; one failing listener must not hide it from
                # the others or fail the request that made it.
                self._log.exception("metadata listener failed", listener=repr(listener))

    # -- brokers ----------------------------------------------------------------

    async def register_broker(
        self, registration: BrokerRegistration, *, incarnation_id: uuid.UUID | None = None
    ) -> int:
        """Register (or re-register) a broker; returns its broker epoch."""

        async def register() -> int:
            epoch = self._metadata_log.next_offset
            # This node's own log dirs; another broker's are unknown here.
            own = registration.node_id == self._node_id
            await self._commit([RegisterBrokerRecord(
                broker_id=registration.node_id,
                incarnation_id=incarnation_id or uuid.uuid4(),
                broker_epoch=epoch,
                end_points=tuple(
                    BrokerEndpoint(name=e.listener_name, host=e.host, port=e.port,
                                   security_protocol=SecurityProtocol[e.security_protocol])
                    for e in registration.endpoints),
                rack=registration.rack,
                fenced=False,  # the single node serves at once
                log_dirs=self._dir_ids if own else (),
                cordoned_log_dirs=(),
                features=tuple(
                    BrokerFeature(name=name, min_supported_version=low,
                                  max_supported_version=high)
                    for name, (low, high) in self._supported_features.items()) if own else (),
            )])
            return epoch

        return await self._serialized(register)

    def _default_dir(self, broker_id: int) -> uuid.UUID:
        """Kafka's ClusterControlManager.defaultDir: a broker's only log dir, else
        UNASSIGNED until the broker assigns the replica (AssignReplicasToDirs)."""
        if broker_id == self._node_id and len(self._dir_ids) == 1:
            return self._dir_ids[0]
        return UNASSIGNED_DIR

    # -- features and health ----------------------------------------------------

    def supported_features(self) -> Mapping[str, tuple[int, int]]:
        """Feature name -> (min, max) level this node supports (ApiVersions)."""
        return self._supported_features

    async def update_features(
        self, updates: Mapping[str, tuple[int, int]], validate_only: bool,
    ) -> None:
        """Kafka's UpdateFeatures: ``updates`` is name -> (level, upgrade type); checked
        as FeatureControlManager does (INVALID_UPDATE_VERSION in its words), then, unless
        ``validate_only``, committed as FeatureLevelRecords in one batch."""

        async def update() -> None:
            records = feature_level_records(
                self._image.finalized_features, updates, node_id=self._node_id,
                supported=self._supported_features,
                brokers={b: r.features for b, r in self._state.broker_registrations.items()})
            if records and not validate_only:
                await self._commit(list(records))

        await self._serialized(update)

    def metadata_health(self) -> MetadataHealth:
        """A single node: its quorum is itself, reachable once started, and it is the
        active controller."""
        return MetadataHealth(
            connected=self._started, active_controller=True,
            fenced_brokers=sum(b.fenced for b in self._image.brokers.values()))

    # -- producer ids -----------------------------------------------------------

    async def allocate_producer_ids(self) -> range:
        """The next block of producer ids for this broker, as KRaft's
        ProducerIdControlManager.generateNextProducerId: the block's end is fsynced in a
        ProducerIdsRecord before the block is handed out."""

        async def allocate() -> range:
            first = self._state.next_producer_id
            if first > MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE:
                raise KafkaError(
                    ErrorCode.unknown_server_error,
                    "Exhausted all producerIds as the next block's end producerId has "
                    "exceeded the int64 type limit",
                )
            block = range(first, first + PRODUCER_ID_BLOCK_SIZE)
            await self._commit([ProducerIdsRecord(
                broker_id=self._node_id, broker_epoch=self._broker_epoch or 0,
                next_producer_id=block.stop,
            )])
            return block

        return await self._serialized(allocate)

    # -- SCRAM credentials ------------------------------------------------------

    def scram_credentials(self) -> Mapping[tuple[str, int], ScramCredential]:
        return self._state.scram_credentials

    async def alter_scram_credentials(
        self, upsertions: Sequence[ScramCredential], deletions: Sequence[tuple[str, int]],
    ) -> None:
        records: list[Message] = [
            RemoveUserScramCredentialRecord(name=name, mechanism=mechanism)
            for name, mechanism in deletions
        ]
        records.extend(UserScramCredentialRecord(
            name=c.name, mechanism=c.mechanism, salt=c.salt, stored_key=c.stored_key,
            server_key=c.server_key, iterations=c.iterations) for c in upsertions)
        if records:
            await self._serialized(lambda: self._commit(records))

    # -- client quotas ----------------------------------------------------------

    def client_quotas(self) -> Mapping[QuotaEntity, QuotaValues]:
        return self._state.client_quotas

    async def alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]],
    ) -> None:
        records: list[Message] = [
            ClientQuotaRecord(
                entity=tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity),
                key=key,
                value=0.0 if value is None else value, remove=value is None)
            for entity, values in changes.items() for key, value in values.items()]
        if records:
            await self._serialized(lambda: self._commit(records))

    # -- ACLs -------------------------------------------------------------------

    def acls(self) -> Mapping[uuid.UUID, AclBinding]:
        return self._state.acls

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[uuid.UUID]:
        async def create() -> list[uuid.UUID]:
            # As Kafka's AclControlManager: a binding already stored keeps its id.
            existing = {binding: acl_id for acl_id, binding in self._state.acls.items()}
            ids: list[uuid.UUID] = []
            records: list[Message] = []
            for b in bindings:
                acl_id = existing.get(b)
                if acl_id is None:
                    acl_id = existing[b] = uuid.uuid4()
                    records.append(AccessControlEntryRecord(
                        id=acl_id, resource_type=b.resource_type,
                        resource_name=b.resource_name, pattern_type=b.pattern_type,
                        principal=b.principal, host=b.host, operation=b.operation,
                        permission_type=b.permission_type))
                ids.append(acl_id)
            if records:
                await self._commit(records)
            return ids

        return await self._serialized(create)

    async def remove_acls(self, ids: Sequence[uuid.UUID]) -> None:
        async def remove() -> None:
            records: list[Message] = [RemoveAccessControlEntryRecord(id=acl_id)
                                             for acl_id in dict.fromkeys(ids)
                                             if acl_id in self._state.acls]
            if records:
                await self._commit(records)

        await self._serialized(remove)

    # -- topics -----------------------------------------------------------------

    async def create_topics(self, topics: list[NewTopic]) -> list[TopicImage]:
        return await self._serialized(lambda: self._create_topics(topics))

    async def _create_topics(self, topics: list[NewTopic]) -> list[TopicImage]:
        image = self._image
        names = NewTopicNames(image)
        records: list[Message] = []
        for topic in topics:
            name = topic.name
            if name == CLUSTER_METADATA_TOPIC:  # its directory is the metadata log's
                raise KafkaError(ErrorCode.invalid_request, CLUSTER_METADATA_PROHIBITED)
            names.check(name)
            assignment = new_topic_assignment(topic, image, self._rng)
            # uuid4 carries version bits, so it is never the zero UUID nor Kafka's
            # reserved metadata topic id.
            topic_id = uuid.uuid4()
            records.append(TopicRecord(name=name, topic_id=topic_id))
            records.extend(
                ConfigRecord(resource_type=ConfigResourceType.TOPIC, resource_name=name,
                             name=key, value=value)
                for key, value in sorted(topic.configs.items())
            )
            records.extend(
                _partition_record(image, topic_id, partition, replicas, self._default_dir)
                for partition, replicas in enumerate(assignment)
            )
        if not records:
            return []
        new = await self._commit(records)
        return [new.topics[topic.name] for topic in topics]

    async def delete_topics(self, names: list[str]) -> None:
        await self._serialized(lambda: self._delete_topics(names))

    async def _delete_topics(self, names: list[str]) -> None:
        records: list[Message] = [
            RemoveTopicRecord(topic_id=topic_id)
            for topic_id in topics_to_delete(self._image, names).values()]
        if records:
            await self._commit(records)

    async def create_partitions(
        self, topic: str, new_total: int, assignments: list[tuple[int, ...]] | None = None
    ) -> TopicImage:
        return await self._serialized(
            lambda: self._create_partitions(topic, new_total, assignments)
        )

    async def _create_partitions(
        self, topic: str, new_total: int, assignments: list[tuple[int, ...]] | None
    ) -> TopicImage:
        image = self._image
        current = _existing_topic(image, topic)
        count = len(current.partitions)
        first = current.partitions[min(current.partitions)]
        new_assignment = added_partitions_assignment(
            count, new_total, first.replicas, assignments, image, self._rng)
        new = await self._commit([
            _partition_record(image, current.topic_id, partition, replicas, self._default_dir)
            for partition, replicas in enumerate(new_assignment, start=count)
        ])
        return new.topics[topic]

    # -- configs ----------------------------------------------------------------

    async def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        async def change() -> None:
            current = _existing_topic(self._image, topic)
            records = _config_changes(ConfigResourceType.TOPIC, topic, current.configs, configs)
            if records:
                await self._commit(records)

        await self._serialized(change)

    async def set_broker_configs(self, broker_id: int, configs: Mapping[str, str]) -> None:
        if broker_id < CLUSTER_DEFAULT_BROKER:
            raise KafkaError(ErrorCode.invalid_request, f"Invalid broker id {broker_id}.")

        async def change() -> None:
            current = self._image.broker_configs.get(broker_id, {})
            records = _config_changes(
                ConfigResourceType.BROKER, broker_resource_name(broker_id), current, configs
            )
            if records:
                await self._commit(records)

        await self._serialized(change)

    # -- partitions -------------------------------------------------------------

    async def alter_partition(
        self, topic: str, partition: int, isr: tuple[int, ...], leader_epoch: int,
        partition_epoch: int,
    ) -> PartitionState:
        return await self._serialized(
            lambda: self._alter_partition(topic, partition, tuple(isr), leader_epoch,
                                          partition_epoch)
        )

    async def _alter_partition(
        self, topic: str, partition: int, isr: tuple[int, ...], leader_epoch: int,
        partition_epoch: int,
    ) -> PartitionState:
        image = self._image
        current = check_alter_partition(image, topic, partition, isr, leader_epoch,
                                        partition_epoch)
        if isr == current.isr:
            return current
        topic_id = image.topics[topic].topic_id
        new = await self._commit([PartitionChangeRecord(
            topic_id=topic_id, partition_id=partition, isr=isr)])
        state = new.partition(topic, partition)
        assert state is not None
        return state


    async def elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition],
        timeout_ms: int,
    ) -> dict[TopicPartition, PartitionOutcome]:
        """Kafka's ReplicationControlManager.electLeaders: the elections needed and
        possible, committed as PartitionChangeRecords in one batch (with one broker,
        mostly ELECTION_NOT_NEEDED)."""
        return await self._serialized(lambda: self._elect_leaders(election_type, partitions))

    async def _elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, PartitionOutcome]:
        image = self._image
        results: dict[TopicPartition, PartitionOutcome] = {}
        records: list[Message] = []
        for topic, partition in dict.fromkeys(partitions):
            try:
                state = election_partition(image, topic, partition)
                leader, isr = requested_election(state, election_type,
                                                 image.active_brokers)
            except KafkaError as e:
                results[(topic, partition)] = PartitionOutcome.of(e)
                continue
            records.append(PartitionChangeRecord(topic_id=image.topics[topic].topic_id,
                                                 partition_id=partition, isr=isr,
                                                 leader=leader))
            results[(topic, partition)] = PartitionOutcome()
        if records:
            await self._commit(records)
        return results

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, tuple[int, ...] | None],
    ) -> dict[TopicPartition, PartitionOutcome]:
        """A single-node quorum has no other broker to move a replica to: a target of
        this broker alone is already the assignment (nothing to do, as Kafka's
        controller answers it), another broker is INVALID_REPLICA_ASSIGNMENT and a
        cancellation NO_REASSIGNMENT_IN_PROGRESS."""
        image = self._image
        results: dict[TopicPartition, PartitionOutcome] = {}
        for tp, target in reassignments.items():
            state = image.partition(*tp)
            try:
                replicas, adding, removing = reassignment(
                    state, target, image.brokers)
                if adding or removing or state is None or replicas != state.replicas:
                    raise KafkaError(ErrorCode.invalid_replica_assignment,
                                     "A single-node metadata quorum cannot move replicas.")
            except KafkaError as e:
                results[tp] = PartitionOutcome.of(e)
            else:
                results[tp] = PartitionOutcome()
        return results


def replay_batches(delta: MetadataDelta, batches: Sequence[MetadataBatch]) -> None:
    """Replay the metadata records of ``batches`` (control batches hold none)."""
    for record in iter_metadata_records(batches):
        delta.replay(record.message)


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------


def _existing_topic(image: ClusterImage, name: str) -> TopicImage:
    topic = image.topics.get(name)
    if topic is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
    return topic


def _partition_record(
    image: ClusterImage, topic_id: uuid.UUID, partition: int, replicas: tuple[int, ...],
    default_dir: Callable[[int], uuid.UUID],
) -> PartitionRecord:
    leader, isr = initial_state(replicas, image.active_brokers) or (NO_LEADER, ())
    return PartitionRecord(
        topic_id=topic_id, partition_id=partition, replicas=replicas, isr=isr,
        leader=leader, leader_epoch=0, partition_epoch=0,
        directories=tuple(default_dir(r) for r in replicas),
    )


def _config_changes(
    resource_type: ConfigResourceType, resource_name: str, current: Mapping[str, str],
    wanted: Mapping[str, str],
) -> list[Message]:
    """ConfigRecords that turn ``current`` into ``wanted`` (value None deletes)."""
    records: list[Message] = [
        ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=name,
                     value=None)
        for name in sorted(current) if name not in wanted
    ]
    records.extend(
        ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=name,
                     value=value)
        for name, value in sorted(wanted.items()) if current.get(name) != value
    )
    return records
