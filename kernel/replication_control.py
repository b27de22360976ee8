"""The controller's rules, written once for every metadata backend (Kafka's
ReplicationControlManager and PartitionLeaderElectionAlgorithms): where new replicas
go, what a CreateTopics or CreatePartitions assignment must satisfy, which ISR an
AlterPartition may set, whom an election makes leader (asked for, or after brokers
change), what a reassignment adds and removes and when it is complete, and which topics a
deletion removes. Pure functions over the cluster image: a backend checks a change with them,
then persists it (a metadata log record, a znode write) and watches it come back.
Errors are Kafka's, in the words of its KRaft controller.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence

from kernel.cluster import (
    NO_LEADER,
    ClusterImage,
    ElectionType,
    NewTopic,
    PartitionState,
)
from kernel.protocol.errors import ErrorCode, KafkaError

# Replica placement, which every metadata backend's controller uses: Kafka's assignment
# (AdminUtils, as its ZooKeeper-mode brokers ran it). The first replica of partition p
# goes to broker (p + start_index) mod n, so leaders spread round-robin; followers follow
# at a shift that grows every n partitions, so the replicas of one broker's partitions do
# not all land on the same other broker. A random start index and shift keep broker 0
# from leading partition 0 of every topic. When brokers have racks (broker.rack), the
# brokers are first ordered alternating racks, and a follower is skipped while a rack
# (or broker) without a replica of the partition remains.

RACKS_INCOMPLETE = "Not all brokers have rack information for replica rack aware assignment."


def assign_replicas(
    broker_ids: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int,
    replica_shift: int,
    first_partition: int = 0,
    racks: Mapping[int, str | None] | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists of partitions ``first_partition ..``; ``broker_ids`` sorted, at
    least ``replication_factor`` of them. ``racks`` (broker id -> rack): rack-aware when
    any broker has one; some without one is Kafka's AdminOperationException, which its
    brokers answered UNKNOWN_SERVER_ERROR."""
    n = len(broker_ids)
    if not 0 < replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} with {n} brokers")
    known = {b: r for b in broker_ids if (r := (racks or {}).get(b)) is not None}
    if known:
        if len(known) < n:
            raise KafkaError(ErrorCode.unknown_server_error, RACKS_INCOMPLETE)
        return _assign_rack_aware(known, partitions, replication_factor, start_index,
                                  replica_shift, first_partition)
    assignment: list[tuple[int, ...]] = []
    for first, shift in _first_and_shift(partitions, first_partition, n, start_index,
                                         replica_shift):
        followers = (
            broker_ids[(first + 1 + (shift + j) % (n - 1)) % n]
            for j in range(replication_factor - 1)
        )
        assignment.append((broker_ids[first], *followers))
    return assignment


def _first_and_shift(partitions: int, first_partition: int, n: int, start_index: int,
                     replica_shift: int) -> Iterator[tuple[int, int]]:
    """Per partition from ``first_partition``: the index of its first replica among the
    ``n`` brokers, and the followers' shift, which grows every ``n`` partitions."""
    shift = replica_shift
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        yield (partition + start_index) % n, shift


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Kafka's getRackAlternatedBrokerList: one broker of each rack in turn (racks by
    name, brokers of a rack by id) until every broker is listed."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    queues = [iter(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    while len(out) < len(racks):
        for queue in queues:
            broker = next(queue, None)
            if broker is not None:
                out.append(broker)
    return out


def _assign_rack_aware(racks: Mapping[int, str], partitions: int, replication_factor: int,
                       start_index: int, replica_shift: int, first_partition: int,
                       ) -> list[tuple[int, ...]]:
    arranged = rack_alternated(racks)
    n, rack_count = len(arranged), len(set(racks.values()))
    assignment: list[tuple[int, ...]] = []
    for first, shift in _first_and_shift(partitions, first_partition, n, start_index,
                                         replica_shift):
        leader = arranged[first]
        replicas, used_racks, used = [leader], {racks[leader]}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[(first + 1 + (shift * rack_count + k) % (n - 1)) % n]
                k += 1
                # A rack (or broker) already holding a replica is passed over while one
                # without remains.
                if (racks[broker] not in used_racks or len(used_racks) == rack_count) \
                        and (broker not in used or len(used) == n):
                    replicas.append(broker)
                    used_racks.add(racks[broker])
                    used.add(broker)
                    break
        assignment.append(tuple(replicas))
    return assignment


def broker_racks(image: ClusterImage, among: Collection[int] | None = None
                 ) -> dict[int, str | None]:
    return {b.node_id: b.rack for b in image.brokers.values()
            if among is None or b.node_id in among}


# Leader elections, as Kafka's controller runs them (PartitionLeaderElectionAlgorithms),
# shared by the metadata backends.

def offline_election(replicas: Sequence[int], isr: Sequence[int], live: Collection[int], *,
                     unclean: bool) -> tuple[int, tuple[int, ...]] | None:
    """Kafka's offlinePartitionLeaderElection: the first live replica in the ISR, the ISR
    its live members; else, when unclean election is allowed, the first live replica
    with an ISR of itself alone; else None."""
    live_isr = tuple(r for r in isr if r in live)
    leader = next((r for r in replicas if r in live_isr), None)
    if leader is not None:
        return leader, live_isr
    if unclean:
        leader = next((r for r in replicas if r in live), None)
        if leader is not None:
            return leader, (leader,)
    return None


def initial_state(replicas: Sequence[int], live: Collection[int]
                  ) -> tuple[int, tuple[int, ...]] | None:
    """A new partition's (leader, ISR): its live replicas in assignment order, the first
    leading; None while no replica is live (Kafka leaves it a NewPartition until one
    is)."""
    isr = tuple(r for r in replicas if r in live)
    return (isr[0], isr) if isr else None


def after_broker_change(leader: int, isr: Sequence[int], replicas: Sequence[int],
                        live: Collection[int], *, unclean: bool,
                        ) -> tuple[int, tuple[int, ...]] | None:
    """A partition's (leader, ISR) once brokers came, went or left its replicas; None
    when it stays. A dead leader, or one no longer a replica, is replaced by Kafka's
    offline election (:func:`offline_election`); dead brokers and brokers no longer
    replicas leave the ISR unless it would be empty; with no live ISR member (and no
    unclean election) the partition has no leader and keeps its ISR, for its last
    member to come back. Every change bumps the leader epoch (the caller's)."""
    assigned = tuple(r for r in isr if r in replicas) or tuple(isr)
    live_isr = tuple(r for r in assigned if r in live)
    if leader != NO_LEADER and leader in live and leader in replicas:
        return None if live_isr == tuple(isr) else (leader, live_isr)
    elected = offline_election(replicas, assigned, live, unclean=unclean)
    if elected is not None:
        return elected
    return None if leader == NO_LEADER else (NO_LEADER, assigned)


# Kafka's controller answers ElectLeaders with ApiError(error), which carries the
# error's default message (reassignments go through ApiError.fromThrowable, which drops
# a message equal to the default: none there).
ELECTION_NOT_NEEDED = "Leader election not needed for topic partition."


def election_partition(image: ClusterImage, topic: str, partition: int) -> PartitionState:
    """The partition an ElectLeaders names; UNKNOWN_TOPIC_OR_PARTITION in the words of
    Kafka's ReplicationControlManager.electLeader when the image lacks it."""
    t = image.topics.get(topic)
    if t is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}")
    state = t.partitions.get(partition)
    if state is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition,
                         f"No such partition as {topic}-{partition}")
    return state


def requested_election(state: PartitionState, election_type: ElectionType,
                       live: Collection[int]) -> tuple[int, tuple[int, ...]]:
    """The (leader, ISR) an ElectLeaders request gives the partition; raises
    ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE or
    ELIGIBLE_LEADERS_NOT_AVAILABLE as Kafka's controller answers them."""
    if election_type == ElectionType.PREFERRED:
        preferred = state.replicas[0] if state.replicas else NO_LEADER
        if state.leader == preferred:
            raise KafkaError(ErrorCode.election_not_needed, ELECTION_NOT_NEEDED)
        if preferred in live and preferred in state.isr:
            return preferred, state.isr
        raise KafkaError(ErrorCode.preferred_leader_not_available,
                         f"Failed to elect leader for partition {state.partition}: the "
                         f"preferred replica {preferred} is not live and in the ISR "
                         f"{list(state.isr)}.")
    if state.leader != NO_LEADER and state.leader in live:
        raise KafkaError(ErrorCode.election_not_needed, ELECTION_NOT_NEEDED)
    elected = offline_election(state.replicas, state.isr, live, unclean=True)
    if elected is None:
        raise KafkaError(ErrorCode.eligible_leaders_not_available,
                         f"Failed to elect leader for partition {state.partition}: no "
                         f"replica of {list(state.replicas)} is live.")
    return elected


# Preferred-leader rebalance (auto.leader.rebalance.enable): which partitions the
# controller's periodic check moves back to their preferred replica.

def imbalanced_partitions(partitions: Mapping[tuple[str, int], PartitionState]
                          ) -> list[tuple[str, int]]:
    """Partitions led by a replica other than their preferred one (the first replica),
    leaderless ones included: Kafka's PreferredReplicaImbalanceCount counts these."""
    return [tp for tp, p in partitions.items()
            if p.replicas and p.leader != p.replicas[0]]


def preferred_replica_imbalance(image: ClusterImage) -> int:
    """Kafka's controller metric PreferredReplicaImbalanceCount over the image."""
    return len(imbalanced_partitions(
        {(t.name, p.partition): p for t in image.topics.values()
         for p in t.partitions.values()}))


def auto_rebalance_elections(partitions: Mapping[tuple[str, int], PartitionState],
                             live: Collection[int], *, imbalance_percentage: int | None,
                             ) -> list[tuple[str, int]]:
    """The partitions whose preferred replica the periodic check elects.

    ``imbalance_percentage`` (leader.imbalance.per.broker.percentage), as Kafka's
    ZooKeeper-era checkAndTriggerAutoLeaderRebalance: per preferred broker, the ratio of
    its partitions that another broker leads; only a broker above the percentage gets
    its partitions back. None, as KRaft's maybeBalancePartitionLeaders: every
    imbalanced partition. Either way only where the preferred replica is live and in
    the ISR (Kafka's canPreferredReplicaBeLeader), sorted. Topics being deleted are
    the caller's to leave out."""
    by_preferred: dict[int, list[tuple[str, int]]] = {}
    for tp, p in partitions.items():
        if p.replicas:
            by_preferred.setdefault(p.replicas[0], []).append(tp)
    elect: list[tuple[str, int]] = []
    for preferred, tps in by_preferred.items():
        led_elsewhere = [tp for tp in tps if partitions[tp].leader != preferred]
        if imbalance_percentage is not None and \
                len(led_elsewhere) / len(tps) <= imbalance_percentage / 100:
            continue
        elect.extend(tp for tp in led_elsewhere
                     if preferred in live and preferred in partitions[tp].isr)
    return sorted(elect)


# Reassignments (KIP-455), checked as Kafka's controller checks them.

def reassignment(state: PartitionState | None, target: Sequence[int] | None,
                 live: Collection[int],
                 ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The (replicas, adding, removing) a reassignment to ``target`` gives the partition
    (Kafka's ReplicaAssignment.reassignTo: targets first, then the original replicas
    leaving); ``target`` None cancels, back to the original replicas. Raises
    UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS or
    INVALID_REPLICA_ASSIGNMENT."""
    if state is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
    original = state.original_replicas
    if target is None:
        if not state.reassigning:
            raise KafkaError(ErrorCode.no_reassignment_in_progress)
        target = original
    target = tuple(target)
    if not target:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "Empty replica list specified in partition reassignment.")
    if len(set(target)) != len(target):
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "Duplicate replica ids in partition reassignment replica list: "
                         f"{list(target)}")
    if any(r < 0 for r in target):
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"Invalid broker id in replica list: {list(target)}")
    replicas = tuple(dict.fromkeys((*target, *original)))
    adding = tuple(r for r in replicas if r not in original)
    if not set(adding) <= set(live):
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "Replica assignment has brokers that are not alive. Replica list: "
                         f"{list(adding)}, live broker list: {sorted(live)}")
    return replicas, adding, tuple(r for r in replicas if r not in target)


def completed_reassignment(leader: int, isr: Sequence[int], target: Sequence[int],
                           live: Collection[int]) -> tuple[int, tuple[int, ...]] | None:
    """A reassigned partition's (leader, ISR) once every target replica is in its ISR
    (Kafka's phase B), None before: the removed replicas leave the ISR, the leader stays
    when it is a live target, else the first live target in the ISR leads (Kafka's
    ReassignPartitionLeaderElection; none: not yet). The leader epoch is bumped."""
    if not set(target) <= set(isr):
        return None
    kept = tuple(r for r in isr if r in target)
    if leader not in target or leader not in live:
        elected = next((r for r in target if r in live and r in kept), None)
        if elected is None:
            return None
        leader = elected
    return leader, kept


# Topic deletion.

def topics_to_delete(image: ClusterImage, names: Sequence[str]) -> dict[str, uuid.UUID]:
    """The topics a DeleteTopics removes, by name (each once) with the id it has now, so
    a backend can tell a deleted topic from one created again under its name. Raises
    UNKNOWN_TOPIC_OR_PARTITION for a name the image lacks, as Kafka's controller."""
    found: dict[str, uuid.UUID] = {}
    for name in names:
        topic = image.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"Topic '{name}' does not exist.")
        found[name] = topic.topic_id
    return found


# Checks of CreateTopics and CreatePartitions.

class NewTopicNames:
    """The names of one CreateTopics request, checked against the image and each other:
    TOPIC_ALREADY_EXISTS, INVALID_REQUEST for a name given twice, and
    INVALID_TOPIC_EXCEPTION for names that differ only by '.' versus '_' (both map to
    one metric name)."""

    def __init__(self, image: ClusterImage) -> None:
        self._image = image
        self._requested: set[str] = set()
        self._collisions = {_collision_key(name): name for name in image.topics}

    def check(self, name: str) -> None:
        if name in self._image.topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if name in self._requested:
            raise KafkaError(ErrorCode.invalid_request, f"Topic '{name}' appears more than once.")
        other = self._collisions.get(_collision_key(name))
        if other is not None:
            raise KafkaError(ErrorCode.invalid_topic_exception,
                             f"Topic '{name}' collides with existing topic: {other}")
        self._requested.add(name)
        self._collisions[_collision_key(name)] = name


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def check_replication_factor(replication_factor: int, brokers: int) -> None:
    if replication_factor < 1:
        raise KafkaError(
            ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
        )
    if replication_factor > brokers:
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {replication_factor} time(s): The target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{brokers} broker(s) are registered.",
        )


def check_manual_assignment(
    assignment: Sequence[tuple[int, ...]], image: ClusterImage,
    replication_factor: int | None,
) -> None:
    """Kafka's checks of a manual assignment: non-empty, distinct, registered brokers,
    one replication factor for every partition of the topic."""
    expected = replication_factor
    for replicas in assignment:
        if not replicas:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes an empty replica list.",
            )
        if len(set(replicas)) != len(replicas):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes a broker more than once: "
                f"{list(replicas)}.",
            )
        for broker in replicas:
            if broker not in image.brokers:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes broker {broker}, but no "
                    "such broker is registered.",
                )
        if expected is None:
            expected = len(replicas)
        elif len(replicas) != expected:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes a partition with "
                f"{len(replicas)} replica(s), but other partitions have {expected}.",
            )


def new_topic_assignment(
    topic: NewTopic, image: ClusterImage, rng: random.Random
) -> list[tuple[int, ...]]:
    """The replicas of a new topic's partitions: its manual assignment, checked, or
    Kafka's placement from a random start over the registered brokers."""
    if topic.assignments is not None:
        ids = sorted(topic.assignments)
        if not ids or ids != list(range(len(ids))):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Partitions of topic '{topic.name}' must be numbered 0 to n-1, got {ids}.",
            )
        assignment = [tuple(topic.assignments[p]) for p in ids]
        check_manual_assignment(assignment, image, replication_factor=None)
        active = image.active_brokers
        for p in ids:
            if not active.intersection(topic.assignments[p]):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    "All brokers specified in the manual partition assignment for "
                    f"partition {p} are fenced or in controlled shutdown.")
        return assignment
    if topic.num_partitions < 1:
        raise KafkaError(
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        )
    brokers = placement_brokers(image, topic.replication_factor)
    return leaders_active(image, assign_replicas(
        brokers, topic.num_partitions, topic.replication_factor,
        start_index=rng.randrange(len(brokers)), replica_shift=rng.randrange(len(brokers)),
        racks=broker_racks(image, brokers),
    ))


def placement_brokers(image: ClusterImage, replication_factor: int) -> list[int]:
    """The brokers new replicas go to, sorted: the active ones (unfenced, not shutting
    down) when there are enough of them, else every registered broker, as Kafka's
    StripedReplicaPlacer turns to fenced brokers only once the unfenced run out. None
    active is Kafka's INVALID_REPLICATION_FACTOR."""
    check_replication_factor(replication_factor, len(image.brokers))
    active = sorted(image.active_brokers)
    if not active:
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {replication_factor} time(s): All brokers "
            "are currently fenced.")
    return active if len(active) >= replication_factor else sorted(image.brokers)


def leaders_active(image: ClusterImage, assignment: list[tuple[int, ...]]
                   ) -> list[tuple[int, ...]]:
    """Each partition's first active replica moved to the front, so the preferred
    leader is never a fenced broker (Kafka's placer picks the first replica among the
    unfenced); a partition of fenced brokers only is Kafka's INVALID_REPLICATION_FACTOR."""
    active = image.active_brokers
    placed: list[tuple[int, ...]] = []
    for replicas in assignment:
        first = next((r for r in replicas if r in active), None)
        if first is None:
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {len(replicas)} time(s): All brokers "
                "are currently fenced or in controlled shutdown.")
        placed.append((first, *(r for r in replicas if r != first)))
    return placed


def added_partitions_assignment(
    count: int, new_total: int, first_replicas: tuple[int, ...],
    assignments: Sequence[Sequence[int]] | None, image: ClusterImage, rng: random.Random,
) -> list[tuple[int, ...]]:
    """The replicas of partitions ``count .. new_total - 1`` that CreatePartitions adds
    to a topic whose first partition has ``first_replicas``: the request's assignments,
    checked, or Kafka's placement continuing the layout of that first partition."""
    if new_total < count:
        raise KafkaError(
            ErrorCode.invalid_partitions,
            f"Topic currently has {count} partitions, which is higher than the "
            f"requested {new_total}.",
        )
    if new_total == count:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {count} partitions.")
    added = new_total - count
    replication_factor = len(first_replicas)
    if assignments is not None:
        if len(assignments) != added:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"Attempted to add {added} additional partitions, but "
                f"{len(assignments)} assignments were specified.",
            )
        new_assignment = [tuple(replicas) for replicas in assignments]
        check_manual_assignment(new_assignment, image, replication_factor)
        return new_assignment
    brokers = placement_brokers(image, replication_factor)
    start = next((i for i, b in enumerate(brokers) if b >= first_replicas[0]), None)
    if start is None:
        start = rng.randrange(len(brokers))
    return leaders_active(image, assign_replicas(
        brokers, added, replication_factor, start_index=start, replica_shift=start,
        first_partition=count, racks=broker_racks(image, brokers),
    ))


# AlterPartition (KIP-497): a leader's change of its partition's ISR.

def check_alter_partition(
    image: ClusterImage, topic: str, partition: int, isr: tuple[int, ...],
    leader_epoch: int, partition_epoch: int,
) -> PartitionState:
    """The partition's current state when a leader may set ``isr`` on it; raises
    Kafka's errors: a request from a deposed leader, or built on an ISR the controller
    has since changed, must not overwrite newer state."""
    current = image.partition(topic, partition)
    where = f"{topic}-{partition}"
    if current is None:
        raise KafkaError(
            ErrorCode.unknown_topic_or_partition, f"Partition {where} does not exist."
        )
    if leader_epoch != current.leader_epoch:
        raise KafkaError(
            ErrorCode.fenced_leader_epoch,
            f"Leader epoch {leader_epoch} of {where} is not the current "
            f"{current.leader_epoch}.",
        )
    if partition_epoch != current.partition_epoch:
        raise KafkaError(
            ErrorCode.invalid_update_version,
            f"Partition epoch {partition_epoch} of {where} is not the current "
            f"{current.partition_epoch}.",
        )
    if not isr or len(set(isr)) != len(isr) or not set(isr) <= set(current.replicas):
        raise KafkaError(
            ErrorCode.invalid_request,
            f"ISR {list(isr)} of {where} must be distinct replicas of "
            f"{list(current.replicas)}.",
        )
    if current.leader not in isr:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"ISR {list(isr)} of {where} does not include the leader {current.leader}.",
        )
    unregistered = [r for r in isr if r not in image.brokers]
    if unregistered:
        raise KafkaError(
            ErrorCode.ineligible_replica,
            f"ISR of {where} includes unregistered brokers {unregistered}.",
        )
    # ReplicationControlManager.ineligibleReplicasForIsr: fenced or shutting down.
    inactive = [r for r in isr if not image.brokers[r].active]
    if inactive:
        raise KafkaError(
            ErrorCode.ineligible_replica,
            f"ISR of {where} includes fenced or shutting down brokers {inactive}.",
        )
    return current
