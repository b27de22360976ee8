"""Admin APIs through aiokafka's AIOKafkaAdminClient over real sockets. aiokafka speaks
older versions than the other clients (CreateTopics v3, DeleteTopics v3, DescribeConfigs
v2, AlterConfigs v1, CreatePartitions v1), so these tests cover those versions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidPartitionsError
from kio.schema.errors import ErrorCode

from kernel.testing.embedded import EmbeddedBroker

T = TypeVar("T")
TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER


def run(broker: EmbeddedBroker, body: Callable[[AIOKafkaAdminClient], Awaitable[T]]) -> T:
    async def main() -> T:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap,
                                    request_timeout_ms=5000)
        await admin.start()
        try:
            return await body(admin)
        finally:
            await admin.close()

    return asyncio.run(main())


def configs_of(responses: list[Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """resource name -> config name -> entry, from DescribeConfigs responses."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for response in responses:
        for resource in response.to_object()["resources"]:
            assert resource["error_code"] == 0, resource
            found[resource["resource_name"]] = {
                e["config_names"]: e for e in resource["config_entries"]
            }
    return found


def test_create_list_describe_delete(broker: EmbeddedBroker) -> None:
    async def body(admin: AIOKafkaAdminClient) -> None:
        created = await admin.create_topics([
            NewTopic("aio-events", 2, 1, topic_configs={"cleanup.policy": "compact"}),
            NewTopic("aio-manual", -1, -1, replica_assignments={0: [1], 1: [1], 2: [1]}),
            NewTopic("aio-taken", 1, 1),
        ])
        assert {t[0]: t[1] for t in created.topic_errors} == {
            "aio-events": 0, "aio-manual": 0, "aio-taken": 0}
        again = await admin.create_topics([NewTopic("aio-taken", 1, 1),
                                           NewTopic("aio-bad!", 1, 1),
                                           NewTopic("aio-rf", 1, 2)])
        assert {t[0]: t[1] for t in again.topic_errors} == {
            "aio-taken": ErrorCode.topic_already_exists,
            "aio-bad!": ErrorCode.invalid_topic_exception,
            "aio-rf": ErrorCode.invalid_replication_factor,
        }
        # Internal topics (a coordinator plugin's __consumer_offsets) aside.
        listed = {t for t in await admin.list_topics() if not t.startswith("__")}
        assert listed == {"aio-events", "aio-manual", "aio-taken"}
        described = {t["topic"]: t for t in await admin.describe_topics(["aio-manual"])}
        assert len(described["aio-manual"]["partitions"]) == 3
        cluster = await admin.describe_cluster()
        assert [b["node_id"] for b in cluster["brokers"]] == [1]

        deleted = await admin.delete_topics(["aio-events", "aio-missing"])
        assert dict(deleted.topic_error_codes) == {
            "aio-events": 0, "aio-missing": ErrorCode.unknown_topic_or_partition}
        assert "aio-events" not in await admin.list_topics()

    run(broker, body)


def test_describe_and_alter_configs(broker: EmbeddedBroker) -> None:
    async def body(admin: AIOKafkaAdminClient) -> None:
        await admin.create_topics([NewTopic("aio-conf", 1, 1,
                                            topic_configs={"retention.ms": "5000"})])
        described = configs_of(await admin.describe_configs(
            [ConfigResource(TOPIC, "aio-conf"), ConfigResource(BROKER, "1")],
            include_synonyms=True))
        retention = described["aio-conf"]["retention.ms"]
        assert (retention["config_value"], retention["config_source"]) == ("5000", 1)
        assert described["1"]["log.segment.bytes"]["config_value"] == "1073741824"
        assert described["1"]["broker.id"]["read_only"]

        # AlterConfigs replaces the topic's explicit configs with exactly these.
        altered = await admin.alter_configs([
            ConfigResource(TOPIC, "aio-conf", {"segment.ms": "100000"}),
            ConfigResource(TOPIC, "aio-absent", {"segment.ms": "100000"}),
        ])
        answers = {r[3]: r[0] for resp in altered for r in resp.resources}
        assert answers == {"aio-conf": 0, "aio-absent": ErrorCode.unknown_topic_or_partition}
        described = configs_of(await admin.describe_configs(
            [ConfigResource(TOPIC, "aio-conf", {"segment.ms": None, "retention.ms": None})]))
        assert {k: (v["config_value"], v["config_source"])
                for k, v in described["aio-conf"].items()} == {
            "segment.ms": ("100000", 1), "retention.ms": ("604800000", 5)}

        altered = await admin.alter_configs([ConfigResource(BROKER, "1", {
            "log.retention.bytes": "5000000"})])
        assert [r[0] for resp in altered for r in resp.resources] == [0]
        described = configs_of(await admin.describe_configs([
            ConfigResource(TOPIC, "aio-conf", {"retention.bytes": None})]))
        entry = described["aio-conf"]["retention.bytes"]
        assert (entry["config_value"], entry["config_source"]) == ("5000000", 2)

    run(broker, body)


def test_create_partitions(broker: EmbeddedBroker) -> None:
    async def body(admin: AIOKafkaAdminClient) -> None:
        await admin.create_topics([NewTopic("aio-grow", 1, 1)])
        await admin.create_partitions({"aio-grow": NewPartitions(3)})
        await admin.create_partitions({"aio-grow": NewPartitions(5)}, validate_only=True)
        described = {t["topic"]: t for t in await admin.describe_topics(["aio-grow"])}
        assert len(described["aio-grow"]["partitions"]) == 3
        with pytest.raises(InvalidPartitionsError):
            await admin.create_partitions({"aio-grow": NewPartitions(2)})

    run(broker, body)


def test_restart_keeps_topics_and_configs(broker: EmbeddedBroker) -> None:
    async def create(admin: AIOKafkaAdminClient) -> None:
        await admin.create_topics([NewTopic("aio-durable", 3, 1,
                                            topic_configs={"max.message.bytes": "64000"})])

    async def check(admin: AIOKafkaAdminClient) -> None:
        described = {t["topic"]: t for t in await admin.describe_topics(["aio-durable"])}
        assert len(described["aio-durable"]["partitions"]) == 3
        configs = configs_of(await admin.describe_configs(
            [ConfigResource(TOPIC, "aio-durable")]))
        assert configs["aio-durable"]["max.message.bytes"]["config_value"] == "64000"

    run(broker, create)
    broker.restart()
    run(broker, check)
