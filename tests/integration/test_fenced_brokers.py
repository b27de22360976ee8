"""A fenced broker on a metadata_kraft node: registered, but left out of Metadata and
DescribeCluster (unless v2 asks for fenced brokers), and no leader of a new partition;
and the node's feature levels across a restart."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from kernel.cluster import BrokerRegistration
from kernel.protocol.build import make, request_module
from kernel.testing.embedded import EmbeddedBroker
from plugins.metadata_kraft.records.schema import BrokerRegistrationChangeRecord
from tests.integration import wire


def request(key: int, version: int, **values: Any) -> Any:
    return make(getattr(request_module(key, version), _REQUESTS[key]), **values)


_REQUESTS = {3: "MetadataRequest", 18: "ApiVersionsRequest", 19: "CreateTopicsRequest",
             60: "DescribeClusterRequest"}


@pytest.fixture(scope="module")
def node() -> Iterator[EmbeddedBroker]:
    """Broker 1 (this node) with brokers 2 (fenced) and 3 registered beside it."""
    with EmbeddedBroker() as broker:
        assert broker.broker is not None
        backend = broker.broker.metadata
        epoch = broker.call(backend.register_broker(BrokerRegistration(2, "127.0.0.1", 1)))
        broker.call(backend.register_broker(BrokerRegistration(3, "127.0.0.1", 2)))
        # The controller's fencing record, as Kafka's writes it for a missed heartbeat
        # (the broker lifecycle that writes it lands separately).
        broker.call(backend._serialized(lambda: backend._commit([
            BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=epoch, fenced=1)])))
        yield broker


def test_metadata_and_describe_cluster_leave_the_fenced_broker_out(
        node: EmbeddedBroker) -> None:
    metadata = wire.request(node.bootstrap, request(
        3, 12, topics=(), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    assert sorted(b.node_id for b in metadata.brokers) == [1, 3]
    cluster = wire.request(node.bootstrap, request(
        60, 2, include_cluster_authorized_operations=False, endpoint_type=1,
        include_fenced_brokers=False))
    assert sorted((b.broker_id, b.is_fenced) for b in cluster.brokers) == [
        (1, False), (3, False)]
    cluster = wire.request(node.bootstrap, request(
        60, 2, include_cluster_authorized_operations=False, endpoint_type=1,
        include_fenced_brokers=True))
    assert sorted((b.broker_id, b.is_fenced) for b in cluster.brokers) == [
        (1, False), (2, True), (3, False)]


def create(node: EmbeddedBroker, name: str, partitions: int, replication: int) -> None:
    m = request_module(19, 7)
    answer = wire.request(node.bootstrap, make(
        m.CreateTopicsRequest, timeout=datetime.timedelta(seconds=30), validate_only=False,
        topics=(make(m.CreatableTopic, name=name, num_partitions=partitions,
                     replication_factor=replication, assignments=(), configs=()),)))
    assert answer.topics[0].error_code == 0, answer


def test_new_partitions_avoid_the_fenced_broker(node: EmbeddedBroker) -> None:
    create(node, "two-replicas", 12, 2)
    create(node, "three-replicas", 6, 3)
    image = node.broker.metadata.image  # type: ignore[union-attr]
    for state in image.topics["two-replicas"].partitions.values():
        assert 2 not in state.replicas
    for state in image.topics["three-replicas"].partitions.values():
        assert state.replicas[0] != 2 and 2 not in state.isr and state.leader != 2


def test_feature_levels_survive_a_restart(node: EmbeddedBroker) -> None:
    def features() -> tuple[dict[str, int], int]:
        answer = wire.request(node.bootstrap, request(
            18, 4, client_software_name="t", client_software_version="1"))
        return ({f.name: f.max_version_level for f in answer.finalized_features},
                answer.finalized_features_epoch)

    before, epoch = features()
    assert before == {"metadata.version": 30}
    node.restart()
    after, restarted_epoch = features()
    assert after == before
    assert restarted_epoch > epoch  # the restart's LeaderChange and registration
