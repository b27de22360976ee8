"""Admin APIs through confluent-kafka's AdminClient (librdkafka) and kcat, over real
sockets against an embedded broker."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from kernel.testing.embedded import EmbeddedBroker

TIMEOUT = 10.0


def admin(broker: EmbeddedBroker) -> AdminClient:
    return AdminClient({
        "bootstrap.servers": broker.bootstrap,
        "socket.timeout.ms": 5000,
        "reconnect.backoff.max.ms": 200,
        "log_level": 3,
    })


def error_of(future: Future[Any]) -> int:
    """The Kafka error code a failed admin future carries."""
    with pytest.raises(KafkaException) as raised:
        future.result(TIMEOUT)
    error = raised.value.args[0]
    assert isinstance(error, KafkaError)
    return error.code()


def create(client: AdminClient, *topics: NewTopic, validate_only: bool = False) -> None:
    for future in client.create_topics(list(topics), operation_timeout=5,
                                       request_timeout=TIMEOUT,
                                       validate_only=validate_only).values():
        future.result(TIMEOUT)


def topic_configs(client: AdminClient, name: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    return client.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)


def user_topics(names: Iterable[str]) -> set[str]:
    """Topics other than internal ones (a coordinator plugin may add __consumer_offsets)."""
    return {n for n in names if not n.startswith("__")}


def kcat_topics(bootstrap: str) -> dict[str, int]:
    out = subprocess.run(["kcat", "-L", "-b", bootstrap, "-m", "5"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return {m[0]: int(m[1]) for m in re.findall(r'topic "([^"]+)" with (\d+) partitions', out)}


def test_create_list_describe_delete(broker: EmbeddedBroker) -> None:
    client = admin(broker)
    create(client, NewTopic("orders", 3, 1, config={"cleanup.policy": "compact"}),
           NewTopic("defaults"))  # -1/-1: the broker's num.partitions and replication
    listed = client.list_topics(timeout=TIMEOUT).topics
    assert len(listed["orders"].partitions) == 3
    assert len(listed["defaults"].partitions) == 1
    assert listed["orders"].partitions[0].replicas == [1]

    configs = topic_configs(client, "orders")
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not configs["retention.ms"].is_read_only

    for future in client.delete_topics(["orders"], operation_timeout=5,
                                       request_timeout=TIMEOUT).values():
        future.result(TIMEOUT)
    assert "orders" not in client.list_topics(timeout=TIMEOUT).topics
    assert error_of(client.delete_topics(["orders"], request_timeout=TIMEOUT)["orders"]) \
        == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_errors(broker: EmbeddedBroker) -> None:
    client = admin(broker)
    create(client, NewTopic("taken", 1, 1))
    futures = client.create_topics([
        NewTopic("taken", 1, 1),
        NewTopic("bad/name", 1, 1),
        NewTopic("zero", 0, 1),
        NewTopic("too-replicated", 1, 3),
        NewTopic("bad-config", 1, 1, config={"retention.ms": "soon"}),
        NewTopic("unknown-config", 1, 1, config={"no.such.config": "1"}),
        NewTopic("ok.topic", 1, 1),
    ], request_timeout=TIMEOUT)
    assert error_of(futures["taken"]) == KafkaError.TOPIC_ALREADY_EXISTS
    assert error_of(futures["bad/name"]) == KafkaError.TOPIC_EXCEPTION
    assert error_of(futures["zero"]) == KafkaError.INVALID_PARTITIONS
    assert error_of(futures["too-replicated"]) == KafkaError.INVALID_REPLICATION_FACTOR
    assert error_of(futures["bad-config"]) == KafkaError.INVALID_CONFIG
    assert error_of(futures["unknown-config"]) == KafkaError.INVALID_CONFIG
    futures["ok.topic"].result(TIMEOUT)
    # '.' and '_' collide in metric names, so Kafka refuses the second spelling.
    collide = client.create_topics([NewTopic("ok_topic", 1, 1)], request_timeout=TIMEOUT)
    assert error_of(collide["ok_topic"]) == KafkaError.TOPIC_EXCEPTION
    assert user_topics(client.list_topics(timeout=TIMEOUT).topics) == {"taken", "ok.topic"}


def test_validate_only_and_manual_assignment(broker: EmbeddedBroker) -> None:
    client = admin(broker)
    create(client, NewTopic("dry", 4, 1), validate_only=True)
    assert "dry" not in client.list_topics(timeout=TIMEOUT).topics
    create(client, NewTopic("placed", 2, replica_assignment=[[1], [1]]))
    assert len(client.list_topics(timeout=TIMEOUT).topics["placed"].partitions) == 2
    futures = client.create_topics([NewTopic("nowhere", 1, replica_assignment=[[7]])],
                                   request_timeout=TIMEOUT)
    assert error_of(futures["nowhere"]) == KafkaError.INVALID_REPLICA_ASSIGNMENT


def test_create_partitions(broker: EmbeddedBroker) -> None:
    client = admin(broker)
    create(client, NewTopic("grow", 2, 1))
    for future in client.create_partitions([NewPartitions("grow", 5)], validate_only=True,
                                           request_timeout=TIMEOUT).values():
        future.result(TIMEOUT)
    assert len(client.list_topics(timeout=TIMEOUT).topics["grow"].partitions) == 2
    for future in client.create_partitions([NewPartitions("grow", 4, [[1], [1]])],
                                           request_timeout=TIMEOUT).values():
        future.result(TIMEOUT)
    assert len(client.list_topics(timeout=TIMEOUT).topics["grow"].partitions) == 4
    shrink = client.create_partitions([NewPartitions("grow", 3)], request_timeout=TIMEOUT)
    assert error_of(shrink["grow"]) == KafkaError.INVALID_PARTITIONS
    same = client.create_partitions([NewPartitions("grow", 4)], request_timeout=TIMEOUT)
    assert error_of(same["grow"]) == KafkaError.INVALID_PARTITIONS
    missing = client.create_partitions([NewPartitions("absent", 2)], request_timeout=TIMEOUT)
    assert error_of(missing["absent"]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster_and_topics(broker: EmbeddedBroker) -> None:
    from confluent_kafka import TopicCollection

    client = admin(broker)
    create(client, NewTopic("described", 2, 1))
    cluster = client.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT)
    assert [n.id for n in cluster.nodes] == [1]
    assert cluster.controller.id == 1
    assert cluster.cluster_id
    topic = client.describe_topics(TopicCollection(["described"]),
                                   request_timeout=TIMEOUT)["described"].result(TIMEOUT)
    assert len(topic.partitions) == 2


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_incremental_and_legacy_alter_configs(broker: EmbeddedBroker) -> None:
    client = admin(broker)
    create(client, NewTopic("tuned", 1, 1))
    resource = ConfigResource(ResourceType.TOPIC, "tuned", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
    ])
    client.incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource] \
        .result(TIMEOUT)
    configs = topic_configs(client, "tuned")
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    resource = ConfigResource(ResourceType.TOPIC, "tuned", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    client.incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource] \
        .result(TIMEOUT)
    configs = topic_configs(client, "tuned")
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # APPEND is for list-typed configs only.
    bad = ConfigResource(ResourceType.TOPIC, "tuned", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND),
    ])
    assert error_of(client.incremental_alter_configs([bad], request_timeout=TIMEOUT)[bad]) \
        == KafkaError.INVALID_CONFIG

    # The legacy AlterConfigs replaces every explicit config: cleanup.policy goes back.
    legacy = ConfigResource(ResourceType.TOPIC, "tuned", set_config={"segment.ms": "60000"})
    client.alter_configs([legacy], request_timeout=TIMEOUT)[legacy].result(TIMEOUT)
    configs = topic_configs(client, "tuned")
    assert configs["segment.ms"].value == "60000"
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value

    missing = ConfigResource(ResourceType.TOPIC, "absent", set_config={"segment.ms": "1"})
    assert error_of(client.alter_configs([missing], request_timeout=TIMEOUT)[missing]) \
        == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_broker_configs(broker_factory: Callable[..., EmbeddedBroker]) -> None:
    b = broker_factory({"log.retention.hours": 24})
    client = admin(b)
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = client.describe_configs([resource], request_timeout=TIMEOUT)[resource] \
        .result(TIMEOUT)
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.source) == ("24", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert configs["log.dirs"].is_read_only
    assert not configs["num.partitions"].is_read_only

    change = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET),
    ])
    client.incremental_alter_configs([change], request_timeout=TIMEOUT)[change].result(TIMEOUT)
    configs = client.describe_configs([resource], request_timeout=TIMEOUT)[resource] \
        .result(TIMEOUT)
    assert configs["num.partitions"].value == "3"
    assert configs["num.partitions"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    # New topics with -1 partitions take the dynamic default.
    create(client, NewTopic("three"))
    assert len(client.list_topics(timeout=TIMEOUT).topics["three"].partitions) == 3

    static = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET),
    ])
    assert error_of(client.incremental_alter_configs([static], request_timeout=TIMEOUT)[
        static]) == KafkaError.INVALID_REQUEST


def test_restart_keeps_topics_and_configs(broker: EmbeddedBroker) -> None:
    client = admin(broker)
    create(client, NewTopic("durable", 2, 1, config={"retention.ms": "1234"}))
    change = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.bytes", "1000000", incremental_operation=AlterConfigOpType.SET),
    ])
    client.incremental_alter_configs([change], request_timeout=TIMEOUT)[change].result(TIMEOUT)
    broker.restart()
    client = admin(broker)
    assert len(client.list_topics(timeout=TIMEOUT).topics["durable"].partitions) == 2
    configs = topic_configs(client, "durable")
    assert configs["retention.ms"].value == "1234"
    assert configs["retention.bytes"].value == "1000000"
    assert configs["retention.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value


def test_topic_deletion_disabled(broker_factory: Callable[..., EmbeddedBroker]) -> None:
    b = broker_factory({"delete.topic.enable": False})
    client = admin(b)
    create(client, NewTopic("kept", 1, 1))
    futures = client.delete_topics(["kept"], request_timeout=TIMEOUT)
    assert error_of(futures["kept"]) == KafkaError.TOPIC_DELETION_DISABLED
    assert "kept" in client.list_topics(timeout=TIMEOUT).topics


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_lists_topics(broker: EmbeddedBroker) -> None:
    client = admin(broker)
    create(client, NewTopic("seen-by-kcat", 3, 1), NewTopic("other", 1, 1))
    listed = kcat_topics(broker.bootstrap)
    assert {t: n for t, n in listed.items() if t in user_topics(listed)} == \
        {"seen-by-kcat": 3, "other": 1}
