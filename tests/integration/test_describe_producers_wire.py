"""DescribeProducers over a socket: the producer state of a partition's log (an
idempotent producer's last sequence, an open transaction's first offset until its
marker, the marker's coordinator epoch), and Kafka's errors per partition."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.describe_producers.v0 import request as describe_v0
from kio.schema.errors import ErrorCode

from kernel.cluster import BrokerRegistration
from kernel.hookspecs import hookimpl
from kernel.log import AppendOrigin
from kernel.protocol.records import SimpleRecord, build_batch
from kernel.requests import Session
from kernel.services import TransactionResult, TxnMarker
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_produce_fetch import create_topic
from tests.integration.wire import request

TOPIC = "p-topic"
PID, EPOCH = 8123, 4


class SecretTopic:
    @hookimpl
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> bool | None:
        if resource_type == "TOPIC" and resource_name == "p-secret":
            return operation not in ("READ", "DESCRIBE")
        return None


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    b = broker_factory(plugins=["metadata_kraft", "coordinator", "txn",
                                "tests.integration.test_describe_producers_wire:SecretTopic"])
    create_topic(b.bootstrap, TOPIC, partitions=2)
    create_topic(b.bootstrap, "p-secret")
    return b


def describe(broker: EmbeddedBroker, topics: dict[str, list[int]]) -> dict[Any, Any]:
    m = describe_v0
    response = request(broker.bootstrap, m.DescribeProducersRequest(topics=tuple(
        m.TopicRequest(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items())))
    return {(t.name, p.partition_index): (p.error_code, {
        s.producer_id: (s.producer_epoch, s.last_sequence, s.coordinator_epoch,
                        s.current_txn_start_offset, s.last_timestamp > 0)
        for s in p.active_producers}) for t in response.topics for p in t.partitions}


def append_transactional(broker: EmbeddedBroker, count: int) -> None:
    """The producer's transactional batch, as a Produce would append it."""
    b = broker.broker
    assert b is not None

    async def append() -> None:
        partition = b.replicas.get_partition(TOPIC, 0)
        assert partition is not None
        batch = build_batch([SimpleRecord(value=b"v%d" % i) for i in range(count)],
                            base_timestamp=int(time.time() * 1000), producer_id=PID,
                            producer_epoch=EPOCH, base_sequence=0, is_transactional=True)
        b.replicas.append_records(partition, batch, -1, int(time.time() * 1000),
                                  origin=AppendOrigin.CLIENT)

    broker.call(append())


def test_an_open_transaction_until_its_marker(broker: EmbeddedBroker) -> None:
    assert describe(broker, {TOPIC: [0, 1]}) == {(TOPIC, 0): (ErrorCode.none, {}),
                                                 (TOPIC, 1): (ErrorCode.none, {})}
    append_transactional(broker, 3)
    assert describe(broker, {TOPIC: [0]}) == {
        (TOPIC, 0): (ErrorCode.none, {PID: (EPOCH, 2, -1, 0, True)})}

    b = broker.broker
    assert b is not None
    (result,) = broker.call(b.write_txn_markers([TxnMarker(
        producer_id=PID, producer_epoch=EPOCH, coordinator_epoch=6,
        result=TransactionResult.COMMIT, partitions=((TOPIC, 0),))]))
    assert dict(result.errors) == {(TOPIC, 0): ErrorCode.none}
    assert describe(broker, {TOPIC: [0]}) == {
        (TOPIC, 0): (ErrorCode.none, {PID: (EPOCH, 2, 6, -1, True)})}


def test_errors_as_kafka(broker: EmbeddedBroker) -> None:
    answers = describe(broker, {TOPIC: [7], "p-absent": [0], "p-secret": [0], "bad/name": [0]})
    assert {tp: error for tp, (error, _) in answers.items()} == {
        (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
        ("p-absent", 0): ErrorCode.unknown_topic_or_partition,
        ("p-secret", 0): ErrorCode.topic_authorization_failed,
        ("bad/name", 0): ErrorCode.invalid_topic_exception,
    }


def create_on(broker: EmbeddedBroker, name: str, replicas: tuple[int, ...]) -> None:
    """A one-partition topic on ``replicas`` (the first leads)."""
    m = create_v7
    created = request(broker.bootstrap, m.CreateTopicsRequest(
        timeout=datetime.timedelta(seconds=10), validate_only=False, topics=(m.CreatableTopic(
            name=name, num_partitions=-1, replication_factor=-1, configs=(),
            assignments=(m.CreatableReplicaAssignment(partition_index=0,
                                                      broker_ids=replicas),)),)))
    assert created.topics[0].error_code == ErrorCode.none


def test_replicas_elsewhere_and_followers_here(broker: EmbeddedBroker) -> None:
    assert broker.broker is not None
    broker.call(broker.broker.metadata.register_broker(
        BrokerRegistration(node_id=2, host="127.0.0.1", port=1)))
    create_on(broker, "p-elsewhere", (2,))
    create_on(broker, "p-followed", (2, 1))
    # Not hosted here: NOT_LEADER_OR_FOLLOWER (the client looks the leader up again); a
    # follower answers from its own log, as Kafka's does.
    assert describe(broker, {"p-elsewhere": [0], "p-followed": [0]}) == {
        ("p-elsewhere", 0): (ErrorCode.not_leader_or_follower, {}),
        ("p-followed", 0): (ErrorCode.none, {})}
    # Markers go to leaders only: a follower answers NOT_LEADER_OR_FOLLOWER, a broker
    # without the partition UNKNOWN_TOPIC_OR_PARTITION (Kafka's getMagic finds no log).
    (result,) = broker.call(broker.broker.write_txn_markers([TxnMarker(
        producer_id=PID, producer_epoch=EPOCH, coordinator_epoch=0,
        result=TransactionResult.ABORT, partitions=(("p-elsewhere", 0), ("p-followed", 0)))]))
    assert dict(result.errors) == {("p-elsewhere", 0): ErrorCode.unknown_topic_or_partition,
                                   ("p-followed", 0): ErrorCode.not_leader_or_follower}
