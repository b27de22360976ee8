"""Internal topics under admin calls, as Kafka 4 answers them (the reference tests in
tests/reference compare the answers field by field): ``__cluster_metadata`` is the
metadata log's directory and no API reaches it; ``__consumer_offsets`` may be deleted or
extended like any topic, and groups go on committing and fetching offsets after it."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from kernel.testing.embedded import EmbeddedBroker

TIMEOUT = 10.0
OFFSETS = "__consumer_offsets"


def admin(broker: EmbeddedBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})


def commit_and_fetch(broker: EmbeddedBroker, topic: str, offset: int) -> int:
    """A group commits ``offset`` for partition 0 of ``topic``, and a new consumer of
    the group reads the committed offset back; retried while the coordinator moves."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 30
    while True:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                             "enable.auto.commit": False, "log_level": 3})
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
            (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
            return int(committed.offset)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        finally:
            consumer.close()


def test_groups_keep_working_after_the_offsets_topic_is_deleted(
    broker_factory,  # type: ignore[no-untyped-def]
) -> None:
    broker = broker_factory(plugin_settings={"coordinator": {"offsets.topic.num.partitions": 3}})
    client = admin(broker)
    client.create_topics([NewTopic("data", 1)])["data"].result(TIMEOUT)
    assert commit_and_fetch(broker, "data", 5) == 5
    client.delete_topics([OFFSETS], operation_timeout=5)[OFFSETS].result(TIMEOUT)
    # The next FindCoordinator creates it again, as Kafka's does.
    assert commit_and_fetch(broker, "data", 7) == 7
    topic = broker.broker.metadata.image.topic(OFFSETS)  # type: ignore[union-attr]
    assert topic is not None and topic.internal and len(topic.partitions) == 3
    assert topic.configs.get("cleanup.policy") == "compact"


def test_groups_keep_working_after_the_offsets_topic_gains_partitions(
    broker_factory,  # type: ignore[no-untyped-def]
) -> None:
    broker = broker_factory(plugin_settings={"coordinator": {"offsets.topic.num.partitions": 2}})
    client = admin(broker)
    client.create_topics([NewTopic("data", 1)])["data"].result(TIMEOUT)
    assert commit_and_fetch(broker, "data", 3) == 3
    client.create_partitions([NewPartitions(OFFSETS, 5)])[OFFSETS].result(TIMEOUT)
    for offset in (11, 12, 13):  # groups hashed onto old and new partitions alike
        assert commit_and_fetch(broker, "data", offset) == offset


def test_cluster_metadata_cannot_be_created_or_deleted(broker: EmbeddedBroker) -> None:
    """The issue's reproduction: CreateTopics then DeleteTopics __cluster_metadata
    deleted the metadata log's directory, and after a restart every topic was gone."""
    client = admin(broker)
    client.create_topics([NewTopic("kept", 2)])["kept"].result(TIMEOUT)
    created = client.create_topics([NewTopic("__cluster_metadata", 1)])["__cluster_metadata"]
    with pytest.raises(KafkaException) as refused:
        created.result(TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    deleted = client.delete_topics(["__cluster_metadata"], operation_timeout=5)
    with pytest.raises(KafkaException) as unknown:
        deleted["__cluster_metadata"].result(TIMEOUT)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    listed = client.list_topics(timeout=TIMEOUT).topics
    assert "__cluster_metadata" not in listed and "kept" in listed
    broker.restart()
    listed = admin(broker).list_topics(timeout=TIMEOUT).topics
    assert "kept" in listed and len(listed["kept"].partitions) == 2
