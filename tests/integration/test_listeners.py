"""Several listeners, each with its own advertised address, as Kafka: a broker with a
PLAINTEXT and an SSL listener answers Metadata, DescribeCluster and FindCoordinator on
each with that listener's port, so confluent-kafka and kafka-python bootstrapped on
either produce and consume there."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.metadata.v9.request import MetadataRequest as MetadataRequestV9

from kernel.testing.embedded import EmbeddedBroker
from kernel.testing.pki import Pki, make_pki
from tests.integration.test_tls import (
    TIMEOUT_S,
    _ask,
    _client_context,
    _produce_and_consume_confluent,
    _tls_socket,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _two_listeners(pki: Pki) -> dict[str, Any]:
    return {
        "listeners": ["PLAINTEXT://127.0.0.1:0", "SSL://127.0.0.1:0"],
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca"),
    }


def _ports(b: EmbeddedBroker) -> dict[str, int]:
    assert b.broker is not None
    return {lst.endpoint.listener_name: lst.port for lst in b.broker.listeners}


def _connect(b: EmbeddedBroker, pki: Pki, listener: str) -> socket.socket:
    port = _ports(b)[listener]
    if listener == "SSL":
        return _tls_socket(port, _client_context(pki))
    return socket.create_connection(("127.0.0.1", port), timeout=10)


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_metadata_describe_cluster_and_find_coordinator_give_the_listener_s_port(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki, listener: str,
) -> None:
    b = broker_factory(_two_listeners(pki))
    assert b.broker is not None
    port = _ports(b)[listener]
    with _connect(b, pki, listener) as sock:
        metadata = _ask(sock, MetadataRequest(topics=None))
        assert [(x.node_id, x.host, x.port) for x in metadata.brokers] == [
            (b.broker.config.broker_id, "127.0.0.1", port)]
        cluster = _ask(sock, DescribeClusterRequest(include_cluster_authorized_operations=False))
        assert cluster.error_code == 0
        assert [(x.host, x.port) for x in cluster.brokers] == [("127.0.0.1", port)]
        # COORDINATOR_NOT_AVAILABLE until the broker hosts the new __consumer_offsets (a
        # topic of 50 partitions is applied off the event loop): clients retry it.
        deadline = time.monotonic() + 10
        while (found := _ask(sock, FindCoordinatorRequest(key="g-listeners", key_type=0))
               ).error_code == ErrorCode.coordinator_not_available:
            assert time.monotonic() < deadline, "no coordinator after 10 s"
            time.sleep(0.05)
        assert (found.error_code, found.host, found.port) == (0, "127.0.0.1", port)


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_confluent_kafka_stays_on_the_listener_it_bootstrapped_on(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki, listener: str,
) -> None:
    b = broker_factory(_two_listeners(pki))
    conf: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{_ports(b)[listener]}"}
    if listener == "SSL":
        conf |= {"security.protocol": "SSL", "ssl.ca.location": pki.path("ca")}
    topic = f"two-listeners-confluent-{listener.lower()}"
    values = _produce_and_consume_confluent(conf, topic)
    assert values == [f"m{i}".encode() for i in range(20)]


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_kafka_python_stays_on_the_listener_it_bootstrapped_on(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki, listener: str,
) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    b = broker_factory(_two_listeners(pki))
    args: dict[str, Any] = {"bootstrap_servers": f"127.0.0.1:{_ports(b)[listener]}"}
    if listener == "SSL":
        args |= {"security_protocol": "SSL", "ssl_cafile": pki.path("ca")}
    topic = f"two-listeners-kafka-python-{listener.lower()}"
    producer = KafkaProducer(**args)
    for i in range(10):
        producer.send(topic, f"k{i}".encode())
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000,
                             group_id=f"g-{topic}", **args)
    values = [m.value for m in consumer]
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(10)]


def test_a_broker_without_the_client_s_listener_is_left_out(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    """Kafka's getAliveBrokerNodes(listenerName): another broker registered with the
    PLAINTEXT listener only is not in Metadata on SSL, and the partition it leads is
    LISTENER_NOT_FOUND there (LEADER_NOT_AVAILABLE to Metadata v0-5)."""
    from kernel.cluster import BrokerRegistration, NewTopic

    b = broker_factory(_two_listeners(pki))
    assert b.broker is not None
    metadata = b.broker.metadata

    async def setup() -> None:
        await metadata.register_broker(BrokerRegistration(node_id=2, host="127.0.0.1", port=1))
        await metadata.create_topics([NewTopic("led-by-2", 1, 1, assignments={0: (2,)})])

    b.call(setup())
    with _connect(b, pki, "SSL") as sock:
        answer = _ask(sock, MetadataRequest(topics=None))
        v9 = _ask(sock, MetadataRequestV9(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False,
                                          include_cluster_authorized_operations=False))
    assert [x.node_id for x in answer.brokers] == [b.broker.config.broker_id]
    (topic,) = [t for t in answer.topics if t.name == "led-by-2"]
    assert [(p.error_code, p.leader_id) for p in topic.partitions] == [
        (ErrorCode.leader_not_available, -1)]
    (topic,) = [t for t in v9.topics if t.name == "led-by-2"]
    assert [(p.error_code, p.leader_id) for p in topic.partitions] == [
        (ErrorCode.listener_not_found, -1)]
    with _connect(b, pki, "PLAINTEXT") as sock:
        answer = _ask(sock, MetadataRequest(topics=None))
    assert sorted(x.node_id for x in answer.brokers) == [b.broker.config.broker_id, 2]
