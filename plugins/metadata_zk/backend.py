"""The ZooKeeper metadata backend: Kafka's znodes are the authority; the watcher
(``watcher``) keeps this broker's cache of them and publishes it as the cluster image.
This module registers the broker and writes.

A change a client asks for is written as Kafka 3.x's brokers wrote it (a topic's
assignment under /brokers/topics, its configs under /config/topics with a
/config/changes notification, a deletion request under /admin/delete_topics, ...); the
controller (``controller``: whichever broker holds /controller) turns it into partition
state, and the method returns once this broker's watches have shown the result, so the
published image already has it, as the MetadataBackend contract asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)

from kernel.api.cluster import (
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
    new_topic_assignment,
    reassignment,
    requested_election,
    topics_to_delete,
)
from kernel.api.errors import ErrorCode, KafkaError

from .cache import ZnodeCache
from .connection import ZkConnection
from .controller import ELECTION_PATHS, Rebalance, ZkController
from .properties import check_meta_properties
from .quotas import entity_path, quota_text, quota_values
from .watcher import ZkWatcher, retrieve_result
from .zkclient import KazooState, ZkClient, ZkUnreachable
from .znodes import (
    ACL_PATHS,
    CLUSTER_ID,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    ISR_CHANGE_PREFIX,
    ISR_CHANGES,
    PERSISTENT_PATHS,
    PRODUCER_ID_BLOCK,
    SCRAM_MECHANISMS,
    LeaderAndIsr,
    ZnodeFormatError,
    acl_id,
    acl_path,
    acls_by_pattern,
    broker_entity,
    broker_path,
    config_path,
    decode_acls,
    decode_cluster_id,
    decode_election,
    decode_producer_id_block_end,
    decode_topic,
    delete_topic_path,
    desanitize,
    encode_acls,
    encode_broker,
    encode_cluster_id,
    encode_config,
    encode_config_change,
    encode_election,
    encode_isr_change,
    encode_partition_state,
    encode_producer_id_block,
    encode_topic,
    partition_state_path,
    sanitize,
    scram_to_config,
    topic_path,
    uuid_to_kafka,
)

T = TypeVar("T")

# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE.
PRODUCER_ID_BLOCK_SIZE = 1000
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000


class BrokerIdInUse(Exception):
    """/brokers/ids/<id> is held by another ZooKeeper session."""


class ZkMetadataBackend:
    """Implements ``kernel.api.cluster.MetadataBackend`` on Kafka's ZooKeeper layout.

    :param zk: the ZooKeeper session (not started).
    :param broker_id: this broker's ``broker.id``.
    :param registration: its endpoints, registered ephemerally under /brokers/ids.
    :param new_cluster_id: makes the id /cluster/id gets when this broker is the first.
    :param log_dirs: the broker's ``log.dirs``, each tied to the cluster and broker id by
        its ``meta.properties``.
    :param unclean_default: the broker's ``unclean.leader.election.enable`` now, for
        topics that do not set it (read when this broker is the controller).
    :param rebalance: auto.leader.rebalance.enable and leader.imbalance.*, for the
        controller.
    """

    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int,
                 broker_id: int, registration: BrokerRegistration, *,
                 new_cluster_id: Callable[[], str], log_dirs: Sequence[Path] = (),
                 logger: Any = None, rng: random.Random | None = None,
                 unclean_default: Callable[[], bool] = lambda: False,
                 rebalance: Rebalance | None = None) -> None:
        self._log: Any = (logger or structlog.get_logger()).bind(component="metadata_zk")
        self._zk = ZkClient(connect, session_timeout_ms, connection_timeout_ms,
                            on_state=self._on_session_state, logger=self._log)
        self._broker_id = broker_id
        self._registration = registration
        self._new_cluster_id = new_cluster_id
        self._log_dirs = list(log_dirs)
        self._rng = rng or random.Random()
        self._cluster_id = ""
        self._registered = False
        self.broker_epoch: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False
        self._stopping = False
        self._connection = ZkConnection(self._zk, self._log)
        self._write = self._connection.write
        # The watcher alone writes the cache; the controller and the writes read it.
        self._cache = ZnodeCache()
        self._controller = ZkController(
            self._zk, self._cache, broker_id, is_registered=lambda: self._registered,
            logger=self._log, unclean_default=unclean_default,
            rebalance=rebalance or Rebalance())
        self._watcher = ZkWatcher(self._zk, self._cache, self._controller, self._log)
        self._until = self._watcher.until  # a write returns once its change shows
        self._watcher.add_listener(self._delete_landed)

    # -- reading ------------------------------------------------------------------

    @property
    def image(self) -> ClusterImage:
        return self._watcher.image

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def is_controller(self) -> bool:
        return self._controller.active

    def metadata_health(self) -> MetadataHealth:
        return self._connection.health(started=self._started,
                                       active_controller=self._controller.active)

    def add_listener(self, listener: ImageListener) -> None:
        self._watcher.add_listener(listener)

    def scram_credentials(self) -> Mapping[tuple[str, int], ScramCredential]:
        return self._watcher.scram_credentials()

    def client_quotas(self) -> Mapping[QuotaEntity, QuotaValues]:
        return self._watcher.client_quotas()

    def acls(self) -> Mapping[uuid.UUID, AclBinding]:
        return self._watcher.acls()

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, make Kafka's top-level paths and the cluster id, learn the znodes,
        register this broker, then stand for controller. Raises ZkUnreachable,
        MetaPropertiesMismatch or BrokerIdInUse (the plugin turns them into one
        start-up line)."""
        if self._started:
            raise RuntimeError("metadata backend already started")
        await self._zk.start()
        self._connection.started()
        self._cluster_id = await self._zk.call(self._prepare_paths)
        await asyncio.get_running_loop().run_in_executor(
            None, check_meta_properties, self._log_dirs, self._broker_id, self._cluster_id)
        self._started = True
        await self._watcher.start(self._cluster_id)
        await self._register()
        await self._until(lambda: self._watcher.pending_watches == 0
                          and self._broker_id in self._cache.brokers,
                          "this broker's registration to show")
        await self._watcher.watch_controller()
        await self._until(lambda: self._cache.controller_id != -1, "a controller election")
        self._watcher.flush()
        self._log.info("joined the cluster through ZooKeeper", cluster_id=self._cluster_id,
                       broker_id=self._broker_id, broker_epoch=self.broker_epoch,
                       zookeeper=self._zk.connect, topics=len(self.image.topics))

    def _prepare_paths(self) -> str:
        """Kafka's createTopLevelPaths and getOrCreateClusterId (blocking)."""
        k = self._zk.kazoo
        for path in (*PERSISTENT_PATHS, *ACL_PATHS):
            k.ensure_path(path)
        try:
            data, _ = k.get(CLUSTER_ID)
        except NoNodeError:
            candidate = self._new_cluster_id()
            if self._zk.create_if_absent(CLUSTER_ID, encode_cluster_id(candidate)):
                return candidate
            data, _ = k.get(CLUSTER_ID)
        return decode_cluster_id(data)

    async def _register(self) -> None:
        self.broker_epoch = await self._zk.call(self._register_blocking)
        self._registered = True

    def _register_blocking(self) -> int:
        """Kafka's registerBroker: an ephemeral /brokers/ids/<id>; its czxid is the
        broker epoch. A node this session owns already (a retried create after a
        reconnection) is ours; one of another session is a broker with this id."""
        k = self._zk.kazoo
        path = broker_path(self._broker_id)
        with contextlib.suppress(NodeExistsError):
            k.create(path, encode_broker(self._registration), ephemeral=True)
        try:
            _, stat = k.get(path)
        except NoNodeError:  # its owner's session ended meanwhile: try once more
            k.create(path, encode_broker(self._registration), ephemeral=True)
            _, stat = k.get(path)
        if stat.ephemeralOwner != self._zk.session_id:
            raise BrokerIdInUse(
                f"broker.id {self._broker_id} is already registered in ZooKeeper at "
                f"{path} by another session (0x{stat.ephemeralOwner:x}); another broker "
                "has this id, or this broker's previous session has not expired yet")
        return int(stat.czxid)

    async def stop(self) -> None:
        self._stopping = True
        await self._controller.stop()
        self._watcher.stop()
        for task in list(self._tasks):
            task.cancel()
        if self._started or self._zk is not None:
            await self._zk.stop()
        self._started = False

    def _on_session_state(self, state: str) -> None:
        if self._stopping:
            return
        self._connection.changed(state, self._broker_id)
        if state == KazooState.LOST:
            # The ephemeral registration and /controller went with the session: kazoo
            # opens a new one, then this broker registers and contends again.
            self._registered = False
            self._controller.session_lost()
        elif state == KazooState.CONNECTED and self._started and not self._registered:
            self._spawn(self._reregister())

    async def _reregister(self) -> None:
        try:
            await self._register()
        except Exception as e:
            self._log.error("cannot register again in ZooKeeper",
                            error=f"{type(e).__name__}: {e}")
            return
        self._log.info("registered again in ZooKeeper", broker_epoch=self.broker_epoch)
        self._controller.stand()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(retrieve_result)

    # -- client quotas: /config/users, /config/clients, /config/ips (quotas.py) ----------

    async def alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]],
    ) -> None:
        wanted: dict[QuotaEntity, dict[str, float]] = {}
        for entity, change in changes.items():
            path = entity_path(entity)
            # A user's znode also holds its SCRAM credentials: those are kept.
            configs = dict(self._cache.user_configs.get(desanitize(path[6:]), {})) \
                if path.startswith("users/") and "/" not in path[6:] else {
                    k: quota_text(k, v) for k, v in self._watcher.quota_znode(entity).items()}
            for key, value in change.items():
                if value is None:
                    configs.pop(key, None)
                else:
                    configs[key] = quota_text(key, value)
            wanted[entity] = quota_values(configs)
            await self._write(self._write_quota_configs, path, configs)
        await self._until(lambda: all(self._watcher.quota_znode(e) == v
                                      for e, v in wanted.items()), "the quotas to show")

    def _write_quota_configs(self, path: str, configs: Mapping[str, str]) -> None:
        """As _write_configs, with the parents made first: a user+client-id entity is
        /config/users/<user>/clients/<client-id> (blocking)."""
        k = self._zk.kazoo
        parent = f"/config/{path}".rsplit("/", 1)[0]
        k.ensure_path(parent)
        if path.startswith("users/"):
            k.ensure_path(f"/config/{path.split('/')[0]}/{path.split('/')[1]}/clients")
        entity_type, _, entity = path.partition("/")
        self._write_configs(entity_type, entity, configs)

    # -- topics -----------------------------------------------------------------------

    async def create_topics(self, topics: list[NewTopic]) -> list[TopicImage]:
        image = self.image
        names = NewTopicNames(image)
        writes: list[tuple[str, uuid.UUID, dict[int, tuple[int, ...]], Mapping[str, str]]] = []
        for topic in topics:
            name = topic.name
            if self._connection.adopt(name, image):
                continue
            if name in self._cache.topics:
                raise KafkaError(ErrorCode.topic_already_exists,
                                 f"Topic '{name}' already exists.")
            if name in self._cache.deletions:
                raise KafkaError(ErrorCode.topic_already_exists,
                                 f"Topic '{name}' is marked for deletion.")
            names.check(name)
            assignment = new_topic_assignment(topic, image, self._rng)
            writes.append((name, uuid.uuid4(), dict(enumerate(assignment)), topic.configs))
        if writes:
            await self._create_or_abandon(writes)
        return [self.image.topics[t.name] for t in topics]

    async def _create_or_abandon(
            self, writes: Sequence[tuple[str, uuid.UUID, dict[int, tuple[int, ...]],
                                         Mapping[str, str]]]) -> None:
        """Write the topics and wait for the controller; a CreateTopics answered with
        an error does not create its topics later (connection.py)."""
        await self._connection.create(lambda: self._write_topics(writes),
                                      [(name, tid) for name, tid, _, _ in writes])
        expected = {name: (topic_id, len(a)) for name, topic_id, a, _ in writes}
        await self._until(lambda: all(
            (t := self.image.topics.get(name)) is not None and t.topic_id == tid
            and len(t.partitions) == n for name, (tid, n) in expected.items()),
            "the controller to create the topics' partitions")

    def _delete_landed(self, _: ClusterImage, image: ClusterImage) -> None:
        for name in self._connection.landed(image):
            self._spawn(self._write(self._zk.create_if_absent, delete_topic_path(name)))

    def _write_topics(self, writes: Sequence[tuple[str, uuid.UUID, dict[int, tuple[int, ...]],
                                                   Mapping[str, str]]]) -> None:
        """Configs, then assignments, of all topics in one transaction (blocking), as
        AdminZkClient.createTopicWithAssignment writes one."""
        k = self._zk.kazoo
        t = k.transaction()
        topic_ops: dict[int, str] = {}
        for name, topic_id, assignment, configs in writes:
            path = config_path("topics", name)
            if k.exists(path):  # left by a deletion that did not finish
                t.set_data(path, encode_config(configs))
            else:
                t.create(path, encode_config(configs))
            topic_ops[len(t.operations)] = name
            t.create(topic_path(name), encode_topic(topic_id, assignment))
        results = t.commit()
        for index, result in enumerate(results):
            if isinstance(result, NodeExistsError) and index in topic_ops:
                raise KafkaError(ErrorCode.topic_already_exists,
                                 f"Topic '{topic_ops[index]}' already exists.")
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            raise errors[0]

    async def delete_topics(self, names: list[str]) -> None:
        gone = topics_to_delete(self.image, names)
        if not gone:
            return

        def request() -> None:
            for name in gone:
                self._zk.create_if_absent(delete_topic_path(name))

        await self._write(request)
        await self._until(lambda: all(
            (t := self.image.topics.get(n)) is None or t.topic_id != tid
            for n, tid in gone.items()), "the controller to delete the topics")

    async def create_partitions(self, topic: str, new_total: int,
                                assignments: list[tuple[int, ...]] | None = None
                                ) -> TopicImage:
        current = self.image.topics.get(topic)
        cached = self._cache.topics.get(topic)
        if current is None or cached is None or cached.assignment is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"Topic '{topic}' does not exist.")
        count = len(cached.assignment.partitions)
        if cached.assignment.adding or cached.assignment.removing:
            raise KafkaError(ErrorCode.reassignment_in_progress,
                             f"A partition reassignment is in progress for the topic "
                             f"'{topic}'.")
        first = cached.assignment.partitions[min(cached.assignment.partitions)]
        new = added_partitions_assignment(count, new_total, first, assignments, self.image,
                                          self._rng)
        partitions = dict(cached.assignment.partitions)
        partitions.update(enumerate(new, start=count))
        data, version = encode_topic(current.topic_id, partitions), cached.version

        def write() -> None:
            """AdminZkClient.addPartitions: the whole assignment, at the version read."""
            try:
                self._zk.kazoo.set(topic_path(topic), data, version=version)
            except BadVersionError:
                raise KafkaError(ErrorCode.reassignment_in_progress,
                                 f"Topic '{topic}' changed meanwhile; try again.") from None

        await self._write(write)
        await self._until(lambda: (t := self.image.topics.get(topic)) is not None
                          and len(t.partitions) == new_total,
                          "the controller to create the new partitions")
        return self.image.topics[topic]

    # -- configs ----------------------------------------------------------------------

    async def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        if topic not in self.image.topics:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"Topic '{topic}' does not exist.")
        wanted = dict(configs)
        await self._write(self._write_configs, "topics", topic, wanted)
        await self._until(lambda: (t := self.image.topics.get(topic)) is None
                          or dict(t.configs) == wanted, "the topic's configs to show")

    async def set_broker_configs(self, broker_id: int, configs: Mapping[str, str]) -> None:
        if broker_id < -1:
            raise KafkaError(ErrorCode.invalid_request, f"Invalid broker id {broker_id}.")
        wanted = dict(configs)
        await self._write(self._write_configs, "brokers", broker_entity(broker_id), wanted)
        await self._until(lambda: dict(self.image.broker_configs.get(broker_id, {})) == wanted,
                          "the broker's configs to show")

    def _write_configs(self, entity_type: str, entity: str, configs: Mapping[str, str],
                       ) -> None:
        """Kafka's AdminZkClient.changeEntityConfig: the entity's znode, then a
        /config/changes notification naming it (blocking)."""
        k = self._zk.kazoo
        path = config_path(entity_type, entity)
        t = k.transaction()
        if k.exists(path):
            t.set_data(path, encode_config(configs))
        else:
            t.create(path, encode_config(configs))
        t.create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                 encode_config_change(f"{entity_type}/{entity}"), sequence=True)
        errors = [r for r in t.commit() if isinstance(r, Exception)]
        if errors:
            raise errors[0]
        self._purge_config_changes()

    def _purge_config_changes(self) -> None:
        """Notifications older than Kafka's 15 minutes (its change listener's
        changeExpirationMs) go: every broker has read them by then (blocking)."""
        k = self._zk.kazoo
        horizon = time.time() * 1000 - CONFIG_CHANGE_EXPIRATION_MS
        for child in k.get_children(CONFIG_CHANGES):
            path = f"{CONFIG_CHANGES}/{child}"
            stat = k.exists(path)
            if stat is not None and stat.ctime < horizon:
                with contextlib.suppress(NoNodeError):
                    k.delete(path)

    async def alter_scram_credentials(
        self, upsertions: Sequence[ScramCredential], deletions: Sequence[tuple[str, int]],
    ) -> None:
        users: dict[str, dict[str, str]] = {}
        for name, mechanism in deletions:
            configs = users.setdefault(name, dict(self._cache.user_configs.get(name, {})))
            configs.pop(SCRAM_MECHANISMS[mechanism], None)
        for c in upsertions:
            configs = users.setdefault(c.name, dict(self._cache.user_configs.get(c.name, {})))
            configs[SCRAM_MECHANISMS[c.mechanism]] = scram_to_config(c)
        for name, configs in users.items():
            await self._write(self._write_configs, "users", sanitize(name), configs)
        await self._until(lambda: all(
            self._cache.user_configs.get(n, {}) == c for n, c in users.items()),
            "the users' credentials to show")

    # -- ACLs: Kafka's ZooKeeper authorizer layout ------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[uuid.UUID]:
        for key, group in acls_by_pattern(bindings).items():
            await self._write(self._rewrite_acls, key, group, ())
        await self._until(lambda: all(acl_id(b) in self.acls() for b in bindings),
                          "the ACLs to show")
        return [acl_id(b) for b in bindings]

    async def remove_acls(self, ids: Sequence[uuid.UUID]) -> None:
        gone = [self.acls()[i] for i in ids if i in self.acls()]
        for key, group in acls_by_pattern(gone).items():
            await self._write(self._rewrite_acls, key, (), group)
        await self._until(lambda: not any(i in self.acls() for i in ids),
                          "the ACLs to go")

    def _rewrite_acls(self, key: tuple[int, str, int], add: Sequence[AclBinding],
                      remove: Sequence[AclBinding]) -> None:
        """One resource pattern's znode rewritten at the version read, as ZkAclStore
        updates it (blocking); deleted once it holds no ACL."""
        k = self._zk.kazoo
        path = acl_path(*key)
        while True:
            try:
                data, stat = k.get(path)
                current, version = decode_acls(*key, data), stat.version
            except NoNodeError:
                current, version = [], None
            merged = [b for b in current if b not in remove]
            merged += [b for b in dict.fromkeys(add) if b not in merged]
            try:
                if version is None:
                    if merged:
                        k.create(path, encode_acls(merged), makepath=True)
                elif merged:
                    k.set(path, encode_acls(merged), version=version)
                else:
                    k.delete(path, version=version)
                return
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue  # another broker changed it meanwhile: read again

    # -- partitions ---------------------------------------------------------------------

    async def alter_partition(self, topic: str, partition: int, isr: tuple[int, ...],
                              leader_epoch: int, partition_epoch: int) -> PartitionState:
        """The leader's ISR change: the state znode rewritten at the version the leader
        read (ZooKeeper's version is Kafka's partition epoch in ZooKeeper mode), with an
        /isr_change_notification for the controller, as Kafka's leaders did before
        AlterPartition. The write also checks the topic znode's version the replicas
        were checked against: the controller completes a reassignment by writing the
        state and the topic in one multi-op, but the watches may bring the new state
        first, and an ISR checked against the old replicas could take back a replica
        just removed."""
        isr = tuple(isr)
        current = check_alter_partition(self.image, topic, partition, isr, leader_epoch,
                                        partition_epoch)
        cached = self._cache.topics.get(topic)
        state = None if cached is None else cached.states.get(partition)
        where = f"{topic}-{partition}"
        if state is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"Partition {where} does not exist.")
        if isr == current.isr:
            return current
        new = LeaderAndIsr(state.leader, state.leader_epoch, isr, state.controller_epoch)

        topic_version = cached.version if cached is not None else -1

        def write() -> int:
            t = self._zk.kazoo.transaction()
            t.check(topic_path(topic), topic_version)
            t.set_data(partition_state_path(topic, partition), encode_partition_state(new),
                       version=partition_epoch)
            t.create(f"{ISR_CHANGES}/{ISR_CHANGE_PREFIX}", encode_isr_change([(topic, partition)]),
                     sequence=True)
            results = t.commit()
            if isinstance(results[0], BadVersionError | NoNodeError):
                raise KafkaError(ErrorCode.invalid_update_version,
                                 f"The replicas of {where} changed since {list(current.replicas)}"
                                 "; this broker has not seen them yet.")
            if isinstance(results[1], BadVersionError):
                raise KafkaError(ErrorCode.invalid_update_version,
                                 f"Partition epoch {partition_epoch} of {where} is not the "
                                 "current one.")
            errors = [r for r in results if isinstance(r, Exception)]
            if errors:
                raise errors[0]
            return int(results[1].version)

        version = await self._write(write)
        await self._until(lambda: (p := self.image.partition(topic, partition)) is None
                          or p.partition_epoch >= version, "the partition's new ISR to show")
        result = self.image.partition(topic, partition)
        if result is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"Partition {where} does not exist.")
        return result

    # -- elections and reassignments ----------------------------------------------------

    async def elect_leaders(self, election_type: ElectionType,
                            partitions: Sequence[TopicPartition], timeout_ms: int,
                            ) -> dict[TopicPartition, PartitionOutcome]:
        """Partitions that need and can have an election are written to the request
        znode the controller watches (Kafka's /admin/preferred_replica_election, or
        Kafkernel's /admin/unclean_leader_election); each is answered once the image
        shows the leader elected, as Kafka's DelayedElectLeader waits."""
        image = self.image
        live = set(image.brokers)
        results: dict[TopicPartition, PartitionOutcome] = {}
        expected: dict[TopicPartition, int] = {}
        for tp in dict.fromkeys(partitions):
            try:
                if tp[0] in self._cache.deletions:
                    raise KafkaError(ErrorCode.invalid_topic_exception,
                                     "The topic is being deleted")
                state = election_partition(image, *tp)
                expected[tp] = requested_election(state, election_type, live)[0]
            except KafkaError as e:
                results[tp] = PartitionOutcome.of(e)
        if not expected:
            return results

        def elected() -> bool:
            return all((p := self.image.partition(*tp)) is not None and p.leader == leader
                       for tp, leader in expected.items())

        try:
            await self._write(self._request_election, election_type, list(expected))
            await self._until(elected, "the controller to elect the leaders",
                              timeout=max(timeout_ms, 0) / 1000)
        except KafkaError as e:
            if e.error_code != ErrorCode.request_timed_out:
                raise
        for tp, leader in expected.items():
            p = self.image.partition(*tp)
            results[tp] = PartitionOutcome() if p is not None and p.leader == leader \
                else PartitionOutcome(ErrorCode.request_timed_out)
        return results

    def _request_election(self, election_type: ElectionType,
                          partitions: Sequence[TopicPartition]) -> None:
        """Add the partitions to the request znode, created or rewritten at the
        version read (blocking)."""
        k = self._zk.kazoo
        path = ELECTION_PATHS[election_type]
        while True:
            try:
                data, stat = k.get(path)
            except NoNodeError:
                try:
                    k.create(path, encode_election(partitions))
                    return
                except NodeExistsError:
                    continue
            try:
                current = decode_election(data)
            except ZnodeFormatError:
                current = frozenset()
            try:
                k.set(path, encode_election(current | set(partitions)), version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, tuple[int, ...] | None],
    ) -> dict[TopicPartition, PartitionOutcome]:
        """KIP-455 over ZooKeeper as Kafka 3.x's controller wrote it: the topic znode
        gets each partition's full replica set (targets first) with its
        adding_replicas and removing_replicas, at the version read; the controller
        completes it once the targets are in the ISR. Answered once the image shows the
        reassignment (or its completion)."""
        image = self.image
        live = set(image.brokers)
        results: dict[TopicPartition, PartitionOutcome] = {}
        targets: dict[str, dict[int, tuple[int, ...] | None]] = {}
        for (topic, partition), target in reassignments.items():
            try:
                if topic in self._cache.deletions:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition,
                                     "The partition does not exist.")
                reassignment(image.partition(topic, partition), target, live)
            except KafkaError as e:
                results[(topic, partition)] = PartitionOutcome.of(e)
            else:
                targets.setdefault(topic, {})[partition] = target
        for topic, wanted in targets.items():
            try:
                written = await self._write(self._write_reassignments, topic, wanted, live)
                results.update({(topic, p): outcome
                                for p, (outcome, _) in written.items()})
                plans = {p: plan for p, (outcome, plan) in written.items() if plan}
                await self._until(lambda topic=topic, plans=plans: all(
                    _reassignment_shown(self.image.partition(topic, p), *plan)
                    for p, plan in plans.items()), "the reassignment to show")
            except KafkaError as e:
                results.update({(topic, p): PartitionOutcome.of(e) for p in wanted})
        return results

    def _write_reassignments(
        self, topic: str, wanted: Mapping[int, tuple[int, ...] | None], live: set[int],
    ) -> dict[int, tuple[PartitionOutcome, tuple[tuple[int, ...], ...] | None]]:
        """The topic znode read, the reassignments applied to what it holds, written
        at its version (blocking); per partition its outcome and (replicas, adding,
        removing)."""
        k = self._zk.kazoo
        while True:
            try:
                data, stat = k.get(topic_path(topic))
                current = decode_topic(data)
            except (NoNodeError, ZnodeFormatError):
                missing = PartitionOutcome(ErrorCode.unknown_topic_or_partition,
                                           "The partition does not exist.")
                return {p: (missing, None) for p in wanted}
            partitions = dict(current.partitions)
            adding, removing = dict(current.adding), dict(current.removing)
            out: dict[int, tuple[PartitionOutcome, tuple[tuple[int, ...], ...] | None]] = {}
            for partition, target in wanted.items():
                replicas = partitions.get(partition)
                state = None if replicas is None else PartitionState(
                    partition, replicas, (), NO_LEADER,
                    adding_replicas=adding.get(partition, ()),
                    removing_replicas=removing.get(partition, ()))
                try:
                    plan = reassignment(state, target, live)
                except KafkaError as e:
                    out[partition] = (PartitionOutcome.of(e), None)
                    continue
                partitions[partition], adding[partition], removing[partition] = plan
                out[partition] = (PartitionOutcome(), plan)
                self._log.info("partition reassignment", topic=topic, partition=partition,
                               replicas=list(plan[0]), adding=list(plan[1]),
                               removing=list(plan[2]))
            if not any(plan for _, plan in out.values()):
                return out
            try:
                k.set(topic_path(topic), encode_topic(current.topic_id, partitions, adding,
                                                      removing), version=stat.version)
                return out
            except BadVersionError:
                continue  # the controller (or another broker) changed it: read again

    async def allocate_producer_ids(self) -> range:
        return await self._write(self._allocate_producer_ids)

    def _allocate_producer_ids(self) -> range:
        """Kafka's ZkProducerIdManager.getNewProducerIdBlock: the next block after
        /latest_producer_id_block, written at the version read (blocking)."""
        k = self._zk.kazoo
        while True:
            data, stat = k.get(PRODUCER_ID_BLOCK)
            try:
                last = decode_producer_id_block_end(data)
            except ZnodeFormatError as e:
                raise KafkaError(ErrorCode.unknown_server_error,
                                 f"{PRODUCER_ID_BLOCK} is malformed: {e}") from None
            if last > 2**63 - 1 - PRODUCER_ID_BLOCK_SIZE:
                raise KafkaError(ErrorCode.unknown_server_error,
                                 "Exhausted all producerIds as the next block's end producerId "
                                 "has exceeded the int64 type limit")
            block = range(last + 1, last + 1 + PRODUCER_ID_BLOCK_SIZE)
            try:
                k.set(PRODUCER_ID_BLOCK, encode_producer_id_block(self._broker_id, block),
                      version=stat.version)
                return block
            except BadVersionError:
                continue  # another broker took a block meanwhile


def _reassignment_shown(state: PartitionState | None, replicas: tuple[int, ...],
                        adding: tuple[int, ...], removing: tuple[int, ...]) -> bool:
    """The image has the reassignment written, or already its completion."""
    if state is None:
        return True  # deleted meanwhile: nothing more to wait for
    if (state.replicas, state.adding_replicas, state.removing_replicas) == (
            replicas, adding, removing):
        return True
    return not state.reassigning and state.replicas == tuple(
        r for r in replicas if r not in removing)


__all__ = ["NO_LEADER", "BrokerIdInUse", "ZkMetadataBackend", "ZkUnreachable", "uuid_to_kafka"]
