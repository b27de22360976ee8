"""The controller on ZooKeeper: elected through the ephemeral /controller, fenced by
/controller_epoch, as Kafka's KafkaController.

One broker at a time wins the election (a multi-op that creates /controller and bumps
/controller_epoch from the version it read); every write it makes afterwards is a
multi-op that first checks /controller_epoch still has that version, so a controller
that lost its session (and its election) can no longer change anything. Its duties are
level-triggered: after every change the watches deliver, it compares the cache with
what should be and writes the difference. What should be is decided by the controller's
rules (kernel/replication_control.py, shared with metadata_kraft); this module only
reads the cache and writes znodes:

- a partition of an assigned topic without a state gets one (leader: the first live
  replica, ISR: the live replicas, leader epoch 0);
- a topic without a topic id (written by an old Kafka) gets one;
- a topic named under /admin/delete_topics loses its znodes, then that request;
- a partition whose leader is not a live broker gets the first live replica of its
  ISR as leader; none, and the topic's unclean.leader.election.enable (else the
  broker's) is true: the first live replica, with an ISR of itself alone; else
  NO_LEADER, the ISR kept so its last member can come back. Brokers that are gone leave
  the ISR of the others, and so do brokers that are no replica any more (a cancelled
  reassignment); the leader epoch is bumped;
- elections asked for under /admin/preferred_replica_election (and Kafkernel's
  /admin/unclean_leader_election) are run, then the request is deleted at the version
  read;
- a partition being reassigned (adding_replicas/removing_replicas in its topic's
  znode, KIP-455) whose target replicas are all in its ISR completes in one multi-op:
  its state loses the removed replicas from the ISR, gets a leader among the targets
  (the current one when it is a live target) and a bumped leader epoch, and the topic
  znode gets the targets as the partition's replicas, its adding/removing cleared.
  (Kafka's phase A epoch bump is not needed: brokers follow the image, which names
  the new replicas as soon as the reassignment is written.)
- with auto.leader.rebalance.enable, every leader.imbalance.check.interval.seconds
  (the first check 5 s after the election, as Kafka's onControllerFailover schedules
  it), partitions led away from their preferred replica get it back where
  kernel/replication_control.py's rule (Kafka's checkAndTriggerAutoLeaderRebalance,
  leader.imbalance.per.broker.percentage) says so.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from kernel.api.cluster import NO_LEADER, ElectionType, PartitionState
from kernel.api.controller import (
    after_broker_change,
    auto_rebalance_elections,
    completed_reassignment,
    initial_state,
    requested_election,
)
from kernel.api.errors import KafkaError

from .cache import TopicZnodes, ZnodeCache
from .zkclient import ZkClient
from .znodes import (
    CONTROLLER,
    CONTROLLER_EPOCH,
    DELETE_TOPICS,
    ISR_CHANGES,
    PREFERRED_REPLICA_ELECTION,
    UNCLEAN_LEADER_ELECTION,
    LeaderAndIsr,
    config_path,
    decode_controller_epoch,
    delete_topic_path,
    encode_controller,
    encode_controller_epoch,
    encode_partition_state,
    encode_topic,
    partition_path,
    partition_state_path,
    partitions_path,
    topic_path,
)

# Kafka's KafkaController.InitialControllerEpoch and its zkVersion.
INITIAL_CONTROLLER_EPOCH = 0
ELECTION_PATHS = {ElectionType.PREFERRED: PREFERRED_REPLICA_ELECTION,
                  ElectionType.UNCLEAN: UNCLEAN_LEADER_ELECTION}
UNCLEAN_CONFIG = "unclean.leader.election.enable"
# Kafka's KafkaController schedules the first rebalance check this long after it is
# elected, then every leader.imbalance.check.interval.seconds.
FIRST_REBALANCE_CHECK_S = 5.0

# ("create_state", topic, partition, state) | ("set", path, data, version)
# | ("delete", path) | ("delete", path, version)
Op = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Rebalance:
    """auto.leader.rebalance.enable and Kafka's leader.imbalance.* settings."""

    enable: bool = True
    check_interval_s: float = 300.0
    per_broker_percentage: int = 10


class ZkController:
    """This broker's candidacy and, while it is elected, the controller's duties."""

    def __init__(self, zk: ZkClient, cache: ZnodeCache, broker_id: int, *,
                 is_registered: Callable[[], bool], logger: Any,
                 unclean_default: Callable[[], bool] = lambda: False,
                 rebalance: Rebalance | None = None) -> None:
        self._zk = zk
        self._rebalance = rebalance or Rebalance()
        self._rebalance_timer: asyncio.Task[None] | None = None
        self._rebalance_due = False
        self._unclean_default = unclean_default
        self._cache = cache
        self._broker_id = broker_id
        self._is_registered = is_registered
        self._log = logger
        self.epoch = -1
        self._epoch_version = -1
        self.active = False
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._stopped = False

    # -- election -------------------------------------------------------------------

    def controller_changed(self, controller_id: int | None) -> None:
        """The /controller watch: resign when it names another broker (or none); stand
        for election when there is none."""
        if controller_id != self._broker_id and self.active:
            self._log.info("resigned as controller", epoch=self.epoch, now=controller_id)
            self.active = False
        if controller_id is None or (controller_id == self._broker_id and self.active):
            self._schedule()

    def session_lost(self) -> None:
        if self.active:
            self._log.info("resigned as controller: ZooKeeper session lost", epoch=self.epoch)
        self.active = False

    def changed(self) -> None:
        """The cache changed: the controller (if it is this broker) catches up."""
        if self.active:
            self._schedule()

    def stand(self) -> None:
        """Registered (again): contend if nobody is controller."""
        self._schedule()

    def _schedule(self) -> None:
        if self._stopped:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            self._again = False
            try:
                if not self.active:
                    await self._elect()
                if self.active:
                    self._start_rebalance_timer()
                    await self._reconcile()
                if self.active and self._rebalance_due:
                    self._rebalance_due = False
                    await self._rebalance_leaders()
            except Exception as e:
                if self._stopped:
                    return
                # ZooKeeper unreachable or a race with another writer: the next change
                # the watches deliver (a reconnection included) triggers another round.
                self._log.warning("controller round failed", error=f"{type(e).__name__}: {e}")
            if not self._again or self._stopped:
                return

    async def _elect(self) -> None:
        if self._cache.controller_id not in (-1, self._broker_id) or not self._is_registered():
            return
        won = await self._zk.call(self._try_elect)
        if won is not None:
            self.epoch, self._epoch_version = won
            self.active = True
            self._log.info("elected controller", broker_id=self._broker_id, epoch=self.epoch)

    def _try_elect(self) -> tuple[int, int] | None:
        """Kafka's registerControllerAndIncrementControllerEpoch (blocking)."""
        k = self._zk.kazoo
        try:
            data, stat = k.get(CONTROLLER_EPOCH)
            epoch, version = decode_controller_epoch(data), stat.version
        except NoNodeError:
            try:
                k.create(CONTROLLER_EPOCH, encode_controller_epoch(INITIAL_CONTROLLER_EPOCH))
            except NodeExistsError:
                return None
            epoch, version = INITIAL_CONTROLLER_EPOCH, 0
        t = k.transaction()
        t.create(CONTROLLER, encode_controller(self._broker_id), ephemeral=True)
        t.set_data(CONTROLLER_EPOCH, encode_controller_epoch(epoch + 1), version=version)
        results = t.commit()
        if any(isinstance(r, Exception) for r in results):
            return None
        return epoch + 1, results[1].version

    async def stop(self) -> None:
        self._stopped = True
        self.active = False
        for task in (self._task, self._rebalance_timer):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    # -- preferred-leader rebalance ---------------------------------------------------

    def _start_rebalance_timer(self) -> None:
        if not self._rebalance.enable or (
                self._rebalance_timer is not None and not self._rebalance_timer.done()):
            return
        self._rebalance_timer = asyncio.ensure_future(self._rebalance_checks())

    async def _rebalance_checks(self) -> None:
        """Ask for a check now and then while this broker stays controller; a later
        election starts a new timer."""
        delay = min(FIRST_REBALANCE_CHECK_S, self._rebalance.check_interval_s)
        while True:
            await asyncio.sleep(delay)
            if not self.active or self._stopped:
                return
            self._rebalance_due = True
            self._schedule()
            delay = self._rebalance.check_interval_s

    async def _rebalance_leaders(self) -> None:
        cache = self._cache
        partitions: dict[tuple[str, int], PartitionState] = {}
        versions: dict[tuple[str, int], LeaderAndIsr] = {}
        for name, topic in cache.topics.items():
            if name in cache.deletions or topic.assignment is None:
                continue
            for partition, state in topic.states.items():
                replicas = topic.assignment.partitions.get(partition)
                if replicas:
                    partitions[(name, partition)] = PartitionState(
                        partition, replicas, state.isr, state.leader)
                    versions[(name, partition)] = state
        live = set(cache.brokers)
        if self._is_registered():
            live.add(self._broker_id)
        elect = auto_rebalance_elections(
            partitions, live, imbalance_percentage=self._rebalance.per_broker_percentage)
        if not elect:
            return
        self._log.info("auto leader rebalance: electing preferred leaders",
                       partitions=len(elect),
                       brokers=sorted({partitions[tp].replicas[0] for tp in elect}))
        ops: list[Op] = []
        for tp in elect:
            state, preferred = versions[tp], partitions[tp].replicas[0]
            ops.append(("set", partition_state_path(*tp), encode_partition_state(
                LeaderAndIsr(preferred, state.leader_epoch + 1, state.isr, self.epoch)),
                state.zk_version))
        await self._commit_fenced(lambda: ops)

    # -- duties ---------------------------------------------------------------------

    async def _reconcile(self) -> None:
        cache = self._cache
        live = set(cache.brokers)
        if self._is_registered():
            live.add(self._broker_id)  # registered this session, maybe not yet delivered
        for name in sorted(cache.deletions):
            if not await self._commit_fenced(self._delete_topic_ops, name):
                return
        if cache.isr_changes:
            # Leaders announce ISR changes here; brokers read the states through their
            # watches already, so the controller only consumes the notifications.
            ops = [("delete", f"{ISR_CHANGES}/{c}") for c in sorted(cache.isr_changes)]
            if not await self._commit_fenced(lambda: ops):
                return
        for election_type, (partitions, version) in sorted(cache.elections.items()):
            ops = self._election_ops(election_type, partitions, version, live)
            if not await self._commit_fenced(lambda ops=ops: ops):
                return
        for name, topic in sorted(cache.topics.items()):
            if name in cache.deletions or topic.assignment is None:
                continue
            ops = self._topic_ops(name, topic, live)
            if ops and not await self._commit_fenced(lambda ops=ops: ops):
                return

    def _unclean(self, topic: TopicZnodes) -> bool:
        value = topic.configs.get(UNCLEAN_CONFIG)
        return self._unclean_default() if value is None else value.lower() == "true"

    def _election_ops(self, election_type: ElectionType,
                      partitions: frozenset[tuple[str, int]], version: int,
                      live: set[int]) -> list[Op]:
        """Kafka's onReplicaElection for the partitions a broker asked for; the ones
        that need none or cannot have one are dropped with the request, as Kafka's
        controller drops them (the asking broker answered them already)."""
        ops: list[Op] = []
        for name, partition in sorted(partitions):
            topic = self._cache.topics.get(name)
            if topic is None or topic.assignment is None or name in self._cache.deletions:
                continue
            state = topic.states.get(partition)
            replicas = topic.assignment.partitions.get(partition)
            if state is None or not replicas:
                continue
            try:
                leader, isr = requested_election(
                    PartitionState(partition, replicas, state.isr, state.leader),
                    election_type, live)
            except KafkaError:
                continue
            self._log.info("electing leader", election=election_type.name.lower(),
                           topic=name, partition=partition, leader=leader)
            ops.append(("set", partition_state_path(name, partition), encode_partition_state(
                LeaderAndIsr(leader, state.leader_epoch + 1, isr, self.epoch)),
                state.zk_version))
        ops.append(("delete", ELECTION_PATHS[election_type], version))
        return ops

    def _topic_ops(self, name: str, topic: TopicZnodes, live: set[int]) -> list[Op]:
        assignment = topic.assignment
        assert assignment is not None
        if assignment.topic_id is None:
            return [("set", topic_path(name), encode_topic(
                uuid.uuid4(), assignment.partitions, assignment.adding, assignment.removing),
                topic.version)]
        ops: list[Op] = []
        unclean = self._unclean(topic)
        partitions = dict(assignment.partitions)
        adding, removing = dict(assignment.adding), dict(assignment.removing)
        for partition, replicas in sorted(assignment.partitions.items()):
            state = topic.states.get(partition)
            if state is None:
                initial = initial_state(replicas, live)
                if initial is not None:
                    ops.append(("create_state", name, partition, LeaderAndIsr(
                        initial[0], 0, initial[1], self.epoch)))
                continue
            if partition in adding or partition in removing:
                target = tuple(r for r in replicas if r not in removing.get(partition, ()))
                done = _next(state, completed_reassignment(
                    state.leader, state.isr, target, live), self.epoch)
                if done is not None:
                    self._log.info("partition reassignment completed", topic=name,
                                   partition=partition, replicas=list(target))
                    ops.append(("set", partition_state_path(name, partition),
                                encode_partition_state(done), state.zk_version))
                    partitions[partition] = target
                    adding.pop(partition, None)
                    removing.pop(partition, None)
                    continue
            new = _next(state, after_broker_change(
                state.leader, state.isr, replicas, live, unclean=unclean), self.epoch)
            if new is not None:
                if new.leader != NO_LEADER and new.leader not in state.isr:
                    self._log.warning("unclean leader election", topic=name,
                                      partition=partition, leader=new.leader,
                                      isr=list(state.isr))
                ops.append(("set", partition_state_path(name, partition),
                            encode_partition_state(new), state.zk_version))
        # A move that only adds replicas keeps the replica list: clearing adding and
        # removing is what completes it.
        if (partitions, adding, removing) != (dict(assignment.partitions),
                                              dict(assignment.adding),
                                              dict(assignment.removing)):
            ops.append(("set", topic_path(name), encode_topic(
                assignment.topic_id, partitions, adding, removing), topic.version))
        return ops

    def _delete_topic_ops(self, name: str) -> list[Op]:
        """The topic's znodes bottom-up, then its deletion request (blocking: it lists
        the partitions ZooKeeper holds, not only those the cache knows)."""
        k = self._zk.kazoo
        ops: list[Op] = []
        if k.exists(topic_path(name)):
            try:
                partitions = k.get_children(partitions_path(name))
            except NoNodeError:
                partitions = None
            for p in partitions or ():
                for child in k.get_children(partition_path(name, int(p))):
                    ops.append(("delete", f"{partition_path(name, int(p))}/{child}"))
                ops.append(("delete", partition_path(name, int(p))))
            if partitions is not None:
                ops.append(("delete", partitions_path(name)))
            ops.append(("delete", topic_path(name)))
        if k.exists(config_path("topics", name)):
            ops.append(("delete", config_path("topics", name)))
        ops.append(("delete", delete_topic_path(name)))
        self._log.info("deleting topic", topic=name)
        return ops

    async def _commit_fenced(self, build: Callable[..., list[Op]], *args: Any) -> bool:
        """Build and commit ops behind the /controller_epoch check; False when this
        broker turned out not to be the controller any more."""
        fenced = await self._zk.call(self._commit_blocking, build, *args)
        if fenced:
            self._log.info("resigned as controller: /controller_epoch moved on",
                           epoch=self.epoch)
            self.active = False
        return not fenced

    def _commit_blocking(self, build: Callable[..., list[Op]], *args: Any) -> bool:
        k = self._zk.kazoo
        ops = build(*args)
        if not ops:
            return False
        for op in ops:  # the parents of new states, outside the transaction
            if op[0] == "create_state":
                for path in (partitions_path(op[1]), partition_path(op[1], op[2])):
                    self._zk.create_if_absent(path)
        t = k.transaction()
        t.check(CONTROLLER_EPOCH, self._epoch_version)
        for op in ops:
            if op[0] == "create_state":
                t.create(partition_state_path(op[1], op[2]), encode_partition_state(op[3]))
            elif op[0] == "set":
                t.set_data(op[1], op[2], version=op[3])
            elif op[0] == "delete":
                t.delete(op[1], version=op[2] if len(op) > 2 else -1)
        results = t.commit()
        if isinstance(results[0], BadVersionError | NoNodeError):
            return True
        failed = [r for r in results[1:] if isinstance(r, Exception)
                  and not isinstance(r, RolledBackError)]
        if failed:
            # The cache was behind ZooKeeper: the watches bring the news and another
            # round.
            self._log.debug("controller write raced", error=repr(failed[0]))
        return False


def _next(state: LeaderAndIsr, change: tuple[int, tuple[int, ...]] | None,
          controller_epoch: int) -> LeaderAndIsr | None:
    """The state znode after a change the controller's rules decided: a new leader
    epoch, written under this controller's epoch."""
    if change is None:
        return None
    return LeaderAndIsr(change[0], state.leader_epoch + 1, change[1], controller_epoch)


__all__ = ["DELETE_TOPICS", "ZkController"]
