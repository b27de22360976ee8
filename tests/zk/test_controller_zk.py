"""The controller's remaining duties on a real ZooKeeper, with several brokers on
metadata_zk: rack-aware placement from the brokers' registrations, unclean leader
election, ElectLeaders and partition reassignments (KIP-455). The brokers replicate, so
every ISR change is the real one: a follower leaves the ISR because its broker stopped
(the controller drops a dead broker), and joins it by fetching what it missed. A
reassignment is held in progress by keeping its new replica from fetching (its leader
stalled while the new replica's broker stops, see ``_stalled``), not by timing."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import ElectionType as ClientElectionType
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kazoo.client import KazooClient
from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)

from kernel.cluster import NO_LEADER, ElectionType, PartitionState
from kernel.cluster import NewTopic as NewTopicSpec
from kernel.protocol.errors import KafkaError
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import request
from tests.zk import wait_until as _wait
from tests.zk.test_replication_zk import _produce, _replica

Factory = Callable[..., EmbeddedBroker]
# Fast fetch retries after a leader stops. No scenario waits for the leader's lag check
# (a follower leaves the ISR because its broker stopped), so replica.lag.time.max.ms is
# long enough that a leader stalled for a moment keeps its followers when it resumes.
REPLICATION = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100,
               "replica.lag.time.max.ms": 10000}
RECORDS = 20


def _json(kazoo: KazooClient, path: str) -> Any:
    return json.loads(kazoo.get(path)[0])


def _cluster(factory: Factory, *ids: int, racks: dict[int, str] | None = None,
             ) -> list[EmbeddedBroker]:
    brokers = []
    for broker_id in ids:
        settings: dict[str, Any] = {"broker.id": broker_id, **REPLICATION}
        if racks and broker_id in racks:
            settings["broker.rack"] = racks[broker_id]
        brokers.append(factory(settings))
    first = backend(brokers[0])
    _wait(lambda: set(first.image.brokers) == set(ids), "every broker to register")
    return brokers


def backend(b: EmbeddedBroker) -> Any:
    assert b.broker is not None
    return b.broker.metadata


def partition(b: EmbeddedBroker, topic: str, index: int = 0) -> PartitionState:
    """The partition as ``b``'s image has it, once it has it: a broker learns a new
    topic from a watch, a moment after the controller wrote it."""
    state: PartitionState = _wait(lambda: backend(b).image.partition(topic, index),
                                  f"{topic}-{index} in the image of a broker")
    return state


def _create(b: EmbeddedBroker, name: str, assignments: dict[int, tuple[int, ...]],
            configs: dict[str, str] | None = None) -> None:
    b.call(backend(b).create_topics([NewTopicSpec(name, 0, 0, configs or {},
                                                  assignments=assignments)]))


def _fill(b: EmbeddedBroker, topic: str) -> int:
    """Produce RECORDS records (acks=all) to partition 0; its log end offset after them.
    A replica new to the partition starts fetching at 0, below the high watermark, so
    that fetch alone cannot put it in the ISR: it must catch up."""
    acked = _produce(b.bootstrap, topic, [f"{topic}-{i}".encode() for i in range(RECORDS)])
    assert len(acked) == RECORDS
    return max(offset for _, offset in acked) + 1


def _log_end(b: EmbeddedBroker, topic: str) -> int:
    replica = _replica(b, topic)
    return -1 if replica is None else int(replica.log.log_end_offset)


@contextmanager
def _stalled(b: EmbeddedBroker, timeout: float = 30.0) -> Iterator[None]:
    """Hold the broker's event loop, as a stalled process: kazoo's own thread keeps its
    ZooKeeper session (so its registration and its places in ISRs) while it answers
    nothing, so no follower can fetch from it. Released on leaving, or after
    ``timeout`` whatever the test does."""
    loop = b._loop
    assert loop is not None
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(timeout)

    loop.call_soon_threadsafe(hold)
    assert held.wait(timeout), "the broker's loop was not held"
    try:
        yield
    finally:
        release.set()


def test_racks_are_registered_and_replicas_spread_over_them(
        zk_broker_factory: Factory, kazoo: KazooClient) -> None:
    b1, _, _ = _cluster(zk_broker_factory, 1, 2, 3, racks={1: "east", 2: "east", 3: "west"})
    assert _json(kazoo, "/brokers/ids/1")["rack"] == "east"
    assert _json(kazoo, "/brokers/ids/3")["rack"] == "west"
    assert backend(b1).image.brokers[3].rack == "west"

    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    admin.create_topics([NewTopic("spread", 6, 2)])["spread"].result(timeout=30)
    layout = _json(kazoo, "/brokers/topics/spread")["partitions"]
    racks = {1: "east", 2: "east", 3: "west"}
    for replicas in layout.values():
        assert {racks[r] for r in replicas} == {"east", "west"}, layout
    admin.create_partitions([NewPartitions("spread", 9)])["spread"].result(timeout=30)
    for replicas in _json(kazoo, "/brokers/topics/spread")["partitions"].values():
        assert {racks[r] for r in replicas} == {"east", "west"}

    # A broker without a rack among brokers with one: Kafka's AdminUtils refuses.
    zk_broker_factory({"broker.id": 4})
    _wait(lambda: 4 in backend(b1).image.brokers, "broker 4")
    with pytest.raises(KafkaException, match="UNKNOWN"):
        admin.create_topics([NewTopic("mixed", 1, 2)])["mixed"].result(timeout=30)


def test_unclean_leader_election_by_topic_config_and_by_broker_default(
        zk_broker_factory: Factory) -> None:
    b1, b2 = _cluster(zk_broker_factory, 1, 2)
    topics = ("strict", "lenient", "cluster-wide")
    for topic in topics:
        _create(b1, topic, {0: (1, 2)})
    # Broker 2 falls behind: it stops, the controller drops it from the ISR, and leader 1
    # takes records it does not have. Then broker 1, the last of the ISR, dies too and
    # broker 2 comes back alone.
    b2.stop(remove_data=False)
    for topic in topics:
        _wait(lambda t=topic: partition(b1, t).isr == (1,), f"{topic} to drop broker 2")
        _fill(b1, topic)
    b1.stop()
    b2.start()
    for topic in topics:
        p = _wait(lambda t=topic: (p := partition(b2, t)).leader == NO_LEADER and p,
                  f"{topic} to lose its leader")
        assert p.isr == (1,)  # kept, so that its last member can come back

    before = partition(b2, "lenient")
    b2.call(backend(b2).set_topic_configs("lenient",
                                          {"unclean.leader.election.enable": "true"}))
    p = _wait(lambda: (p := partition(b2, "lenient")).leader == 2 and p, "an unclean leader")
    assert (p.isr, p.leader_epoch) == ((2,), before.leader_epoch + 1)
    assert _log_end(b2, "lenient") == 0  # what only broker 1 had is lost, as in Kafka

    b2.call(backend(b2).set_topic_configs("strict",
                                          {"unclean.leader.election.enable": "false"}))
    b2.call(backend(b2).set_broker_configs(-1, {"unclean.leader.election.enable": "true"}))
    _wait(lambda: partition(b2, "cluster-wide").leader == 2, "the broker default to apply")
    assert partition(b2, "strict").leader == NO_LEADER  # the topic's false stands


def test_elect_leaders_preferred_and_unclean(zk_broker_factory: Factory,
                                             kazoo: KazooClient) -> None:
    b1, b2 = _cluster(zk_broker_factory, 1, 2)
    _create(b1, "pref", {0: (1, 2), 1: (2, 1)})
    b1.stop(remove_data=False)
    _wait(lambda: partition(b2, "pref").leader == 2, "leadership to move to broker 2")
    end = _fill(b2, "pref")  # records broker 1 will have to catch up with
    admin = AdminClient({"bootstrap.servers": b2.bootstrap})

    def elect(kind: ClientElectionType, *partitions: tuple[str, int]) -> dict[Any, Any]:
        tps = [TopicPartition(t, p) for t, p in partitions] or None
        return admin.elect_leaders(kind, tps).result(timeout=30)

    # Broker 1 is out of the ISR (stopped): its preferred leadership must wait.
    result = elect(ClientElectionType.PREFERRED, ("pref", 0), ("pref", 1), ("nope", 0))
    errors = {(tp.topic, tp.partition): e and e.code() for tp, e in result.items()}
    assert errors == {("pref", 0): ErrorCode.preferred_leader_not_available,
                      ("pref", 1): ErrorCode.election_not_needed,
                      ("nope", 0): ErrorCode.unknown_topic_or_partition}

    # Broker 1 comes back and catches up: leader 2 adds it to the ISR.
    b1.start()
    _wait(lambda: partition(b2, "pref").isr == (2, 1), "broker 1 back in the ISR")
    assert _log_end(b1, "pref") == end
    before = partition(b2, "pref")
    result = elect(ClientElectionType.PREFERRED, ("pref", 0))
    assert [e for e in result.values()] == [None]
    after = partition(b2, "pref")
    assert (after.leader, after.isr, after.leader_epoch) == (1, (2, 1), before.leader_epoch + 1)
    _wait(lambda: partition(b1, "pref").leader == 1, "broker 1 to learn it leads")
    assert not kazoo.exists("/admin/preferred_replica_election")

    # Every partition (a null list): those already led by their preferred replica are
    # left out of the answer.
    assert elect(ClientElectionType.PREFERRED) == {}

    # Unclean: only for partitions without a live leader.
    result = elect(ClientElectionType.UNCLEAN, ("pref", 0))
    assert [e.code() for e in result.values()] == [ErrorCode.election_not_needed]
    _create(b2, "stranded", {0: (1, 2)})
    # Broker 2 stops (out of the ISR), then leader 1, the last of the ISR: broker 2
    # comes back to a partition without a leader.
    b2.stop(remove_data=False)
    _wait(lambda: partition(b1, "stranded").isr == (1,), "stranded to drop broker 2")
    b1.stop()
    b2.start()
    _wait(lambda: partition(b2, "stranded").leader == NO_LEADER, "stranded to lose its leader")
    admin = AdminClient({"bootstrap.servers": b2.bootstrap})  # its port changed
    result = elect(ClientElectionType.UNCLEAN, ("stranded", 0))
    assert [e for e in result.values()] == [None]
    p = partition(b2, "stranded")
    assert (p.leader, p.isr) == (2, (2,))
    assert not kazoo.exists("/admin/unclean_leader_election")


def test_a_preferred_election_written_to_zookeeper_is_run(
        zk_broker_factory: Factory, kazoo: KazooClient) -> None:
    """As kafka-preferred-replica-election --zookeeper wrote it (Kafka 2.x)."""
    b1, b2 = _cluster(zk_broker_factory, 1, 2)
    _create(b1, "old", {0: (1, 2)})
    b1.stop(remove_data=False)
    _wait(lambda: partition(b2, "old").leader == 2, "leadership to move")
    b1.start()
    _wait(lambda: partition(b2, "old").isr == (2, 1), "broker 1 back in the ISR")
    kazoo.create("/admin/preferred_replica_election", json.dumps(
        {"version": 1, "partitions": [{"topic": "old", "partition": 0}]}).encode())
    _wait(lambda: partition(b2, "old").leader == 1, "the preferred leader")
    _wait(lambda: not kazoo.exists("/admin/preferred_replica_election"), "the request gone")


def _alter(b: EmbeddedBroker, targets: dict[tuple[str, int], list[int] | None],
           **kwargs: Any) -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[ReassignablePartition]] = {}
    for (topic, index), replicas in targets.items():
        topics.setdefault(topic, []).append(ReassignablePartition(
            partition_index=index, replicas=None if replicas is None else tuple(replicas)))
    response = request(b.bootstrap, AlterPartitionReassignmentsRequest(topics=tuple(
        ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()),
        **kwargs))
    assert response.error_code == ErrorCode.none, response
    return {(t.name, p.partition_index): p.error_code
            for t in response.responses for p in t.partitions}


def _listed(b: EmbeddedBroker, topics: dict[str, list[int]] | None = None,
            ) -> dict[tuple[str, int], tuple[tuple[int, ...], ...]]:
    body = ListPartitionReassignmentsRequest(topics=None if topics is None else tuple(
        ListPartitionReassignmentsTopics(name=t, partition_indexes=tuple(ps))
        for t, ps in topics.items()))
    response = request(b.bootstrap, body)
    assert response.error_code == ErrorCode.none
    return {(t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
            for t in response.topics for p in t.partitions}


def test_reassignment_completes_once_the_targets_are_in_the_isr(
        zk_broker_factory: Factory, kazoo: KazooClient) -> None:
    b1, b2, b3 = _cluster(zk_broker_factory, 1, 2, 3)
    _create(b1, "moving", {0: (1, 2), 1: (2, 3)})
    _wait(lambda: all("moving" in backend(b).image.topics for b in (b2, b3)), "the topic")
    topic_id = _json(kazoo, "/brokers/topics/moving")["topic_id"]
    end = _fill(b1, "moving")

    # Broker 3, the new replica, cannot catch up: its leader (1) is stalled while the
    # reassignment starts, and broker 3 stops before the leader resumes.
    with _stalled(b1):
        assert _alter(b2, {("moving", 0): [2, 3], ("moving", 1): None, ("moving", 5): [1],
                           ("ghost", 0): [1]}) == {
            ("moving", 0): ErrorCode.none,
            ("moving", 1): ErrorCode.no_reassignment_in_progress,
            ("moving", 5): ErrorCode.unknown_topic_or_partition,
            ("ghost", 0): ErrorCode.unknown_topic_or_partition}
        assert _json(kazoo, "/brokers/topics/moving") == {
            "version": 3, "topic_id": topic_id, "partitions": {"0": [2, 3, 1], "1": [2, 3]},
            "adding_replicas": {"0": [3]}, "removing_replicas": {"0": [1]}}
        for b in (b2, b3):
            p = _wait(lambda b=b: (p := partition(b, "moving")).reassigning and p, "the image")
            assert (p.replicas, p.adding_replicas, p.removing_replicas) == \
                ((2, 3, 1), (3,), (1,))
            assert (p.leader, p.isr) == (1, (1, 2))
        assert _listed(b3) == {("moving", 0): ((2, 3, 1), (3,), (1,))}
        assert _listed(b3, {"moving": [0, 1, 7], "ghost": [0]}) == _listed(b3)
        b3.stop(remove_data=False)
    p = _wait(lambda: (p := partition(b1, "moving")).reassigning and p, "broker 1's image")
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((2, 3, 1), (3,), (1,))
    assert (p.leader, p.isr) == (1, (1, 2))
    assert _listed(b1) == {("moving", 0): ((2, 3, 1), (3,), (1,))}

    assert _alter(b1, {("moving", 0): [], ("moving", 1): [3, 3], ("moving", 2): [1]}) == {
        ("moving", 0): ErrorCode.invalid_replica_assignment,
        ("moving", 1): ErrorCode.invalid_replica_assignment,
        ("moving", 2): ErrorCode.unknown_topic_or_partition}
    assert _alter(b1, {("moving", 1): [2, 9]}) == {
        ("moving", 1): ErrorCode.invalid_replica_assignment}  # broker 9 is not alive
    assert _alter(b1, {("moving", 1): [1]}, allow_replication_factor_change=False) == {
        ("moving", 1): ErrorCode.invalid_replication_factor}

    # Broker 3 comes back and catches up: leader 1 adds it to the ISR, and the
    # controller completes.
    before = partition(b1, "moving")
    b3.start()
    done = _wait(lambda: not (p := partition(b2, "moving")).reassigning and p, "completion")
    assert (done.replicas, done.isr, done.leader) == ((2, 3), (2, 3), 2)
    assert done.leader_epoch == before.leader_epoch + 1
    assert _json(kazoo, "/brokers/topics/moving")["partitions"]["0"] == [2, 3]
    assert _json(kazoo, "/brokers/topics/moving")["adding_replicas"] == {}
    state = _json(kazoo, "/brokers/topics/moving/partitions/0/state")
    assert (state["leader"], state["isr"]) == (2, [2, 3])
    assert _listed(b1) == {}
    # The records moved with it; broker 1's replica is gone.
    _wait(lambda: _log_end(b3, "moving") == end, "broker 3 to hold the records")
    _wait(lambda: _replica(b1, "moving") is None, "broker 1's replica removed")


def test_a_cancelled_reassignment_returns_to_the_original_replicas(
        zk_broker_factory: Factory, kazoo: KazooClient) -> None:
    b1, b2, b3 = _cluster(zk_broker_factory, 1, 2, 3)
    _create(b1, "back", {0: (1, 2)})
    _wait(lambda: "back" in backend(b3).image.topics, "the topic")
    end = _fill(b1, "back")
    assert _alter(b3, {("back", 0): [3, 1]}) == {("back", 0): ErrorCode.none}
    # Broker 3 catches up and leader 1 adds it to the ISR: the targets (3, 1) are all
    # in, so the reassignment completes; leader 1 is a live target and stays.
    done = _wait(lambda: (p := partition(b1, "back")).replicas == (3, 1)
                 and not p.reassigning and p, "completion")
    assert (done.replicas, done.isr, done.leader) == ((3, 1), (1, 3), 1)
    assert _log_end(b3, "back") == end
    _wait(lambda: _replica(b2, "back") is None, "broker 2's replica removed")

    # Replaced by another reassignment, then cancelled: back where it started. Leader
    # 1 is stalled meanwhile, so that broker 2 cannot catch up and complete either.
    with _stalled(b1):
        assert _alter(b3, {("back", 0): [2, 3]}) == {("back", 0): ErrorCode.none}
        assert _alter(b3, {("back", 0): [2, 1]}) == {("back", 0): ErrorCode.none}
        assert _json(kazoo, "/brokers/topics/back")["partitions"]["0"] == [2, 1, 3]
        assert _listed(b3) == {("back", 0): ((2, 1, 3), (2,), (3,))}
        assert _alter(b3, {("back", 0): None}) == {("back", 0): ErrorCode.none}
    cancelled = _wait(lambda: (p := partition(b1, "back")).replicas == (1, 3)
                      and not p.reassigning and p, "the cancellation")
    assert (cancelled.leader, set(cancelled.isr)) == (1, {1, 3})
    assert _json(kazoo, "/brokers/topics/back")["adding_replicas"] == {}
    assert _listed(b3) == {}
    _wait(lambda: _replica(b2, "back") is None, "broker 2's replica removed again")


def test_an_isr_change_checked_against_removed_replicas_is_refused(
        zk_broker_factory: Factory, kazoo: KazooClient) -> None:
    """The controller completes a reassignment in one multi-op (the state and the
    topic's replicas), but a broker's watches may bring the new state first: a leader's
    ISR change checked meanwhile against the old replicas must not take back a replica
    the reassignment just removed."""
    b1, b2 = _cluster(zk_broker_factory, 1, 2)
    _create(b1, "shrunk", {0: (1, 2)})
    _wait(lambda: partition(b1, "shrunk").isr == (1, 2), "the ISR")
    path = "/brokers/topics/shrunk/partitions/0/state"
    # Broker 2 stalls, registered but not fetching, so leader 1 cannot add it itself.
    with _stalled(b2):
        # A reassignment to (1,) completes: the state, with 2 out of the ISR, arrives...
        data, stat = kazoo.get(path)
        state = json.loads(data)
        state.update(leader_epoch=state["leader_epoch"] + 1, isr=[1])
        kazoo.set(path, json.dumps(state).encode(), version=stat.version)
        p = _wait(lambda: (p := partition(b1, "shrunk")).isr == (1,) and p, "the new state")
        assert p.replicas == (1, 2)

        async def isr_change_before_the_replicas_arrive() -> PartitionState:
            # ... then the topic's replicas, written while broker 1's loop is busy here,
            # so its image still has the old ones when the leader asks for 2 back.
            topic = _json(kazoo, "/brokers/topics/shrunk")
            kazoo.set("/brokers/topics/shrunk",
                      json.dumps({**topic, "partitions": {"0": [1]}}).encode())
            return await backend(b1).alter_partition("shrunk", 0, (1, 2), p.leader_epoch,
                                                     p.partition_epoch)

        with pytest.raises(KafkaError) as refused:
            b1.call(isr_change_before_the_replicas_arrive())
        assert refused.value.error_code == ErrorCode.invalid_update_version
    assert _json(kazoo, path)["isr"] == [1]
    _wait(lambda: partition(b1, "shrunk").replicas == (1,), "the new replicas")


def test_elections_and_reassignments_keep_kafkas_errors_on_one_broker(
        zk_broker: EmbeddedBroker) -> None:
    b = zk_broker
    _create(b, "solo", {0: (1,)})
    result = b.call(backend(b).elect_leaders(ElectionType.PREFERRED, [("solo", 0)], 1000))
    assert result[("solo", 0)].error_code == ErrorCode.election_not_needed
    assert _alter(b, {("solo", 0): [1]}) == {("solo", 0): ErrorCode.none}
    assert not partition(b, "solo").reassigning
