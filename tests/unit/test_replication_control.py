"""The rules kernel/replication_control.py gives both metadata backends, before either
persists a change: CreateTopics names and assignments, CreatePartitions, AlterPartition,
elections, reassignment completion and deletions, with Kafka's KRaft controller's error
codes."""

from __future__ import annotations

import random
import uuid
from types import MappingProxyType

import pytest

from kernel.cluster import (
    NO_LEADER,
    BrokerRegistration,
    ClusterImage,
    NewTopic,
    PartitionState,
    TopicImage,
)
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.replication_control import (
    NewTopicNames,
    added_partitions_assignment,
    after_broker_change,
    auto_rebalance_elections,
    check_alter_partition,
    completed_reassignment,
    initial_state,
    new_topic_assignment,
    preferred_replica_imbalance,
    topics_to_delete,
)

STATE = PartitionState(partition=0, replicas=(1, 2, 3), isr=(1, 2), leader=1,
                       leader_epoch=4, partition_epoch=7)


def image(brokers: tuple[int, ...] = (1, 2, 3)) -> ClusterImage:
    topic = TopicImage("orders", uuid.uuid4(), MappingProxyType({0: STATE}))
    return ClusterImage(
        cluster_id="c", controller_id=1,
        brokers=MappingProxyType({b: BrokerRegistration(b, "h", 9000 + b) for b in brokers}),
        topics=MappingProxyType({"orders": topic}),
        topics_by_id=MappingProxyType({topic.topic_id: topic}))


def error_of(call: object, *args: object) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        call(*args)  # type: ignore[operator]
    return e.value.error_code


def test_new_topic_names_are_checked_against_the_image_and_each_other() -> None:
    names = NewTopicNames(image())
    assert error_of(names.check, "orders") == ErrorCode.topic_already_exists
    names.check("a.b")
    assert error_of(names.check, "a.b") == ErrorCode.invalid_request
    assert error_of(names.check, "a_b") == ErrorCode.invalid_topic_exception


@pytest.mark.parametrize(("topic", "code"), [
    (NewTopic("t", 0, 1), ErrorCode.invalid_partitions),
    (NewTopic("t", 1, 0), ErrorCode.invalid_replication_factor),
    (NewTopic("t", 1, 4), ErrorCode.invalid_replication_factor),
    (NewTopic("t", -1, -1, assignments={0: [1, 1]}), ErrorCode.invalid_replica_assignment),
    (NewTopic("t", -1, -1, assignments={0: [9]}), ErrorCode.invalid_replica_assignment),
    (NewTopic("t", -1, -1, assignments={0: [1], 1: [1, 2]}),
     ErrorCode.invalid_replica_assignment),
    (NewTopic("t", -1, -1, assignments={1: [1]}), ErrorCode.invalid_replica_assignment),
    (NewTopic("t", -1, -1, assignments={0: []}), ErrorCode.invalid_replica_assignment),
])
def test_a_new_topics_assignment_is_refused_as_kafka_refuses_it(
    topic: NewTopic, code: ErrorCode,
) -> None:
    assert error_of(new_topic_assignment, topic, image(), random.Random(0)) == code


def test_a_new_topic_is_placed_over_the_registered_brokers() -> None:
    layout = new_topic_assignment(NewTopic("t", 6, 2), image(), random.Random(0))
    assert len(layout) == 6
    assert all(len(set(r)) == 2 and set(r) <= {1, 2, 3} for r in layout)
    assert {r[0] for r in layout} == {1, 2, 3}
    manual = NewTopic("t", -1, -1, assignments={1: [3, 2], 0: [2, 1]})
    assert new_topic_assignment(manual, image(), random.Random(0)) == [(2, 1), (3, 2)]


def test_added_partitions_continue_the_first_partitions_layout() -> None:
    rng = random.Random(0)
    added = added_partitions_assignment(1, 4, (2, 3), None, image(), rng)
    assert [r[0] for r in added] == [3, 1, 2]
    assert all(len(set(r)) == 2 for r in added)
    assert added_partitions_assignment(1, 2, (2, 3), [[3, 1]], image(), rng) == [(3, 1)]


@pytest.mark.parametrize(("total", "assignments", "code"), [
    (1, None, ErrorCode.invalid_partitions),
    (0, None, ErrorCode.invalid_partitions),
    (3, [[1, 2]], ErrorCode.invalid_replica_assignment),
    (2, [[1]], ErrorCode.invalid_replica_assignment),
    (2, [[1, 9]], ErrorCode.invalid_replica_assignment),
])
def test_added_partitions_are_refused_as_kafka_refuses_them(
    total: int, assignments: list[list[int]] | None, code: ErrorCode,
) -> None:
    assert error_of(added_partitions_assignment, 1, total, (1, 2), assignments, image(),
                    random.Random(0)) == code


@pytest.mark.parametrize(("args", "code"), [
    (("nope", 0, (1,), 4, 7), ErrorCode.unknown_topic_or_partition),
    (("orders", 0, (1,), 3, 7), ErrorCode.fenced_leader_epoch),
    (("orders", 0, (1,), 4, 6), ErrorCode.invalid_update_version),
    (("orders", 0, (), 4, 7), ErrorCode.invalid_request),
    (("orders", 0, (1, 1), 4, 7), ErrorCode.invalid_request),
    (("orders", 0, (1, 4), 4, 7), ErrorCode.invalid_request),
    (("orders", 0, (2, 3), 4, 7), ErrorCode.invalid_request),
])
def test_alter_partition_is_fenced_and_checked(
    args: tuple[str, int, tuple[int, ...], int, int], code: ErrorCode,
) -> None:
    assert error_of(check_alter_partition, image(), *args) == code


def test_alter_partition_refuses_unregistered_brokers_and_accepts_a_good_isr() -> None:
    gone = image(brokers=(1, 2))
    assert error_of(check_alter_partition, gone, "orders", 0, (1, 3), 4, 7) == \
        ErrorCode.ineligible_replica
    assert check_alter_partition(image(), "orders", 0, (1, 2, 3), 4, 7) == STATE


# Elections after broker changes, reassignment completion, new partitions and deletions:
# the rules both backends' controllers apply (a state is (leader, ISR); None: unchanged).

@pytest.mark.parametrize(("leader", "isr", "live", "expected"), [
    # leader alive, ISR whole: nothing to do
    (1, (1, 2), {1, 2}, None),
    # a follower died: it leaves the ISR
    (1, (1, 2), {1}, (1, (1,))),
    # the leader died: the first live ISR member in replica order leads
    (1, (1, 3, 2), {2, 3}, (2, (3, 2))),
    # no live ISR member: no leader, the ISR kept for its last member to come back
    (1, (1,), {2, 3}, (NO_LEADER, (1,))),
    (NO_LEADER, (1,), {2, 3}, None),
    # ... and it does
    (NO_LEADER, (1,), {1, 2}, (1, (1,))),
])
def test_election_after_broker_changes(leader: int, isr: tuple[int, ...], live: set[int],
                                       expected: tuple[int, tuple[int, ...]] | None) -> None:
    assert after_broker_change(leader, isr, (1, 2, 3), live, unclean=False) == expected


def test_replicas_gone_from_the_assignment_leave_the_isr() -> None:
    """After a cancelled reassignment the ISR may hold a replica no longer assigned, or
    the leader may be one: it leaves."""
    assert after_broker_change(1, (1, 2, 3), (1, 2), {1, 2, 3}, unclean=False) == (1, (1, 2))
    assert after_broker_change(3, (3, 2), (1, 2), {1, 2, 3}, unclean=False) == (2, (2,))
    assert after_broker_change(1, (1, 2), (1, 2), {1, 2}, unclean=False) is None


def test_unclean_election_only_when_allowed() -> None:
    assert after_broker_change(NO_LEADER, (1,), (1, 2), {2}, unclean=False) is None
    assert after_broker_change(NO_LEADER, (1,), (1, 2), {2}, unclean=True) == (2, (2,))


def test_a_reassignment_completes_once_every_target_is_in_the_isr() -> None:
    assert completed_reassignment(1, (1, 2), (2, 3), {1, 2, 3}) is None
    # the leader is leaving: the first live target in the ISR leads
    assert completed_reassignment(1, (1, 2, 3), (2, 3), {1, 2, 3}) == (2, (2, 3))
    # a live target leader stays
    assert completed_reassignment(3, (1, 3, 2), (2, 3), {1, 2, 3}) == (3, (3, 2))
    # no live target: not yet
    assert completed_reassignment(1, (1, 2, 3), (2, 3), {1}) is None


def test_a_new_partition_is_led_by_its_first_live_replica() -> None:
    assert initial_state((3, 1, 2), {1, 2, 3}) == (3, (3, 1, 2))
    assert initial_state((3, 1, 2), {1, 2}) == (1, (1, 2))
    assert initial_state((3,), {1}) is None


def test_deleting_topics_names_each_once_with_its_id() -> None:
    cluster = image()
    orders = cluster.topics["orders"].topic_id
    assert topics_to_delete(cluster, ["orders", "orders"]) == {"orders": orders}
    assert topics_to_delete(cluster, []) == {}
    with pytest.raises(KafkaError) as refused:
        topics_to_delete(cluster, ["orders", "missing"])
    assert refused.value.error_code == ErrorCode.unknown_topic_or_partition
    assert "Topic 'missing' does not exist." in str(refused.value)


def _led(leaders: list[int], preferred: int = 1, isr: tuple[int, ...] = (1, 2, 3),
         ) -> dict[tuple[str, int], PartitionState]:
    """Partitions of topic t that ``preferred`` should lead, led by ``leaders``."""
    others = tuple(b for b in (1, 2, 3) if b != preferred)
    return {("t", i): PartitionState(i, (preferred, *others), isr, leader)
            for i, leader in enumerate(leaders)}


def test_rebalance_waits_until_a_broker_is_over_the_imbalance_percentage() -> None:
    # Kafka's ZooKeeper-era rule: 1 of 10 led elsewhere is 10%, not above 10%.
    partitions = _led([1] * 9 + [2])
    assert auto_rebalance_elections(partitions, {1, 2, 3}, imbalance_percentage=10) == []
    partitions = _led([1] * 8 + [2, 3])
    assert auto_rebalance_elections(partitions, {1, 2, 3}, imbalance_percentage=10) == [
        ("t", 8), ("t", 9)]
    # KRaft's rule (no percentage): every imbalanced partition.
    assert auto_rebalance_elections(_led([1] * 9 + [2]), {1, 2, 3},
                                    imbalance_percentage=None) == [("t", 9)]


def test_rebalance_needs_the_preferred_replica_live_and_in_the_isr() -> None:
    partitions = _led([2, 2])
    assert auto_rebalance_elections(partitions, {2, 3}, imbalance_percentage=10) == []
    out_of_isr = _led([2, 2], isr=(2, 3))
    assert auto_rebalance_elections(out_of_isr, {1, 2, 3}, imbalance_percentage=10) == []
    # A leaderless partition whose preferred replica is back and in the ISR counts.
    assert auto_rebalance_elections(_led([NO_LEADER]), {1, 2, 3},
                                    imbalance_percentage=10) == [("t", 0)]


def test_rebalance_ratio_is_per_preferred_broker() -> None:
    # Broker 1 prefers 4 partitions and leads them all; broker 2 prefers 2, leads none.
    partitions = {**_led([1, 1, 1, 1]),
                  **{("u", i): PartitionState(i, (2, 1, 3), (1, 2, 3), 1) for i in (0, 1)}}
    assert auto_rebalance_elections(partitions, {1, 2, 3}, imbalance_percentage=10) == [
        ("u", 0), ("u", 1)]
    assert auto_rebalance_elections(partitions, {1, 2, 3}, imbalance_percentage=100) == []


def test_preferred_replica_imbalance_counts_partitions_not_led_by_their_first_replica(
) -> None:
    img = image()
    assert preferred_replica_imbalance(img) == 0
    topic = TopicImage("moved", uuid.uuid4(), MappingProxyType({
        0: PartitionState(0, (1, 2), (1, 2), 2), 1: PartitionState(1, (2, 1), (1,), NO_LEADER),
        2: PartitionState(2, (2, 1), (2, 1), 2)}))
    img = ClusterImage(img.cluster_id, img.controller_id, img.brokers,
                       {**img.topics, "moved": topic}, img.topics_by_id)
    assert preferred_replica_imbalance(img) == 2
