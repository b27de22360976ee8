"""``kafkernel metadata migrate``: a metadata_zk broker with data, stopped, migrated, and
started again on the same data dirs as a metadata_kraft single node. Records, a group's
committed offsets, topic ids, configs, ACLs, a SCRAM login, a quota and the producer id
block all carry over. Real ZooKeeper, real broker processes, real clients."""

from __future__ import annotations

import base64
import datetime
import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from kernel.cli import main
from tests import zookeeper as zookeeper_launcher
from tests.broker_process import BrokerProcess, free_port
from tests.integration.wire import request
from tests.reference.test_conformance_quotas import EXACT, USER, alter, describe

PLUGINS = ["coordinator", "txn", "auth_sasl", "acl"]
ACL = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:carol",
                 "*", AclOperation.READ, AclPermissionType.ALLOW)
QUOTA = ((("user", "carol"),), [("producer_byte_rate", 2048.0)])


def _config(workdir: Path, port: int, sasl_port: int, metadata: str, extra: str) -> Path:
    users = workdir / "users"
    users.write_text("admin:admin-secret\n")
    enabled = ", ".join(f'"{p}"' for p in [metadata, *PLUGINS])
    path = workdir / f"{metadata}.toml"
    path.write_text(textwrap.dedent(f"""
        listeners = ["PLAINTEXT://127.0.0.1:{port}", "SASL_PLAINTEXT://127.0.0.1:{sasl_port}"]
        log.dirs = "{workdir / 'data'}"
        logging.format = "json"
        [plugins]
        enabled = [{enabled}]
        [plugins.coordinator]
        "offsets.topic.num.partitions" = 1
        [plugins.auth_sasl]
        "plain.users.file" = "{users}"
        "connection.failed.authentication.delay.ms" = 0
        [plugins.acl]
        "super.users" = "User:admin;User:ANONYMOUS"
    """) + extra)
    return path


def _broker(workdir: Path, config: Path, port: int) -> BrokerProcess:
    b = BrokerProcess(workdir, port=port)
    b.args[b.args.index("--config") + 1] = str(config)
    return b


def _scram(sasl: str) -> dict[str, Any]:
    return {"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
            "sasl.password": "carol-secret"}


@pytest.fixture(scope="module")
def migrated(zookeeper: zookeeper_launcher.ZooKeeper, tmp_path_factory: pytest.TempPathFactory,
             ) -> Iterator[dict[str, Any]]:
    """The ZooKeeper-mode broker's data, what it left in ZooKeeper, the migration's
    output, and the KRaft node started on the same dirs."""
    workdir = tmp_path_factory.mktemp("migrate")
    connect = zookeeper.connect + "/migrate-test"
    port, sasl_port = free_port(), free_port()
    zk_config = _config(workdir, port, sasl_port, "metadata_zk",
                        f'[plugins.metadata_zk]\n"zookeeper.connect" = "{connect}"\n')
    kraft_config = _config(workdir, port, sasl_port, "metadata_kraft", "")
    bootstrap = f"127.0.0.1:{port}"
    out: dict[str, Any] = {"connect": connect, "kraft_config": kraft_config,
                           "bootstrap": bootstrap, "sasl": f"127.0.0.1:{sasl_port}"}

    zk_broker = _broker(workdir, zk_config, port).start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic("orders", 1, 1,
                                               config={"retention.ms": "1234567"}),
                                      NewTopic("other", 1, 1)]).values():
            f.result(timeout=30)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(10):
            producer.produce("orders", f"v{i}".encode())
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g1",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([TopicPartition("orders", 0, 0)])
        got = [consumer.poll(10) for _ in range(5)]
        assert [m.value() for m in got if m is not None] == [f"v{i}".encode() for i in range(5)]
        consumer.commit(offsets=[TopicPartition("orders", 0, 5)], asynchronous=False)
        consumer.close()
        upsert = UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-secret")
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(timeout=30)
        broker_config = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("num.partitions", "3",
                        incremental_operation=AlterConfigOpType.SET)])
        for f in admin.incremental_alter_configs([broker_config]).values():
            f.result(timeout=30)
        for f in admin.create_acls([ACL]).values():
            f.result(timeout=30)
        assert alter(bootstrap, [QUOTA])[0][1] == 0
        # The migration is refused while the broker is registered.
        out["refused_live"] = main(["metadata", "migrate", "--zookeeper-connect", connect,
                                    "--config", str(kraft_config)])
    finally:
        assert zk_broker.stop() == 0
    zk = KazooClient(hosts=connect)
    zk.start(timeout=30)
    try:
        topic = json.loads(zk.get("/brokers/topics/orders")[0])
        out["topic_id"] = uuid.UUID(bytes=base64.urlsafe_b64decode(topic["topic_id"] + "=="))
        out["block_end"] = int(json.loads(zk.get("/latest_producer_id_block")[0])["block_end"])
    finally:
        zk.stop()
        zk.close()

    out["rc"] = main(["metadata", "migrate", "--zookeeper-connect", connect,
                      "--config", str(kraft_config)])
    out["meta"] = (workdir / "data" / "meta.properties").read_text()
    out["again"] = main(["metadata", "migrate", "--zookeeper-connect", connect,
                         "--config", str(kraft_config)])
    kraft = _broker(workdir, kraft_config, port).start()
    out["kraft"] = kraft
    yield out
    kraft.stop()
    assert kraft.problems() == []


def test_migrate_refuses_live_brokers_and_an_existing_log(migrated: dict[str, Any]) -> None:
    assert migrated["refused_live"] == 1
    assert migrated["rc"] == 0
    assert migrated["again"] == 1  # the KRaft log it wrote is not overwritten
    meta = migrated["meta"]
    assert "version=1" in meta and "node.id=1" in meta and "directory.id=" in meta
    assert "broker.id" not in meta


def test_migrate_refuses_a_missing_zookeeper(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    rc = main(["metadata", "migrate", "--zookeeper-connect", f"127.0.0.1:{port}",
               "--zookeeper-timeout-ms", "500", "--metadata-log-dir", str(tmp_path)])
    assert rc == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"migrate: ZooKeeper at 127.0.0.1:{port} is unreachable (no session within 0.5 s)"]
    assert list(tmp_path.iterdir()) == []


def test_migrate_refuses_a_chroot_without_a_cluster(
        zookeeper: zookeeper_launcher.ZooKeeper, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["metadata", "migrate", "--zookeeper-connect", zookeeper.connect + "/nothing",
               "--metadata-log-dir", str(tmp_path)])
    assert rc == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "migrate: no Kafka cluster there: /cluster/id does not exist (is the chroot of "
        "--zookeeper-connect right?)"]


def test_the_kraft_node_serves_what_zookeeper_held(migrated: dict[str, Any]) -> None:
    bootstrap = migrated["bootstrap"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # The group resumes where it committed, and every record is there.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g1",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    committed = consumer.committed([TopicPartition("orders", 0)], timeout=30)
    assert committed[0].offset == 5
    consumer.assign([TopicPartition("orders", 0, 5)])
    got = [consumer.poll(10) for _ in range(5)]
    consumer.close()
    assert [m.value() for m in got if m is not None] == [f"v{i}".encode() for i in range(5, 10)]

    described = admin.describe_topics(TopicCollection(["orders"]))["orders"].result(30)
    topic_id = described.topic_id
    assert uuid.UUID(int=(topic_id.get_most_significant_bits() % 2**64) << 64
                     | topic_id.get_least_significant_bits() % 2**64) == migrated["topic_id"]
    resource = ConfigResource(ResourceType.TOPIC, "orders")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "1234567"
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["num.partitions"].value == "3"

    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None,
                                  None, AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(everything).result(timeout=30) == [ACL]
    # carol logs in with her SCRAM password and sees the topic her ACL names only.
    topics = AdminClient(_scram(migrated["sasl"])).list_topics(timeout=30).topics
    assert "orders" in topics and "other" not in topics

    assert describe(bootstrap, [(USER, EXACT, "carol")])[2] == [
        ((("user", "carol"),), [("producer_byte_rate", 2048.0)])]
    answer = request(bootstrap, InitProducerIdRequest(
        transactional_id=None, transaction_timeout=datetime.timedelta(minutes=1),
        producer_id=-1, producer_epoch=-1))
    assert answer.error_code == ErrorCode.none
    assert int(answer.producer_id) > migrated["block_end"]
