"""A node with a controller listener (controller.listener.names): each listener serves
its role's APIs, as Kafka's, and only broker listeners are advertised. Raw frames."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_quorum.v2 import request as dq_req
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64

from kernel.testing.embedded import EmbeddedBroker
from tests.broker_process import free_port
from tests.integration import wire

API_VERSIONS = ApiVersionsRequest(client_software_name="roles-test",
                                  client_software_version="1")
METADATA = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[EmbeddedBroker, str]]:
    port = _free_port()
    settings = {
        "process.roles": "broker,controller", "node.id": 1,
        # The controller listener first: still not the broker's first endpoint.
        "listeners": [f"CONTROLLER://127.0.0.1:{port}", "PLAINTEXT://127.0.0.1:0"],
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{port}",
    }
    with EmbeddedBroker(settings) as broker:
        yield broker, f"127.0.0.1:{port}"


def test_api_versions_lists_the_listeners_own_set(node: tuple[EmbeddedBroker, str]) -> None:
    broker, controller = node
    served = wire.request(broker.bootstrap, API_VERSIONS)
    on_broker = {a.api_key for a in served.api_keys}
    assert {0, 1, 3, 18, 60} <= on_broker
    answered = wire.request(controller, API_VERSIONS)
    assert answered.error_code == 0
    # ApiVersions and metadata_kraft's UpdateFeatures yet (SASL too where auth_sasl is
    # enabled): the KRaft plugin adds the controller's APIs.
    assert [a.api_key for a in answered.api_keys] == [18, 57]


@pytest.mark.parametrize("request_body", [METADATA, DescribeClusterRequest(
    include_cluster_authorized_operations=False, endpoint_type=1)], ids=["metadata",
                                                                        "describe_cluster"])
def test_a_broker_api_on_the_controller_listener_closes_the_connection(
    node: tuple[EmbeddedBroker, str], request_body: object,
) -> None:
    # Kafka: "Received request for disabled api with key 3 (Metadata)", and it closes.
    broker, controller = node
    with wire.connect(controller) as sock:
        sock.sendall(wire.encode_request(request_body))
        assert wire.recv_frame(sock) is None
    # The node serves everyone else as before, on both listeners.
    assert wire.request(controller, API_VERSIONS).error_code == 0
    assert wire.request(broker.bootstrap, METADATA).brokers


def test_only_broker_listeners_are_advertised(node: tuple[EmbeddedBroker, str]) -> None:
    broker, controller = node
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    metadata = wire.request(broker.bootstrap, METADATA)
    assert [(b.node_id, b.port) for b in metadata.brokers] == [(1, port)]
    cluster = wire.request(broker.bootstrap, DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=1))
    assert [(b.broker_id, b.port) for b in cluster.brokers] == [(1, port)]
    assert int(controller.rsplit(":", 1)[1]) != port
    # What the node registers (other brokers and Kafka's tools read it) is PLAINTEXT only.
    registration = broker.broker.registration if broker.broker else None
    assert registration is not None
    assert (registration.listener_name, registration.port) == ("PLAINTEXT", port)
    assert [e.listener_name for e in registration.endpoints] == ["PLAINTEXT"]


def test_a_controller_only_node_bootstraps_on_its_controller_listener() -> None:
    """With no broker listener, ``bootstrap`` is the controller listener (what
    ``--bootstrap-controller`` takes), not a StopIteration."""
    port = free_port()
    node = EmbeddedBroker({"process.roles": "controller", "node.id": 1,
                           "listeners": [f"CONTROLLER://127.0.0.1:{port}"],
                           "controller.listener.names": "CONTROLLER",
                           "controller.quorum.voters": f"1@127.0.0.1:{port}"},
                          plugins=("metadata_kraft",))
    node.start()
    try:
        assert node.bootstrap == f"127.0.0.1:{port}"
    finally:
        node.stop()


@pytest.mark.parametrize("super_users", ["", "User:ANONYMOUS"])
def test_controller_rpcs_need_cluster_rights_where_an_authorizer_is_enabled(
        super_users: str) -> None:
    """As Kafka's ControllerApis: DescribeQuorum needs DESCRIBE on the cluster, Raft and
    broker RPCs CLUSTER_ACTION; without them the answer is CLUSTER_AUTHORIZATION_FAILED."""
    port = free_port()
    node = EmbeddedBroker({"process.roles": "controller", "node.id": 1,
                           "listeners": [f"CONTROLLER://127.0.0.1:{port}"],
                           "controller.listener.names": "CONTROLLER",
                           "controller.quorum.voters": f"1@127.0.0.1:{port}"},
                          plugins=("metadata_kraft", "acl"),
                          plugin_settings={"acl": {"super.users": super_users}})
    node.start()
    try:
        quorum = wire.request(node.bootstrap, DescribeQuorumRequest(topics=(
            dq_req.TopicData(topic_name=TopicName("__cluster_metadata"), partitions=(
                dq_req.PartitionData(partition_index=i32(0)),)),)))
        heartbeat = wire.request(node.bootstrap, BrokerHeartbeatRequest(
            broker_id=BrokerId(7), broker_epoch=i64(0), current_metadata_offset=i64(0),
            want_fence=False, want_shut_down=False))
        if super_users:
            assert quorum.error_code == ErrorCode.none
            # Past authorization: never registered (or the controller not active yet).
            assert heartbeat.error_code in (ErrorCode.stale_broker_epoch,
                                            ErrorCode.not_controller)
        else:
            assert quorum.error_code == ErrorCode.cluster_authorization_failed
            assert heartbeat.error_code == ErrorCode.cluster_authorization_failed
    finally:
        node.stop()
