"""The acl plugin over metadata_zk: ACLs kept in ZooKeeper in Kafka's ZooKeeper
authorizer layout (/kafka-acl/<Type>/<name>, /kafka-acl-extended/prefixed/<Type>/<name>),
enforced, deleted, and found again after a restart."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kazoo.client import KazooClient

from kernel.testing.embedded import EmbeddedBroker


def test_acls_live_in_zookeeper_in_kafkas_layout(
        zk_broker_factory: Callable[..., EmbeddedBroker], kazoo: KazooClient,
        tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\nalice:alice-secret\n")
    b = zk_broker_factory(
        {"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"],
         "inter.broker.listener.name": "SASL_PLAINTEXT"},
        plugins=["metadata_zk", "coordinator", "txn", "auth_sasl", "acl"],
        plugin_settings={"auth_sasl": {"plain.users.file": str(users),
                                       "connection.failed.authentication.delay.ms": 0},
                         "acl": {"super.users": "User:admin"}})

    def conf(user: str) -> dict[str, Any]:
        return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user,
                "sasl.password": f"{user}-secret"}

    def alice_writes(topic: str) -> KafkaError | None:
        errors: list[KafkaError | None] = []
        producer = Producer({**conf("alice"), "message.timeout.ms": 10000})
        producer.produce(topic, b"v", on_delivery=lambda err, _: errors.append(err))
        producer.flush(15)
        return errors[0]

    admin = AdminClient(conf("admin"))
    for future in admin.create_topics([NewTopic("zk-orders", 1, 1),
                                       NewTopic("other", 1, 1)]).values():
        future.result(timeout=30)
    literal = AclBinding(ResourceType.TOPIC, "zk-orders", ResourcePatternType.LITERAL,
                         "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    prefixed = AclBinding(ResourceType.GROUP, "zk-", ResourcePatternType.PREFIXED,
                          "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([literal, prefixed]).values():
        future.result(timeout=30)

    data, _ = kazoo.get("/kafka-acl/Topic/zk-orders")
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write",
         "host": "*"}]}
    data, _ = kazoo.get("/kafka-acl-extended/prefixed/Group/zk-")
    assert json.loads(data)["acls"][0]["operation"] == "Read"

    assert alice_writes("zk-orders") is None
    refused = alice_writes("other")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    b.restart()
    admin = AdminClient(conf("admin"))
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert set(admin.describe_acls(everything).result(timeout=30)) == {literal, prefixed}
    futures = admin.delete_acls([everything])
    assert set(futures[everything].result(timeout=30)) == {literal, prefixed}
    assert not kazoo.exists("/kafka-acl/Topic/zk-orders")
    refused = alice_writes("zk-orders")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
