"""The ZooKeeper metadata backend's reading side: watches on Kafka's znodes fill the
cache (``cache.ZnodeCache``), and the cache is published as the cluster image.

Every callback a watch delivers updates the cache and marks what changed; one image is
built per loop turn for all the changes delivered since the last (``flush``), then the
image's listeners, the writers waiting for their change to show (``until``) and the
controller are told. The writing side (``backend``) reads the cache and the image but
never changes them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from types import MappingProxyType
from typing import Any

from kernel.api.cluster import (
    AclBinding,
    ClusterImage,
    ElectionType,
    ImageListener,
    PartitionState,
    QuotaEntity,
    QuotaValues,
    ScramCredential,
    TopicImage,
    is_internal_topic,
)
from kernel.api.errors import ErrorCode, KafkaError

from .cache import TopicZnodes, ZnodeCache
from .controller import ELECTION_PATHS, ZkController
from .quotas import entity_at, quota_values
from .zkclient import WatchHandle, ZkClient, ZnodeStat
from .znodes import (
    ACL_RESOURCE_TYPES,
    ACL_STORES,
    BROKER_IDS,
    CONTROLLER,
    DELETE_TOPICS,
    ISR_CHANGES,
    TOPICS,
    ZnodeFormatError,
    acl_id,
    acl_path,
    broker_entity,
    broker_path,
    config_path,
    decode_acls,
    decode_broker,
    decode_config,
    decode_controller,
    decode_election,
    decode_partition_state,
    decode_topic,
    desanitize,
    partition_state_path,
    scram_credentials,
    topic_path,
)

# How long a change waits for the controller and the watches before the request is
# answered REQUEST_TIMED_OUT (the change itself still goes on, as in Kafka).
CHANGE_TIMEOUT_S = 30.0


def retrieve_result(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


class ZkWatcher:
    """The only writer of the cache and the image. ``controller`` is told of every
    /controller change and of every image published."""

    def __init__(self, zk: ZkClient, cache: ZnodeCache, controller: ZkController,
                 logger: Any) -> None:
        self._zk = zk
        self._cache = cache
        self._controller = controller
        self._log = logger
        self._cluster_id = ""
        self._image = _empty_image("", -1)
        self._topic_images: dict[str, TopicImage] = {}
        self._dirty: set[str] = set()
        self._flush_scheduled = False
        self._listeners: list[ImageListener] = []
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._watches: dict[str, WatchHandle] = {}
        self._pending_watches = 0
        self._scram: dict[tuple[str, int], ScramCredential] = {}
        # (resource type, name, pattern type) -> its ACLs, as /kafka-acl* last showed them
        self._acl_znodes: dict[tuple[int, str, int], list[AclBinding]] = {}
        self._acls: Mapping[uuid.UUID, AclBinding] = MappingProxyType({})
        # Quota entity -> its values, as the /config znodes last showed them; published
        # as a new mapping on each change (readers tell a change by identity).
        self._quota_znodes: dict[QuotaEntity, dict[str, float]] = {}
        self._quotas: Mapping[QuotaEntity, QuotaValues] = MappingProxyType({})
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False
        self._stopping = False

    # -- what the backend reads -----------------------------------------------------

    @property
    def image(self) -> ClusterImage:
        return self._image

    @property
    def pending_watches(self) -> int:
        """Watches set up but not yet delivered once."""
        return self._pending_watches

    def add_listener(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    def scram_credentials(self) -> Mapping[tuple[str, int], ScramCredential]:
        return MappingProxyType(self._scram)

    def acls(self) -> Mapping[uuid.UUID, AclBinding]:
        return self._acls

    def client_quotas(self) -> Mapping[QuotaEntity, QuotaValues]:
        return self._quotas

    def quota_znode(self, entity: QuotaEntity) -> Mapping[str, float]:
        """The values the entity's /config znode last showed."""
        return self._quota_znodes.get(entity, {})

    # -- lifecycle ------------------------------------------------------------------

    async def start(self, cluster_id: str) -> None:
        """Watch everything but /controller (``watch_controller``, once this broker
        is registered)."""
        self._cluster_id = cluster_id
        self._image = _empty_image(cluster_id, -1)
        self._started = True
        await self._watch_children(BROKER_IDS, self._on_broker_ids)
        await self._watch_children(TOPICS, self._on_topics)
        await self._watch_children("/config/brokers", self._on_broker_config_entities)
        await self._watch_children("/config/users", self._on_users)
        for kind in ("clients", "ips"):
            await self._watch_children(
                f"/config/{kind}", lambda children, k=kind: self._on_quota_entities(k, children))
        await self._watch_children(DELETE_TOPICS, self._on_deletions)
        await self._watch_children(ISR_CHANGES, self._on_isr_changes)
        for election_type, path in ELECTION_PATHS.items():
            await self._watch_data(path, lambda data, stat, e=election_type:
                                   self._on_election(e, data, stat))
        for pattern_type, store in ACL_STORES.items():
            for resource_type, type_name in ACL_RESOURCE_TYPES.items():
                await self._watch_children(
                    f"{store}/{type_name}",
                    lambda names, r=resource_type, p=pattern_type: self._on_acl_names(
                        r, p, names))

    async def watch_controller(self) -> None:
        await self._watch_data(CONTROLLER, self._on_controller)

    def stop(self) -> None:
        self._stopping = True
        for handle in self._watches.values():
            handle.stop()
        for task in list(self._tasks):
            task.cancel()
        for _, future in self._waiters:
            if not future.done():
                future.cancel()
        self._started = False

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(retrieve_result)

    # -- watches --------------------------------------------------------------------

    def _watch_children(self, path: str, callback: Callable[[list[str]], None],
                        handle: WatchHandle | None = None) -> Coroutine[Any, Any, None]:
        self._pending_watches += 1  # counted now: start() waits for the first delivery
        return self._watch(path, self._zk.watch_children(path, callback, handle))

    def _watch_data(self, path: str,
                    callback: Callable[[bytes | None, ZnodeStat | None], None],
                    handle: WatchHandle | None = None) -> Coroutine[Any, Any, None]:
        self._pending_watches += 1
        return self._watch(path, self._zk.watch_data(path, callback, handle))

    async def _watch(self, path: str, setting_up: Awaitable[WatchHandle]) -> None:
        try:
            handle = await setting_up
            if not handle.stopped:
                self._watches.setdefault(path, handle)
        finally:
            self._pending_watches -= 1
            self._changed()

    def _watch_later(self, path: str, kind: str, callback: Callable[..., None]) -> None:
        """Start watching ``path`` unless it is watched already (from a callback)."""
        if path in self._watches or self._stopping:
            return
        handle = self._watches[path] = WatchHandle()
        setup = self._watch_children if kind == "children" else self._watch_data
        self._spawn(setup(path, callback, handle))

    def _unwatch(self, path: str) -> None:
        handle = self._watches.pop(path, None)
        if handle is not None:
            handle.stop()

    def _decoded(self, path: str, decode: Callable[[], Any]) -> Any:
        try:
            return decode()
        except ZnodeFormatError as e:
            self._log.warning("ignoring a znode not in Kafka's format", path=path, error=str(e))
            return None

    def _on_broker_ids(self, children: list[str]) -> None:
        ids = {int(c) for c in children if c.lstrip("-").isdigit()}
        for gone in set(self._cache.brokers) - ids:
            del self._cache.brokers[gone]
            self._unwatch(broker_path(gone))
        for broker_id in ids:
            self._watch_later(broker_path(broker_id), "data",
                              lambda data, stat, b=broker_id: self._on_broker(b, data))
        self._changed(all_topics=True)

    def _on_broker(self, broker_id: int, data: bytes | None) -> None:
        registration = None if data is None else self._decoded(
            broker_path(broker_id), lambda: decode_broker(broker_id, data))
        if registration is None:
            self._cache.brokers.pop(broker_id, None)
        else:
            self._cache.brokers[broker_id] = registration
        self._changed(all_topics=True)

    def _on_controller(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        controller = None if data is None else self._decoded(
            CONTROLLER, lambda: decode_controller(data))
        self._cache.controller_id = -1 if controller is None else controller
        self._controller.controller_changed(controller)
        self._changed()

    def _on_topics(self, children: list[str]) -> None:
        names = set(children)
        for gone in set(self._cache.topics) - names:
            self._forget_topic(gone)
        for name in names - set(self._cache.topics):
            self._cache.topics[name] = TopicZnodes()
            self._watch_later(topic_path(name), "data",
                              lambda data, stat, t=name: self._on_topic(t, data, stat))
            self._watch_later(config_path("topics", name), "data",
                              lambda data, stat, t=name: self._on_topic_config(t, data))

    def _forget_topic(self, name: str) -> None:
        topic = self._cache.topics.pop(name, None)
        for path in [p for p in self._watches
                     if p == config_path("topics", name) or p == topic_path(name)
                     or p.startswith(topic_path(name) + "/")]:
            self._unwatch(path)
        if topic is not None:
            self._changed(topic=name)

    def _on_topic(self, name: str, data: bytes | None, stat: ZnodeStat | None) -> None:
        topic = self._cache.topics.get(name)
        if topic is None:
            return
        assignment = None if data is None else self._decoded(
            topic_path(name), lambda: decode_topic(data))
        if assignment is not None and topic.assignment is not None \
                and assignment.topic_id != topic.assignment.topic_id:
            topic.states.clear()  # deleted and created again: a new topic
        topic.assignment = assignment
        topic.version = stat.version if stat is not None else -1
        for partition in (assignment.partitions if assignment else ()):
            path = partition_state_path(name, partition)
            self._watch_later(path, "data", lambda d, s, t=name, p=partition:
                              self._on_partition_state(t, p, d, s))
        self._changed(topic=name)

    def _on_partition_state(self, name: str, partition: int, data: bytes | None,
                            stat: ZnodeStat | None) -> None:
        topic = self._cache.topics.get(name)
        if topic is None:
            return
        path = partition_state_path(name, partition)
        state = None if data is None or stat is None else self._decoded(
            path, lambda: decode_partition_state(data, stat.version))
        if state is None:
            topic.states.pop(partition, None)
        else:
            topic.states[partition] = state
        self._changed(topic=name)

    def _on_topic_config(self, name: str, data: bytes | None) -> None:
        topic = self._cache.topics.get(name)
        if topic is None:
            return
        topic.configs = self._decoded(config_path("topics", name),
                                      lambda: decode_config(data)) or {}
        self._changed(topic=name)

    def _on_broker_config_entities(self, children: list[str]) -> None:
        for entity in children:
            broker_id = -1 if entity == broker_entity(-1) else (
                int(entity) if entity.lstrip("-").isdigit() else None)
            if broker_id is None:
                continue
            self._watch_later(config_path("brokers", entity), "data",
                              lambda data, stat, b=broker_id: self._on_broker_config(b, data))

    def _on_broker_config(self, broker_id: int, data: bytes | None) -> None:
        configs = self._decoded(config_path("brokers", broker_entity(broker_id)),
                                lambda: decode_config(data)) or {}
        if configs:
            self._cache.broker_configs[broker_id] = configs
        else:
            self._cache.broker_configs.pop(broker_id, None)
        self._changed()

    def _on_users(self, children: list[str]) -> None:
        for entity in children:
            self._watch_later(config_path("users", entity), "data",
                              lambda data, stat, e=entity: self._on_user(e, data))

    def _on_user(self, entity: str, data: bytes | None) -> None:
        user = desanitize(entity)
        configs = self._decoded(config_path("users", entity),
                                lambda: decode_config(data)) or {}
        self._cache.user_configs[user] = configs
        scram = {key: c for key, c in self._scram.items() if key[0] != user}
        credentials = self._decoded(config_path("users", entity),
                                    lambda: scram_credentials(user, configs)) or []
        scram.update({(c.name, c.mechanism): c for c in credentials})
        self._scram = scram
        self._on_quota_znode(f"users/{entity}", configs)
        self._spawn(self._watch_user_clients(entity))
        self._changed()

    async def _watch_user_clients(self, user: str) -> None:
        """/config/users/<user>/clients made if absent (a children watch needs it)."""
        path = f"/config/users/{user}/clients"
        await self._zk.call(self._zk.kazoo.ensure_path, path)
        self._watch_later(path, "children",
                          lambda children: self._on_quota_entities(f"users/{user}/clients",
                                                                    children))

    def _on_quota_entities(self, parent: str, children: list[str]) -> None:
        for child in children:
            path = f"{parent}/{child}"
            self._watch_later(f"/config/{path}", "data", lambda data, stat, p=path:
                              self._on_quota_znode(p, self._decoded(
                                  f"/config/{p}", lambda: decode_config(data)) or {}))

    def _on_quota_znode(self, path: str, configs: Mapping[str, str]) -> None:
        entity = entity_at(path)
        values = quota_values(configs)
        if values == self._quota_znodes.get(entity, {}):
            return
        if values:
            self._quota_znodes[entity] = values
        else:
            self._quota_znodes.pop(entity, None)
        self._quotas = MappingProxyType({
            e: MappingProxyType(dict(v)) for e, v in self._quota_znodes.items()})
        self._changed()

    def _on_acl_names(self, resource_type: int, pattern_type: int, names: list[str]) -> None:
        for key in [k for k in self._acl_znodes
                    if k[0] == resource_type and k[2] == pattern_type and k[1] not in names]:
            self._unwatch(acl_path(*key))
            self._on_acl(key, None)
        for name in names:
            key = (resource_type, name, pattern_type)
            self._watch_later(acl_path(*key), "data",
                              lambda data, stat, k=key: self._on_acl(k, data))

    def _on_acl(self, key: tuple[int, str, int], data: bytes | None) -> None:
        bindings = None if data is None else self._decoded(
            acl_path(*key), lambda: decode_acls(*key, data))
        if bindings:
            self._acl_znodes[key] = bindings
        else:
            self._acl_znodes.pop(key, None)
        self._acls = MappingProxyType({acl_id(b): b for bs in self._acl_znodes.values()
                                       for b in bs})
        self._changed()

    def _on_deletions(self, children: list[str]) -> None:
        self._cache.deletions = set(children)
        self._changed()

    def _on_election(self, election_type: ElectionType, data: bytes | None,
                     stat: ZnodeStat | None) -> None:
        if data is None or stat is None:
            self._cache.elections.pop(election_type, None)
        else:
            partitions = self._decoded(ELECTION_PATHS[election_type],
                                       lambda: decode_election(data))
            # Malformed: kept empty, so the controller deletes it.
            self._cache.elections[election_type] = (partitions or frozenset(), stat.version)
        self._changed()

    def _on_isr_changes(self, children: list[str]) -> None:
        self._cache.isr_changes = set(children)
        if children:
            self._changed()

    def _changed(self, *, topic: str | None = None, all_topics: bool = False) -> None:
        if all_topics:
            self._dirty.update(self._cache.topics)
            self._dirty.update(self._topic_images)
        elif topic is not None:
            self._dirty.add(topic)
        if not self._flush_scheduled and self._started:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Publish one image for every change delivered since the last one."""
        self._flush_scheduled = False
        if self._stopping:
            return
        cache = self._cache
        live = set(cache.brokers)
        for name in self._dirty:
            topic = cache.topics.get(name)
            built = None if topic is None else topic_image(
                name, topic, live, self._topic_images.get(name))
            if built is None:
                self._topic_images.pop(name, None)
            else:
                self._topic_images[name] = built
        self._dirty.clear()
        topics = dict(sorted(self._topic_images.items()))
        image = ClusterImage(
            cluster_id=self._cluster_id,
            controller_id=cache.controller_id,
            brokers=MappingProxyType(dict(sorted(cache.brokers.items()))),
            topics=MappingProxyType(topics),
            topics_by_id=MappingProxyType({t.topic_id: t for t in topics.values()}),
            broker_configs=MappingProxyType({
                b: MappingProxyType(dict(c)) for b, c in sorted(cache.broker_configs.items())}),
        )
        previous, self._image = self._image, image
        if previous != image:
            for listener in tuple(self._listeners):
                try:
                    listener(previous, image)
                except Exception:
                    self._log.exception("metadata listener failed", listener=repr(listener))
        for predicate, future in list(self._waiters):
            if not future.done() and predicate():
                future.set_result(None)
        self._controller.changed()

    async def until(self, predicate: Callable[[], bool], what: str,
                     timeout: float = CHANGE_TIMEOUT_S) -> None:
        """Wait until the cache shows what a change wrote (REQUEST_TIMED_OUT after
        ``timeout`` seconds)."""
        if predicate():
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (predicate, future)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise KafkaError(ErrorCode.request_timed_out,
                             f"Timed out waiting for {what}.") from None
        finally:
            self._waiters.remove(entry)


def topic_image(name: str, topic: TopicZnodes, live: set[int],
                 previous: TopicImage | None) -> TopicImage | None:
    """The topic as clients may see it: once it has an id and every partition of its
    assignment has a state. Partitions being added appear together, once all have one:
    a client must never see a partition count in between (coordinators hash their keys
    over it)."""
    assignment = topic.assignment
    if assignment is None or assignment.topic_id is None:
        return None
    count = len(assignment.partitions)
    if any(topic.states.get(p) is None or p not in assignment.partitions
           for p in range(count)):
        count = 0 if previous is None or previous.topic_id != assignment.topic_id \
            else len(previous.partitions)
    partitions: dict[int, PartitionState] = {}
    for partition in range(count):
        replicas = assignment.partitions.get(partition)
        state = topic.states.get(partition)
        if replicas is None or state is None:
            return previous
        partitions[partition] = PartitionState(
            partition=partition, replicas=replicas, isr=state.isr, leader=state.leader,
            leader_epoch=state.leader_epoch, partition_epoch=state.zk_version,
            offline_replicas=tuple(r for r in replicas if r not in live),
            adding_replicas=assignment.adding.get(partition, ()),
            removing_replicas=assignment.removing.get(partition, ()))
    if not partitions:
        return None
    return TopicImage(name=name, topic_id=assignment.topic_id,
                      partitions=MappingProxyType(partitions),
                      configs=MappingProxyType(dict(topic.configs)),
                      internal=is_internal_topic(name))


def _empty_image(cluster_id: str, controller_id: int) -> ClusterImage:
    empty: Mapping[Any, Any] = MappingProxyType({})
    return ClusterImage(cluster_id=cluster_id, controller_id=controller_id, brokers=empty,
                        topics=empty, topics_by_id=empty, broker_configs=empty)
