"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments on the
embedded single-node metadata (confluent-kafka and the wire): with one broker there is
nothing to elect or move, and the answers are Kafka's errors; without ALTER (DESCRIBE)
on the cluster, CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.elect_leaders.v0.request import ElectLeadersRequest as ElectLeadersV0
from kio.schema.elect_leaders.v0.request import TopicPartitions as TopicPartitionsV0
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
)

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_acl import acl_broker, admin, create_topics
from tests.integration.wire import request


def _reassign(bootstrap: str, replicas: tuple[int, ...] | None, topic: str = "solo",
              ) -> Any:
    return request(bootstrap, AlterPartitionReassignmentsRequest(topics=(ReassignableTopic(
        name=topic, partitions=(ReassignablePartition(partition_index=0,
                                                      replicas=replicas),)),)))


def _codes(response: Any) -> list[ErrorCode]:
    return [p.error_code for t in response.responses for p in t.partitions]


def test_one_broker_has_nothing_to_elect_or_move(broker: EmbeddedBroker) -> None:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    client.create_topics([NewTopic("solo", 2, 1)])["solo"].result(timeout=15)
    result = client.elect_leaders(ElectionType.PREFERRED, [
        TopicPartition("solo", 0), TopicPartition("absent", 0)]).result(timeout=15)
    assert {tp.topic: e.code() for tp, e in result.items()} == {
        "solo": ErrorCode.election_not_needed, "absent": ErrorCode.unknown_topic_or_partition}
    assert client.elect_leaders(ElectionType.UNCLEAN, None).result(timeout=15) == {}
    v0 = request(broker.bootstrap, ElectLeadersV0(topic_partitions=(
        TopicPartitionsV0(topic="solo", partitions=(1,)),)))
    assert [p.error_code for r in v0.replica_election_results
            for p in r.partition_result] == [ErrorCode.election_not_needed]

    assert _codes(_reassign(broker.bootstrap, (1,))) == [ErrorCode.none]
    assert _codes(_reassign(broker.bootstrap, (9,))) == [ErrorCode.invalid_replica_assignment]
    assert _codes(_reassign(broker.bootstrap, None)) == [
        ErrorCode.no_reassignment_in_progress]
    assert _codes(_reassign(broker.bootstrap, (1,), "absent")) == [
        ErrorCode.unknown_topic_or_partition]
    listed = request(broker.bootstrap, ListPartitionReassignmentsRequest(topics=None))
    assert (listed.error_code, listed.topics) == (ErrorCode.none, ())


def test_the_apis_need_the_cluster_permissions(broker_factory: Callable[..., EmbeddedBroker],
                                               tmp_path: Path) -> None:
    b = acl_broker(broker_factory, tmp_path)
    create_topics(b, "guarded")
    alice, root = admin(b, "alice"), admin(b)  # held: a collected client fails its futures
    result = alice.elect_leaders(ElectionType.PREFERRED, [TopicPartition("guarded", 0)])
    try:
        result.result(timeout=15)
    except Exception as e:  # librdkafka reports the top-level error
        assert "CLUSTER_AUTHORIZATION_FAILED" in str(e)
    else:
        raise AssertionError("alice elected a leader without ALTER on the cluster")
    assert root.elect_leaders(ElectionType.PREFERRED, [
        TopicPartition("guarded", 0)]).result(timeout=15)[
        TopicPartition("guarded", 0)].code() == ErrorCode.election_not_needed
