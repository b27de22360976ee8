"""A broker on metadata_zk against a real ZooKeeper: clients are served as on the
embedded metadata (produce/consume, groups, transactions, whose internal topics live
in ZooKeeper too), the znodes hold what Kafka 3.x wrote, state survives a restart, and
the controller processes topic deletion and re-registers after a session expiry."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient

from kernel.cluster import NewTopic as NewTopicSpec
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.testing.embedded import EmbeddedBroker
from plugins.metadata_zk.znodes import uuid_to_kafka
from tests import zookeeper as zookeeper_launcher
from tests.zk import wait_until as _wait

BROKER_ID = 1  # EmbeddedBroker's default broker.id


def _json(kazoo: KazooClient, path: str) -> Any:
    data, _ = kazoo.get(path)
    return json.loads(data)


def _create_topic(b: EmbeddedBroker, name: str, partitions: int = 1,
                  config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    futures[name].result(timeout=30)


def _set_configs(admin: AdminClient, kind: str, name: str, configs: dict[str, str]) -> None:
    resource = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def _produce(bootstrap: str, topic: str, values: list[bytes], **conf: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(30) == 0


def _consume(bootstrap: str, topic: str, n: int, group: str | None = None,
             **conf: Any) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                         "group.id": group or f"g-{uuid.uuid4().hex[:8]}", **conf})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(msg.value())
    if group is not None:
        consumer.commit(asynchronous=False)
    consumer.close()
    return seen


def test_clients_are_served_with_groups_and_transactions(zk_broker: EmbeddedBroker) -> None:
    b = zk_broker
    values = [f"m{i}".encode() for i in range(20)]
    _produce(b.bootstrap, "plain", values, **{"enable.idempotence": True})
    assert _consume(b.bootstrap, "plain", 20, group="readers") == values

    # The group's committed offsets are read back from __consumer_offsets.
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "readers"})
    committed = consumer.committed([TopicPartition("plain", 0)], timeout=15)
    consumer.close()
    assert committed[0].offset == 20

    producer = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-1"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn", b"committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("txn", b"aborted")
    producer.abort_transaction(30)
    assert _consume(b.bootstrap, "txn", 1, **{"isolation.level": "read_committed"}) == [
        b"committed"]
    assert {"__consumer_offsets", "__transaction_state"} <= set(b.broker.metadata.image.topics)


def test_znodes_have_kafkas_content(zk_broker: EmbeddedBroker, kazoo: KazooClient) -> None:
    b = zk_broker
    _create_topic(b, "orders", 2, {"retention.ms": "12345"})
    image = b.broker.metadata.image
    topic = image.topics["orders"]

    registration = _json(kazoo, f"/brokers/ids/{BROKER_ID}")
    host, port = b.bootstrap.rsplit(":", 1)
    assert registration["version"] == 5
    assert registration["endpoints"] == [f"PLAINTEXT://{host}:{port}"]
    assert registration["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert (registration["host"], registration["port"]) == (host, int(port))
    assert kazoo.exists(f"/brokers/ids/{BROKER_ID}").ephemeralOwner != 0

    controller = _json(kazoo, "/controller")
    assert controller["brokerid"] == BROKER_ID and controller["version"] == 2
    assert kazoo.exists("/controller").ephemeralOwner != 0
    assert int(kazoo.get("/controller_epoch")[0]) >= 1
    assert _json(kazoo, "/cluster/id") == {"version": "1", "id": image.cluster_id}

    assert _json(kazoo, "/brokers/topics/orders") == {
        "version": 3, "partitions": {"0": [BROKER_ID], "1": [BROKER_ID]},
        "adding_replicas": {}, "removing_replicas": {},
        "topic_id": uuid_to_kafka(topic.topic_id)}
    for p in (0, 1):
        state = _json(kazoo, f"/brokers/topics/orders/partitions/{p}/state")
        assert state["leader"] == BROKER_ID and state["isr"] == [BROKER_ID]
        assert state["leader_epoch"] == 0 and state["version"] == 1
        assert state["controller_epoch"] == int(kazoo.get("/controller_epoch")[0])
    assert _json(kazoo, "/config/topics/orders") == {
        "version": 1, "config": {"retention.ms": "12345"}}

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    _set_configs(admin, "TOPIC", "orders", {"retention.ms": "999"})
    assert _json(kazoo, "/config/topics/orders")["config"] == {"retention.ms": "999"}
    changes = [_json(kazoo, f"/config/changes/{c}")
               for c in sorted(kazoo.get_children("/config/changes"))]
    assert {"version": 2, "entity_path": "topics/orders"} in changes

    admin.create_partitions([NewPartitions("orders", 3)])["orders"].result(timeout=30)
    assert set(_json(kazoo, "/brokers/topics/orders")["partitions"]) == {"0", "1", "2"}
    assert kazoo.exists("/brokers/topics/orders/partitions/2/state")
    assert len(b.broker.metadata.image.topics["orders"].partitions) == 3

    # An idempotent producer's id comes from a block in /latest_producer_id_block.
    _produce(b.bootstrap, "orders", [b"x"], **{"enable.idempotence": True})
    block = _json(kazoo, "/latest_producer_id_block")
    assert block["version"] == 1 and block["broker"] == BROKER_ID
    assert int(block["block_end"]) - int(block["block_start"]) == 999


def test_topics_configs_and_scram_users_survive_a_restart(
        zk_broker_factory: Callable[..., EmbeddedBroker], kazoo: KazooClient,
        tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\n")
    b = zk_broker_factory(
        {"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"],
         "inter.broker.listener.name": "SASL_PLAINTEXT"},
        plugins=["metadata_zk", "coordinator", "txn", "auth_sasl"],
        plugin_settings={"auth_sasl": {"plain.users.file": str(users),
                                       "connection.failed.authentication.delay.ms": 0}})

    def client(mechanism: str, user: str, password: str) -> dict[str, Any]:
        return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": password}

    admin = AdminClient(client("PLAIN", "admin", "admin-secret"))
    admin.create_topics([NewTopic("kept", 2, 1, config={"retention.ms": "86400000"})]
                        )["kept"].result(timeout=30)
    upsert = UserScramCredentialUpsertion(
        "alice smith", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"wonder")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    _set_configs(admin, "BROKER", str(BROKER_ID), {"log.retention.ms": "7200000"})
    before = b.broker.metadata.image.topics["kept"]
    _produce(b.bootstrap, "kept", [b"before"], partitioner="murmur2_random",
             **client("PLAIN", "admin", "admin-secret"))
    # Kafka's sanitized user name and ScramCredentialUtils format.
    user_config = _json(kazoo, "/config/users/alice%20smith")["config"]
    assert set(user_config) == {"SCRAM-SHA-256"}
    assert user_config["SCRAM-SHA-256"].startswith("salt=")
    assert user_config["SCRAM-SHA-256"].endswith(",iterations=4096")
    assert _json(kazoo, f"/config/brokers/{BROKER_ID}")["config"] == {
        "log.retention.ms": "7200000"}

    b.restart()
    alice = client("SCRAM-SHA-256", "alice smith", "wonder")
    _produce(b.bootstrap, "kept", [b"after"], **alice)
    assert sorted(_consume(b.bootstrap, "kept", 2, **alice)) == [b"after", b"before"]
    after = b.broker.metadata.image.topics["kept"]
    assert after.topic_id == before.topic_id
    assert len(after.partitions) == 2
    assert dict(after.configs) == {"retention.ms": "86400000"}
    assert b.broker.metadata.image.broker_configs[BROKER_ID] == {
        "log.retention.ms": "7200000"}
    assert b.broker.config.log_retention_ms == 7200000


def test_the_chroot_path_is_created_and_holds_everything(
        zookeeper: Any, zk_broker_factory: Callable[..., EmbeddedBroker]) -> None:
    chroot = f"/deep/{uuid.uuid4().hex[:8]}/kafka"
    b = zk_broker_factory(zk={"zookeeper.connect": zookeeper.connect + chroot})
    _create_topic(b, "rooted")
    root = KazooClient(hosts=zookeeper.connect)
    root.start(timeout=30)
    try:
        assert root.exists(f"{chroot}/brokers/topics/rooted")
        assert root.exists(f"{chroot}/brokers/ids/{BROKER_ID}")
        assert not root.exists("/brokers/topics/rooted")
    finally:
        root.stop()
        root.close()


def test_deleted_topics_go_through_admin_delete_topics(
        zk_broker: EmbeddedBroker, kazoo: KazooClient) -> None:
    b = zk_broker
    _create_topic(b, "doomed", 2, {"retention.ms": "1000"})
    _produce(b.bootstrap, "doomed", [b"a", b"b"])
    old_id = b.broker.metadata.image.topics["doomed"].topic_id
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(timeout=30)
    assert "doomed" not in b.broker.metadata.image.topics
    assert not kazoo.exists("/brokers/topics/doomed")
    assert not kazoo.exists("/config/topics/doomed")
    assert kazoo.get_children("/admin/delete_topics") == []

    # Created again: a new topic, empty.
    _create_topic(b, "doomed")
    assert b.broker.metadata.image.topics["doomed"].topic_id != old_id
    _produce(b.bootstrap, "doomed", [b"fresh"])
    assert _consume(b.bootstrap, "doomed", 1) == [b"fresh"]


def test_a_deletion_written_to_zookeeper_is_processed_by_the_controller(
        zk_broker: EmbeddedBroker, kazoo: KazooClient) -> None:
    """As kafka-topics --zookeeper did: the request znode alone deletes the topic."""
    b = zk_broker
    _create_topic(b, "by-znode")
    kazoo.create("/admin/delete_topics/by-znode")
    _wait(lambda: "by-znode" not in b.broker.metadata.image.topics, "the deletion")
    assert not kazoo.exists("/brokers/topics/by-znode")
    assert not kazoo.exists("/admin/delete_topics/by-znode")


def test_a_topic_written_to_zookeeper_gets_its_partition_state(
        zk_broker: EmbeddedBroker, kazoo: KazooClient) -> None:
    """A topic znode without a topic id (as a Kafka before 2.8 wrote it): the controller
    gives it an id and its partitions a leader, and clients can use it."""
    b = zk_broker
    kazoo.create("/brokers/topics/legacy", json.dumps(
        {"version": 1, "partitions": {"0": [BROKER_ID]}}).encode())
    topic = _wait(lambda: b.broker.metadata.image.topics.get("legacy"), "the topic")
    assert _json(kazoo, "/brokers/topics/legacy")["topic_id"] == uuid_to_kafka(topic.topic_id)
    assert topic.partitions[0].leader == BROKER_ID
    _produce(b.bootstrap, "legacy", [b"old"])
    assert _consume(b.bootstrap, "legacy", 1) == [b"old"]


def test_session_expiry_registers_again_and_recontends(
        zk_broker: EmbeddedBroker, kazoo: KazooClient, zk_connect: str) -> None:
    b = zk_broker
    _create_topic(b, "steady")
    epoch = int(kazoo.get("/controller_epoch")[0])
    czxid = kazoo.exists(f"/brokers/ids/{BROKER_ID}").czxid
    backend: Any = b.broker.metadata
    session_id, password = backend._zk.kazoo.client_id
    # ZooKeeper expires a session when another client takes it over and closes it.
    thief = KazooClient(hosts=zk_connect, client_id=(session_id, password))
    thief.start(timeout=30)
    thief.stop()
    thief.close()

    _wait(lambda: (s := kazoo.exists(f"/brokers/ids/{BROKER_ID}")) is not None
          and s.czxid != czxid, "the broker to register again")
    _wait(lambda: int(kazoo.get("/controller_epoch")[0]) == epoch + 1,
          "the controller to be elected again")
    assert _json(kazoo, "/controller")["brokerid"] == BROKER_ID
    _wait(lambda: b.broker.metadata.image.controller_id == BROKER_ID, "the image")
    _produce(b.bootstrap, "steady", [b"still"])
    assert _consume(b.bootstrap, "steady", 1) == [b"still"]
    state = _json(kazoo, "/brokers/topics/steady/partitions/0/state")
    assert state["leader"] == BROKER_ID and state["isr"] == [BROKER_ID]


def test_unknown_topic_and_invalid_requests_keep_kafkas_errors(
        zk_broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": zk_broker.bootstrap})
    _create_topic(zk_broker, "once")
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic("once", 1, 1)])["once"].result(timeout=30)
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        admin.create_topics([NewTopic("wide", 1, 3)])["wide"].result(timeout=30)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        admin.delete_topics(["never"])["never"].result(timeout=30)


@pytest.fixture
def own_zookeeper() -> Any:
    """A ZooKeeper of this test alone, to stop and restart."""
    zk = zookeeper_launcher.start()
    yield zk
    zk.stop()


def test_a_zookeeper_restart_leaves_the_broker_serving(
        own_zookeeper: Any, zk_broker_factory: Callable[..., EmbeddedBroker]) -> None:
    zk = own_zookeeper
    b = zk_broker_factory(zk={"zookeeper.connect": zk.connect + "/kafka",
                              "zookeeper.session.timeout.ms": 10000})
    _create_topic(b, "through")
    _produce(b.bootstrap, "through", [b"before"])
    epoch = b.broker.metadata.image.topics["through"].partitions[0].leader_epoch

    zk.kill()
    # The image it has keeps the broker serving the topics it knows.
    _produce(b.bootstrap, "through", [b"during"])
    assert _consume(b.bootstrap, "through", 2) == [b"before", b"during"]
    zk.restart()

    _create_topic(b, "after")  # the session, its watches and the controller carry on
    _produce(b.bootstrap, "after", [b"x"])
    assert _consume(b.bootstrap, "after", 1) == [b"x"]
    assert b.broker.metadata.image.topics["through"].partitions[0].leader_epoch == epoch
    assert b.broker.metadata.image.controller_id == BROKER_ID


def test_leader_isr_changes_and_the_controller_electing_from_the_isr(
        zk_broker_factory: Callable[..., EmbeddedBroker], kazoo: KazooClient) -> None:
    """Metadata only (no replication yet): a leader's ISR change is a conditional write
    of the state znode, announced under /isr_change_notification, which the controller
    consumes; when a leader's broker goes, the controller moves leadership within the
    ISR and bumps the leader epoch."""
    b = zk_broker_factory()
    other = zk_broker_factory({"broker.id": 2})
    backend: Any = b.broker.metadata
    _wait(lambda: set(backend.image.brokers) == {1, 2}, "both brokers")
    b.call(backend.create_topics([NewTopicSpec("shared", 0, 0, assignments={
        0: (1, 2), 1: (2, 1)})]))
    p0 = backend.image.partition("shared", 0)
    assert (p0.leader, p0.isr, p0.partition_epoch) == (1, (1, 2), 0)

    with pytest.raises(KafkaError) as stale:
        b.call(backend.alter_partition("shared", 0, (1,), p0.leader_epoch, 7))
    assert stale.value.error_code == ErrorCode.invalid_update_version
    shrunk = b.call(backend.alter_partition("shared", 0, (1,), p0.leader_epoch, 0))
    assert (shrunk.isr, shrunk.partition_epoch, shrunk.leader_epoch) == ((1,), 1, 0)
    assert _json(kazoo, "/brokers/topics/shared/partitions/0/state")["isr"] == [1]
    _wait(lambda: kazoo.get_children("/isr_change_notification") == [],
          "the controller to consume the notification")

    other.stop()
    p1 = _wait(lambda: (p := backend.image.partition("shared", 1)).leader == 1 and p,
               "partition 1 to move to broker 1")
    assert (p1.isr, p1.leader_epoch, p1.offline_replicas) == ((1,), 1, (2,))
    assert backend.image.partition("shared", 0).isr == (1,)
