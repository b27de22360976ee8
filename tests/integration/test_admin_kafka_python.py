"""Admin APIs through kafka-python's KafkaAdminClient over real sockets."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka import errors as kafka_errors
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from kernel.testing.embedded import EmbeddedBroker

TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[KafkaAdminClient]:
    admin = _client(broker)
    yield admin
    admin.close()


def _client(broker: EmbeddedBroker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000,
                            client_id="kafkernel-test")


def spec(partitions: int = 1, replication: int = 1, **extra: Any) -> dict[str, Any]:
    """A create_topics entry with explicit counts: kafka-python sends -1 (the broker's
    defaults) only to brokers it recognises as 2.4+, which it tells by Produce, Fetch
    and ListOffsets versions; the confluent-kafka and aiokafka tests cover -1."""
    return {"num_partitions": partitions, "replication_factor": replication, **extra}


def codes(result: dict[str, Any], key: str = "topics") -> dict[str, int]:
    return {t["name"]: t["error_code"] for t in result[key]}


def describe(client: KafkaAdminClient, kind: ConfigResourceType, name: str,
             **kwargs: Any) -> dict[str, Any]:
    result = client.describe_configs([ConfigResource(kind, name)], config_filter="all",
                                     **kwargs)
    return result[kind.name.lower()][name]


def test_create_list_describe_delete(client: KafkaAdminClient) -> None:
    result = client.create_topics({
        "kp-orders": spec(3, configs={"retention.ms": "3600000"}),
        "kp-defaults": spec(),
    })
    by_name = {t["name"]: t for t in result["topics"]}
    # CreateTopics v5+ answers with the id, the resolved counts and the configs.
    assert by_name["kp-orders"]["num_partitions"] == 3
    assert by_name["kp-orders"]["replication_factor"] == 1
    assert uuid.UUID(by_name["kp-orders"]["topic_id"]) != uuid.UUID(int=0)
    assert by_name["kp-orders"]["configs"]["retention.ms"]["value"] == "3600000"
    assert by_name["kp-orders"]["configs"]["retention.ms"]["config_source"] == \
        "DYNAMIC_TOPIC_CONFIG"
    assert by_name["kp-defaults"]["num_partitions"] == 1
    assert set(client.list_topics()) >= {"kp-orders", "kp-defaults"}
    described = {t["name"]: t for t in client.describe_topics(["kp-orders"])}
    assert len(described["kp-orders"]["partitions"]) == 3

    configs = describe(client, TOPIC, "kp-orders", include_synonyms=True)
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    # Kafka's synonyms: a topic config without an override shows the broker key it
    # inherits from.
    assert configs["cleanup.policy"]["synonyms"] == [
        {"name": "log.cleanup.policy", "value": "delete", "source": "DEFAULT_CONFIG"}
    ]
    assert configs["segment.bytes"]["config_type"] == "INT"

    client.delete_topics(["kp-orders"])
    assert "kp-orders" not in client.list_topics()


def test_delete_by_topic_id(client: KafkaAdminClient) -> None:
    created = client.create_topics({"kp-by-id": spec()})
    topic_id = uuid.UUID(created["topics"][0]["topic_id"])
    result = client.delete_topics([topic_id])
    assert [(t["name"], t["error_code"]) for t in result["topics"]] == [("kp-by-id", 0)]
    assert "kp-by-id" not in client.list_topics()
    with pytest.raises(kafka_errors.UnknownTopicIdError):
        client.delete_topics([uuid.uuid4()])


def test_create_errors(client: KafkaAdminClient) -> None:
    client.create_topics({"kp-taken": spec()})
    with pytest.raises(kafka_errors.TopicAlreadyExistsError):
        client.create_topics({"kp-taken": spec()})
    result = client.create_topics({
        "kp-taken": spec(),
        "kp bad": spec(),
        "kp-zero": spec(partitions=0),
        "kp-rf": spec(replication=0),
        "kp-config": spec(configs={"min.insync.replicas": "0"}),
        "kp-fine": spec(),
    }, raise_errors=False)
    assert codes(result) == {
        "kp-taken": kafka_errors.TopicAlreadyExistsError.errno,
        "kp bad": kafka_errors.InvalidTopicError.errno,
        "kp-zero": kafka_errors.InvalidPartitionsError.errno,
        "kp-rf": kafka_errors.InvalidReplicationFactorError.errno,
        "kp-config": kafka_errors.InvalidConfigurationError.errno,
        "kp-fine": 0,
    }
    messages = {t["name"]: t["error_message"] for t in result["topics"]}
    assert "min.insync.replicas" in messages["kp-config"]

    # One name twice in one request: Kafka refuses both entries with INVALID_REQUEST.
    result = client.create_topics([NewTopic("kp-twice", 1, 1), NewTopic("kp-twice", 2, 1)],
                                  raise_errors=False)
    assert set(codes(result).values()) == {kafka_errors.InvalidRequestError.errno}
    assert "kp-twice" not in client.list_topics()


def test_validate_only(client: KafkaAdminClient) -> None:
    result = client.create_topics({"kp-dry": spec(2)}, validate_only=True)
    assert codes(result) == {"kp-dry": 0}
    assert result["topics"][0]["num_partitions"] == 2
    assert "kp-dry" not in client.list_topics()


def test_create_partitions(client: KafkaAdminClient) -> None:
    client.create_topics({"kp-grow": spec()})
    client.create_partitions({"kp-grow": 3})
    client.create_partitions({"kp-grow": {"count": 4, "assignments": [[1]]}})
    assert len(client.describe_topics(["kp-grow"])[0]["partitions"]) == 4
    with pytest.raises(kafka_errors.InvalidPartitionsError):
        client.create_partitions({"kp-grow": 2})
    with pytest.raises(kafka_errors.InvalidReplicationAssignmentError):
        client.create_partitions({"kp-grow": {"count": 6, "assignments": [[1]]}})


def test_describe_cluster(client: KafkaAdminClient) -> None:
    cluster = client.describe_cluster()
    assert [b["broker_id"] for b in cluster["brokers"]] == [1]
    assert cluster["controller_id"] == 1
    assert cluster["cluster_id"]


def test_alter_configs(client: KafkaAdminClient) -> None:
    client.create_topics({"kp-tuned": spec(configs={"retention.ms": "60000"})})
    # IncrementalAlterConfigs (kafka-python's default) changes only the named key.
    result = client.alter_configs([ConfigResource(TOPIC, "kp-tuned", {
        "cleanup.policy": ("APPEND", "compact"),
        "max.message.bytes": "2000000",
    })])
    assert result == {"topic": {"kp-tuned": "OK"}}
    configs = describe(client, TOPIC, "kp-tuned")
    assert configs["cleanup.policy"]["value"] == "delete,compact"
    assert configs["max.message.bytes"]["value"] == "2000000"
    assert configs["retention.ms"]["value"] == "60000"

    # The legacy AlterConfigs replaces the whole set of explicit configs; kafka-python
    # resends the other modified ones so that they survive.
    result = client.alter_configs([ConfigResource(TOPIC, "kp-tuned", {"retention.ms": "1000"})],
                                  incremental=False)
    assert result == {"topic": {"kp-tuned": "OK"}}
    modified = client.describe_configs([ConfigResource(TOPIC, "kp-tuned")])["topic"]["kp-tuned"]
    assert {k: v["value"] for k, v in modified.items()} == {
        "retention.ms": "1000", "cleanup.policy": "delete,compact",
        "max.message.bytes": "2000000"}
    client.reset_configs([ConfigResource(TOPIC, "kp-tuned", ["cleanup.policy"])])
    assert describe(client, TOPIC, "kp-tuned")["cleanup.policy"]["value"] == "delete"

    result = client.alter_configs([ConfigResource(TOPIC, "kp-tuned", {"retention.ms": "x"})],
                                  raise_on_unknown=False)
    assert result["topic"]["kp-tuned"].startswith("[Error 40] InvalidConfigurationError")
    result = client.alter_configs(
        [ConfigResource(TOPIC, "kp-tuned", {"segment.ms": "5000"})], validate_only=True)
    assert result == {"topic": {"kp-tuned": "OK"}}
    assert describe(client, TOPIC, "kp-tuned")["segment.ms"]["value"] == "604800000"


def test_broker_configs(client: KafkaAdminClient) -> None:
    configs = describe(client, BROKER, "1", include_synonyms=True)
    assert configs["log.retention.hours"]["synonyms"] == [
        {"name": "log.retention.hours", "value": "168", "source": "DEFAULT_CONFIG"}
    ]
    assert configs["log.dirs"]["read_only"]
    # Only the requested keys when keys are named.
    filtered = client.describe_configs([ConfigResource(BROKER, "1", ["num.partitions"])],
                                       config_filter="all")
    assert set(filtered["broker"]["1"]) == {"num.partitions"}

    result = client.alter_configs([ConfigResource(BROKER, "1", {
        "log.retention.ms": "86400000"})])
    assert result == {"broker": {"1": "OK"}}
    configs = describe(client, BROKER, "1", include_synonyms=True)
    assert configs["log.retention.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
    assert [s["source"] for s in configs["log.retention.ms"]["synonyms"]] == [
        "DYNAMIC_BROKER_CONFIG", "DEFAULT_CONFIG"]
    client.create_topics({"kp-inherits": spec()})
    topic = describe(client, TOPIC, "kp-inherits")
    assert topic["retention.ms"]["value"] == "86400000"
    assert topic["retention.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"

    # A read-only broker key cannot change at runtime: INVALID_REQUEST as on Kafka.
    result = client.alter_configs([ConfigResource(BROKER, "1", {"log.dirs": "/x"})],
                                  raise_on_unknown=False)
    assert result["broker"]["1"].startswith("[Error 42] InvalidRequestError")


def test_restart_keeps_topics_and_configs(broker: EmbeddedBroker) -> None:
    client = _client(broker)
    client.create_topics({"kp-durable": spec(2, configs={"cleanup.policy": "compact"})})
    client.close()
    broker.restart()
    client = _client(broker)
    try:
        assert len(client.describe_topics(["kp-durable"])[0]["partitions"]) == 2
        configs = describe(client, TOPIC, "kp-durable")
        assert configs["cleanup.policy"]["value"] == "compact"
    finally:
        client.close()
