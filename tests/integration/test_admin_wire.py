"""Admin API cases the client libraries cannot express (duplicate names, names with ids,
controller endpoints, documentation, BROKER_LOGGER, bad operations), spoken byte by
byte over a socket with kio entities."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.alter_configs.v2 import request as alter_v2
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_partitions.v3 import request as partitions_v3
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.delete_topics.v1.request import DeleteTopicsRequest as DeleteV1
from kio.schema.delete_topics.v6 import request as delete_v6
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest as ClusterV0
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest as ClusterV1
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest as ClusterV2
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1
from kio.static.primitive import i32Timedelta

from kernel.hookspecs import hookimpl
from kernel.requests import Session
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import request

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE, APPEND = 0, 1, 2
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))


class DenyingAuthorizer:
    """Test authorizer: nothing on the cluster but DESCRIBE, no creating w-denied, and
    only CREATE and DESCRIBE on w-locked."""

    @hookimpl
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> bool | None:
        if resource_type == "CLUSTER":
            return operation == "DESCRIBE"
        if resource_name == "w-denied":
            return operation != "CREATE"
        if resource_name == "w-locked":
            return operation in ("CREATE", "DESCRIBE")
        return None


def call(broker: EmbeddedBroker, body: Any) -> Any:
    return request(broker.bootstrap, body)


def creatable(name: str, partitions: int = 1, replication: int = 1,
              assignments: tuple[Any, ...] = (), **configs: str | None) -> Any:
    return create_v7.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication,
        assignments=assignments,
        configs=tuple(create_v7.CreatableTopicConfig(name=k.replace("_", "."), value=v)
                      for k, v in configs.items()),
    )


def create(broker: EmbeddedBroker, *topics: Any, validate_only: bool = False) -> Any:
    return call(broker, create_v7.CreateTopicsRequest(topics=topics, timeout=TIMEOUT,
                                                      validate_only=validate_only))


def describe(broker: EmbeddedBroker, *resources: tuple[int, str, tuple[str, ...] | None],
             synonyms: bool = False, docs: bool = False) -> Any:
    return call(broker, describe_v4.DescribeConfigsRequest(
        resources=tuple(describe_v4.DescribeConfigsResource(
            resource_type=kind, resource_name=name, configuration_keys=keys)
            for kind, name, keys in resources),
        include_synonyms=synonyms, include_documentation=docs,
    ))


def incremental(broker: EmbeddedBroker, kind: int, name: str,
                *ops: tuple[str, int, str | None], validate_only: bool = False) -> Any:
    response = call(broker, incremental_v1.IncrementalAlterConfigsRequest(
        resources=(incremental_v1.AlterConfigsResource(
            resource_type=kind, resource_name=name,
            configs=tuple(incremental_v1.AlterableConfig(name=n, config_operation=op, value=v)
                          for n, op, v in ops)),),
        validate_only=validate_only,
    ))
    (answer,) = response.responses
    return answer


def test_api_versions_advertise_admin_ranges(broker: EmbeddedBroker) -> None:
    response = call(broker, ApiVersionsRequest(client_software_name="wire",
                                               client_software_version="1"))
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[19] == (2, 7)
    assert ranges[20] == (1, 6)
    assert ranges[32] == (1, 4)
    assert ranges[33] == (0, 2)
    assert ranges[37] == (0, 3)
    assert ranges[44] == (0, 1)
    assert ranges[60] == (0, 2)


def test_create_topics_v7_answer(broker: EmbeddedBroker) -> None:
    response = create(broker, creatable("w-new", 2, cleanup_policy="compact"))
    (result,) = response.topics
    assert result.error_code == ErrorCode.none
    assert result.topic_id != uuid.UUID(int=0)
    assert (result.num_partitions, result.replication_factor) == (2, 1)
    configs = {c.name: c for c in result.configs}
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].config_source) == \
        ("compact", 1)
    assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == \
        ("1073741824", 5)

    dry = create(broker, creatable("w-dry", -1, -1), validate_only=True).topics[0]
    assert dry.error_code == ErrorCode.none
    assert (dry.num_partitions, dry.replication_factor) == (1, 1)


def test_create_topics_request_errors(broker: EmbeddedBroker) -> None:
    assign = create_v7.CreatableReplicaAssignment
    response = create(
        broker,
        creatable("w-twice"), creatable("w-twice", 3),
        creatable("w-both", 2, -1, assignments=(assign(partition_index=0, broker_ids=(1,)),)),
        creatable("w-gap", -1, -1, assignments=(assign(partition_index=1, broker_ids=(1,)),)),
        creatable("w-again", -1, -1, assignments=(assign(partition_index=0, broker_ids=(1, 1)),)),
        creatable("w-null", retention_ms=None),
        creatable("w-long", segment_bytes=str(2**31)),
    )
    answers = {t.name: (t.error_code, t.error_message) for t in response.topics}
    assert answers["w-twice"] == (ErrorCode.invalid_request, "Duplicate topic name.")
    assert answers["w-both"][0] == ErrorCode.invalid_request
    assert answers["w-gap"][0] == ErrorCode.invalid_replica_assignment
    assert answers["w-again"][0] == ErrorCode.invalid_replica_assignment
    assert answers["w-null"][0] == ErrorCode.invalid_config
    assert answers["w-long"][0] == ErrorCode.invalid_config
    assert len(response.topics) == 6


def test_partition_count_per_request_is_bounded(broker: EmbeddedBroker) -> None:
    # Kafka refuses to put more than 10,000 new partitions in one metadata batch.
    response = create(broker, creatable("w-huge", 6000), creatable("w-huger", 6000))
    assert {(t.name, t.error_code) for t in response.topics} == {
        ("w-huge", ErrorCode.policy_violation), ("w-huger", ErrorCode.policy_violation)}
    create(broker, creatable("w-small"))
    response = call(broker, partitions_v3.CreatePartitionsRequest(
        topics=(partitions_v3.CreatePartitionsTopic(name="w-small", count=20_000,
                                                    assignments=None),),
        timeout=TIMEOUT, validate_only=False))
    assert [r.error_code for r in response.results] == [ErrorCode.policy_violation]


def test_delete_topics_by_name_and_id(broker_factory: Callable[..., EmbeddedBroker]) -> None:
    broker = broker_factory()
    created = create(broker, creatable("w-del")).topics[0]
    state = delete_v6.DeleteTopicState
    response = call(broker, delete_v6.DeleteTopicsRequest(topics=(
        state(name="w-del", topic_id=created.topic_id),
        state(name=None, topic_id=uuid.uuid4()),
        state(name=None, topic_id=uuid.UUID(int=0)),
    ), timeout=TIMEOUT))
    codes = [r.error_code for r in response.responses]
    assert codes == [ErrorCode.invalid_request, ErrorCode.unknown_topic_id,
                     ErrorCode.invalid_request]
    response = call(broker, delete_v6.DeleteTopicsRequest(
        topics=(state(name=None, topic_id=created.topic_id),), timeout=TIMEOUT))
    assert [(r.name, r.error_code) for r in response.responses] == [("w-del", ErrorCode.none)]

    disabled = broker_factory({"delete.topic.enable": False})
    create(disabled, creatable("w-kept"))
    # Before v3 clients do not know TOPIC_DELETION_DISABLED; Kafka says INVALID_REQUEST.
    response = call(disabled, DeleteV1(topic_names=("w-kept",), timeout=TIMEOUT))
    assert [r.error_code for r in response.responses] == [ErrorCode.invalid_request]


def test_describe_cluster(broker: EmbeddedBroker) -> None:
    v0 = call(broker, ClusterV0(include_cluster_authorized_operations=True))
    assert v0.error_code == ErrorCode.none
    assert [(b.broker_id, b.port) for b in v0.brokers] == \
        [(1, int(broker.bootstrap.rsplit(":", 1)[1]))]
    assert v0.controller_id == 1
    # No authorizer: every cluster operation is allowed (bits of AclOperation codes).
    assert v0.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    v2 = call(broker, ClusterV2(include_cluster_authorized_operations=False,
                                include_fenced_brokers=True))
    assert [(b.broker_id, b.is_fenced) for b in v2.brokers] == [(1, False)]
    assert v2.cluster_authorized_operations == -(2**31)
    controllers = call(broker, ClusterV1(include_cluster_authorized_operations=False,
                                         endpoint_type=2))
    assert controllers.error_code == ErrorCode.mismatched_endpoint_type


def test_describe_configs_details(broker: EmbeddedBroker) -> None:
    create(broker, creatable("w-conf", retention_ms="1000"))
    response = describe(
        broker,
        (TOPIC, "w-conf", ("retention.ms", "segment.bytes")),
        (TOPIC, "w-missing", None),
        (BROKER, "1", ("log.retention.hours",)),
        (BROKER, "2", None),
        (BROKER, "", None),
        (BROKER_LOGGER, "1", None),
        (GROUP, "g", None),
        docs=True, synonyms=True,
    )
    results = {(r.resource_type, r.resource_name): r for r in response.results}
    topic = results[TOPIC, "w-conf"]
    assert [c.name for c in topic.configs] == ["retention.ms", "segment.bytes"]
    retention, segment = topic.configs
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "1000", 1)]
    assert [(s.name, s.source) for s in segment.synonyms] == [("log.segment.bytes", 5)]
    assert (retention.config_type, segment.config_type) == (5, 3)  # LONG, INT
    assert retention.documentation
    assert results[TOPIC, "w-missing"].error_code == ErrorCode.unknown_topic_or_partition
    (hours,) = results[BROKER, "1"].configs
    assert (hours.value, hours.read_only, hours.config_source) == ("168", True, 5)
    assert results[BROKER, "2"].error_code == ErrorCode.invalid_request
    assert results[BROKER, ""].configs == ()  # no cluster-wide dynamic defaults yet
    assert results[BROKER_LOGGER, "1"].error_code == ErrorCode.none
    assert results[GROUP, "g"].error_code == ErrorCode.invalid_request


def test_incremental_alter_configs_rules(broker: EmbeddedBroker) -> None:
    create(broker, creatable("w-inc"))
    dup = incremental(broker, TOPIC, "w-inc", ("retention.ms", SET, "1"),
                      ("retention.ms", DELETE, None))
    assert dup.error_code == ErrorCode.invalid_request
    null = incremental(broker, TOPIC, "w-inc", ("retention.ms", SET, None))
    assert null.error_code == ErrorCode.invalid_request
    bad_op = incremental(broker, TOPIC, "w-inc", ("retention.ms", 9, "1"))
    assert bad_op.error_code == ErrorCode.invalid_request
    unknown = incremental(broker, TOPIC, "w-inc", ("retention.forever", SET, "1"))
    assert unknown.error_code == ErrorCode.invalid_config
    dry = incremental(broker, TOPIC, "w-inc", ("retention.ms", SET, "1"), validate_only=True)
    assert dry.error_code == ErrorCode.none
    (entry,) = describe(broker, (TOPIC, "w-inc", ("retention.ms",))).results[0].configs
    assert entry.value == "604800000"

    # Cluster-wide default: resource name "".
    default = incremental(broker, BROKER, "", ("log.cleanup.policy", APPEND, "compact"))
    assert default.error_code == ErrorCode.none
    results = describe(broker, (BROKER, "", None), (TOPIC, "w-inc", ("cleanup.policy",)),
                       synonyms=True).results
    assert [(c.name, c.value, c.config_source) for c in results[0].configs] == [
        ("log.cleanup.policy", "delete,compact", 3)]
    (policy,) = results[1].configs
    assert (policy.value, policy.config_source) == ("delete,compact", 3)
    assert [s.source for s in policy.synonyms] == [3, 5]
    fixed = incremental(broker, BROKER, "1", ("broker.id", SET, "7"))
    assert fixed.error_code == ErrorCode.invalid_request
    logger = incremental(broker, BROKER_LOGGER, "1", ("kernel", SET, "DEBUG"))
    assert logger.error_code == ErrorCode.invalid_request


def test_alter_configs_duplicate_resource(broker: EmbeddedBroker) -> None:
    create(broker, creatable("w-alter"))
    resource = alter_v2.AlterConfigsResource(
        resource_type=TOPIC, resource_name="w-alter",
        configs=(alter_v2.AlterableConfig(name="retention.ms", value="1"),))
    response = call(broker, alter_v2.AlterConfigsRequest(resources=(resource, resource),
                                                         validate_only=False))
    assert [r.error_code for r in response.responses] == [ErrorCode.invalid_request]
    null = alter_v2.AlterConfigsResource(
        resource_type=TOPIC, resource_name="w-alter",
        configs=(alter_v2.AlterableConfig(name="retention.ms", value=None),))
    response = call(broker, alter_v2.AlterConfigsRequest(resources=(null,),
                                                         validate_only=False))
    assert [r.error_code for r in response.responses] == [ErrorCode.invalid_request]


def test_authorization(broker_factory: Callable[..., EmbeddedBroker]) -> None:
    broker = broker_factory(plugins=["metadata_kraft",
                                     "tests.integration.test_admin_wire:DenyingAuthorizer"])
    response = create(broker, creatable("w-denied"), creatable("w-locked"))
    assert {t.name: t.error_code for t in response.topics} == {
        "w-denied": ErrorCode.topic_authorization_failed, "w-locked": ErrorCode.none}
    # Created, but its configs may not be described: the v5+ answer says so.
    assert response.topics[1].topic_config_error_code == ErrorCode.topic_authorization_failed
    assert response.topics[1].configs == ()

    response = call(broker, DeleteV1(topic_names=("w-locked",), timeout=TIMEOUT))
    assert [r.error_code for r in response.responses] == [ErrorCode.topic_authorization_failed]
    results = describe(broker, (TOPIC, "w-locked", None), (BROKER, "1", None)).results
    assert [r.error_code for r in results] == [ErrorCode.topic_authorization_failed,
                                               ErrorCode.cluster_authorization_failed]
    assert incremental(broker, TOPIC, "w-locked", ("retention.ms", SET, "1")).error_code == \
        ErrorCode.topic_authorization_failed
    assert incremental(broker, BROKER, "1", ("num.partitions", SET, "2")).error_code == \
        ErrorCode.cluster_authorization_failed
    response = call(broker, partitions_v3.CreatePartitionsRequest(
        topics=(partitions_v3.CreatePartitionsTopic(name="w-locked", count=2,
                                                    assignments=None),),
        timeout=TIMEOUT, validate_only=False))
    assert [r.error_code for r in response.results] == [ErrorCode.topic_authorization_failed]
    cluster = call(broker, ClusterV0(include_cluster_authorized_operations=True))
    assert cluster.cluster_authorized_operations == 1 << 8  # DESCRIBE only


def test_internal_topics_are_deleted_like_kafka(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    # Kafka's controller has no special case for internal topics in DeleteTopics (the
    # refusal users know is kafka-topics.sh's); an authorized principal may delete them.
    broker = broker_factory(plugins=["metadata_kraft"])
    assert create(broker, creatable("__transaction_state")).topics[0].error_code == \
        ErrorCode.none
    response = call(broker, DeleteV1(topic_names=("__transaction_state",), timeout=TIMEOUT))
    assert [r.error_code for r in response.responses] == [ErrorCode.none]
