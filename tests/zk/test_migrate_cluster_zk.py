"""``kafkernel metadata migrate`` of a 3-broker ZooKeeper cluster: a KRaft quorum is
needed to restart several brokers, so this reads back the log the tool writes. The
znodes are written with metadata_zk's own encoders (Kafka's layout), under a chroot of
the session's ZooKeeper."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from kernel.cluster import AclBinding, BrokerRegistration, ScramCredential
from plugins.metadata_kraft.image import MetadataDelta, empty_image
from plugins.metadata_kraft.log import MetadataLog
from plugins.metadata_kraft.migrate import UNASSIGNED_DIR, Node, migrate
from plugins.metadata_kraft.properties import parse_uuid, read_meta_properties
from plugins.metadata_kraft.records.schema import (
    BrokerEndpoint,
    PartitionRecord,
    RegisterBrokerRecord,
)
from plugins.metadata_kraft.records.serde import iter_metadata_records
from plugins.metadata_kraft.zkread import ZkMigrationError
from plugins.metadata_zk import znodes
from plugins.metadata_zk.znodes import LeaderAndIsr
from tests import zookeeper as zookeeper_launcher

CLUSTER = "cluster-of-three-xyzA"
ORDERS = uuid.uuid4()
SCRAM = ScramCredential("bob", 2, b"salt", b"stored", b"server", 8192)
ACL = AclBinding(3, "app-", 4, "User:bob", "*", 3, 3)  # Group, prefixed, Read, Allow


class _Log:
    def warning(self, *_a: object, **_k: object) -> None: ...


@pytest.fixture(scope="module")
def cluster(zookeeper: zookeeper_launcher.ZooKeeper) -> Iterator[str]:
    """What three stopped metadata_zk brokers leave in ZooKeeper."""
    chroot = f"/three-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=zookeeper.connect)
    root.start(timeout=30)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    connect = zookeeper.connect + chroot
    zk = KazooClient(hosts=connect)
    zk.start(timeout=30)

    def put(path: str, data: bytes) -> None:
        zk.create(path, data, makepath=True)

    put(znodes.CLUSTER_ID, znodes.encode_cluster_id(CLUSTER))
    zk.ensure_path(znodes.BROKER_IDS)
    put(znodes.topic_path("orders"), znodes.encode_topic(
        ORDERS, {0: [1, 2, 3], 1: [2, 3, 1]}, adding={1: [1]}, removing={}))
    put(znodes.partition_state_path("orders", 0),
        znodes.encode_partition_state(LeaderAndIsr(1, 7, (1, 2), 3)))
    zk.set(znodes.partition_state_path("orders", 0),
           znodes.encode_partition_state(LeaderAndIsr(2, 8, (2, 1), 3)))  # version 1
    put(znodes.partition_state_path("orders", 1),
        znodes.encode_partition_state(LeaderAndIsr(2, 0, (2, 3, 1), 3)))
    put(znodes.topic_path("old"), znodes.encode_topic(None, {0: [3]}))  # before 2.8
    put(znodes.delete_topic_path("old"), b"")
    put(znodes.config_path("topics", "orders"), znodes.encode_config({"cleanup.policy": "compact"}))
    put(znodes.config_path("brokers", "<default>"),
        znodes.encode_config({"log.retention.ms": "1000"}))
    put(znodes.config_path("brokers", "2"), znodes.encode_config({"log.cleaner.threads": "2"}))
    put(znodes.config_path("users", "bob"), znodes.encode_config({
        "SCRAM-SHA-512": znodes.scram_to_config(SCRAM), "consumer_byte_rate": "100"}))
    put("/config/users/<default>/clients/app%2A", znodes.encode_config(
        {"request_percentage": "50.5"}))
    put(znodes.config_path("ips", "10.0.0.1"),
        znodes.encode_config({"connection_creation_rate": "3"}))
    put(znodes.acl_path(3, "app-", 4), znodes.encode_acls([ACL]))
    put(znodes.PRODUCER_ID_BLOCK, znodes.encode_producer_id_block(3, range(4000, 5000)))
    zk.stop()
    zk.close()
    yield connect


def _node(tmp: Path, node_id: int, dirs: int = 1) -> Node:
    log_dirs = [tmp / f"b{node_id}-{i}" for i in range(dirs)]
    for d in log_dirs:
        d.mkdir()
        (d / "meta.properties").write_text(
            f"cluster.id={CLUSTER}\nversion=0\nbroker.id={node_id}\n")
    endpoint = BrokerEndpoint(name="PLAINTEXT", host="h", port=9090 + node_id,
                              security_protocol=0)
    return Node(node_id, log_dirs, (endpoint,), None)


def test_every_brokers_partitions_and_registrations_are_in_the_log(
        cluster: str, tmp_path: Path) -> None:
    nodes = [_node(tmp_path, 1, dirs=2), _node(tmp_path, 2), _node(tmp_path, 3)]
    (nodes[0].log_dirs[1] / "orders-0").mkdir()  # broker 1 holds orders-0 in its 2nd dir
    summary = migrate(cluster, nodes, tmp_path / "meta")
    assert (summary.topics, summary.partitions, summary.acls, summary.users,
            summary.quotas, summary.next_producer_id) == (2, 3, 1, 1, 3, 5000)
    assert any("old was queued for deletion" in w for w in summary.warnings)

    log = MetadataLog(tmp_path / "meta", 1, _Log())
    batches = log.open()
    log.close()
    records = [r.message for r in iter_metadata_records(batches)]
    delta = MetadataDelta(empty_image(CLUSTER, 1))
    for record in records:
        delta.replay(record)
    image = delta.apply()

    assert delta.features == {"metadata.version": 30}
    assert type(records[0]).__name__ == "FeatureLevelRecord"
    # Fenced until the broker itself registers again on start.
    assert image.brokers[3] == BrokerRegistration.of(
        3, (znodes.BrokerEndpoint("PLAINTEXT", "h", 9093, "PLAINTEXT"),), fenced=True)
    registered = {r.broker_id: r for r in records if isinstance(r, RegisterBrokerRecord)}
    assert sorted(registered) == [1, 2, 3] and all(r.fenced for r in registered.values())
    assert len(registered[1].log_dirs) == 2
    first = batches[1].header.base_offset  # after the LeaderChange batch
    assert [r.broker_epoch for r in registered.values()] == [first + 1, first + 2, first + 3]

    orders = image.topics["orders"]
    assert orders.topic_id == ORDERS
    p0, p1 = orders.partitions[0], orders.partitions[1]
    assert (p0.replicas, p0.leader, p0.leader_epoch, p0.isr, p0.partition_epoch) == (
        (1, 2, 3), 2, 8, (2, 1), 1)
    assert (p1.replicas, p1.leader, p1.isr) == ((2, 3, 1), 2, (2, 3, 1))
    assert orders.configs == {"cleanup.policy": "compact"}
    parts = {(r.topic_id, r.partition_id): r for r in records
             if isinstance(r, PartitionRecord)}
    assert parts[(ORDERS, 1)].adding_replicas == (1,)
    dir_of_1 = parse_uuid(read_meta_properties(nodes[0].log_dirs[1])["directory.id"])
    dir_of_2 = parse_uuid(read_meta_properties(nodes[1].log_dirs[0])["directory.id"])
    dir_of_3 = parse_uuid(read_meta_properties(nodes[2].log_dirs[0])["directory.id"])
    assert parts[(ORDERS, 0)].directories == (dir_of_1, dir_of_2, dir_of_3)
    assert parts[(ORDERS, 1)].directories[2] == UNASSIGNED_DIR  # 2 dirs, none holds it
    assert image.topics["old"].topic_id is not None

    assert image.broker_configs[-1] == {"log.retention.ms": "1000"}
    assert image.broker_configs[2] == {"log.cleaner.threads": "2"}
    assert delta.scram_credentials == {("bob", 2): SCRAM}
    assert list(delta.acls.values()) == [ACL]
    assert {e: dict(v) for e, v in delta.client_quotas.items()} == {
        (("user", "bob"),): {"consumer_byte_rate": 100.0},
        (("client-id", "app*"), ("user", None)): {"request_percentage": 50.5},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 3.0},
    }
    assert delta.next_producer_id == 5000

    for node in nodes:
        for d in node.log_dirs:
            props = read_meta_properties(d)
            assert props is not None
            assert (props["version"], props["node.id"], props["cluster.id"]) == (
                "1", str(node.node_id), CLUSTER)
            assert "broker.id" not in props


def test_a_dir_of_another_cluster_or_broker_is_refused(cluster: str, tmp_path: Path) -> None:
    node = _node(tmp_path, 1)
    (node.log_dirs[0] / "meta.properties").write_text("cluster.id=other\nversion=0\n"
                                                     "broker.id=1\n")
    with pytest.raises(ZkMigrationError, match="is not the cluster in ZooKeeper"):
        migrate(cluster, [node], tmp_path / "meta")
    (node.log_dirs[0] / "meta.properties").write_text(f"cluster.id={CLUSTER}\nversion=0\n"
                                                     "broker.id=4\n")
    with pytest.raises(ZkMigrationError, match="belongs to broker 4, not 1"):
        migrate(cluster, [node], tmp_path / "meta")
    assert not (tmp_path / "meta" / "__cluster_metadata-0").exists()


def test_a_second_migration_needs_force_and_keeps_the_directory_ids(
        cluster: str, tmp_path: Path) -> None:
    node = _node(tmp_path, 3)
    migrate(cluster, [node], tmp_path / "meta")
    dir_id = read_meta_properties(node.log_dirs[0])["directory.id"]
    again = _node_again(node)
    with pytest.raises(ZkMigrationError, match="already holds a KRaft metadata log"):
        migrate(cluster, [again], tmp_path / "meta")
    migrate(cluster, [again], tmp_path / "meta", force=True)
    assert read_meta_properties(node.log_dirs[0])["directory.id"] == dir_id
    assert {p.name for p in (tmp_path / "meta").iterdir()} == {  # no temporary dir left
        "meta.properties", "__cluster_metadata-0"}


def _node_again(node: Node) -> Node:
    return Node(node.node_id, node.log_dirs, node.endpoints, node.rack)
