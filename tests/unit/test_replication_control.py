"""The checks kernel/replication_control.py runs for both metadata backends, before
either persists a change: CreateTopics names and assignments, CreatePartitions and
AlterPartition, with Kafka's KRaft controller's error codes."""

from __future__ import annotations

import random
import uuid
from types import MappingProxyType

import pytest

from kernel.cluster import BrokerRegistration, ClusterImage, NewTopic, PartitionState, TopicImage
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.replication_control import (
    NewTopicNames,
    added_partitions_assignment,
    check_alter_partition,
    new_topic_assignment,
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
