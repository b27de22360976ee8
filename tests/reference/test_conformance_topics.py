"""Conformance of the topic and config APIs: Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and
DescribeCluster, each case at every version Kafkernel advertises, sent to Kafka and to
Kafkernel and compared field by field (tests/reference/diff.py)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.config import BrokerConfig, schema_keys
from kernel.handlers.config_entries import DYNAMIC_ONLY_KEYS
from tests.reference.conformance import (
    BROKER_RESOURCE,
    TIMEOUT,
    TOPIC_RESOURCE,
    ZERO_ID,
    Case,
    body,
    cases,
    create_topic,
    documented,
    drop_configs,
    known,
    led,
    part,
    topic_id_of,
    unique,
    wait_for,
)
from tests.reference.diff import Answers, Pair

METADATA, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 3, 19, 20, 37
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 32, 33, 44, 60
DESCRIBE_TOPIC_PARTITIONS = 75
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# D3: the source of min.insync.replicas (every other topic config is Kafka 4.3's, key
# by key: test_topic_configs.py).
DOCUMENTATION = known("D5", "results.configs.documentation")


def same_configs(pair: Pair, answers: Answers, *, ignore: tuple[str, ...] = ()) -> None:
    """Equal but for D3."""
    pair.assert_same(drop_configs(answers, "D3", ("min.insync.replicas",)), ignore=ignore)


# -- Metadata ------------------------------------------------------------------------------

def metadata(v: int, *names: str, topic_ids: tuple[uuid.UUID, ...] = (),
             auto_create: bool = False, authorized_operations: bool = False) -> Any:
    topics = tuple(part(METADATA, v, "MetadataRequestTopic", name=n, topic_id=ZERO_ID)
                   for n in names)
    topics += tuple(part(METADATA, v, "MetadataRequestTopic", name=None, topic_id=i)
                    for i in topic_ids)
    return body(METADATA, v, topics=topics, allow_auto_topic_creation=auto_create,
                include_cluster_authorized_operations=authorized_operations,
                include_topic_authorized_operations=authorized_operations)


def metadata_of_a_topic(pair: Pair, v: int) -> None:
    name = unique("md")
    create_topic(pair, name, partitions=3)
    pair.compare(metadata(v, name))


def metadata_with_authorized_operations(pair: Pair, v: int) -> None:
    name = unique("md-ops")
    create_topic(pair, name)
    pair.compare(metadata(v, name, authorized_operations=True))


def metadata_of_an_unknown_topic(pair: Pair, v: int) -> None:
    """From v4 the request may forbid auto-creation; below, it always creates (D2)."""
    if v < 4:
        return metadata_with_auto_creation(pair, v)
    answers = pair.compare(metadata(v, unique("md-unknown")))
    assert answers.kafka.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    return None


def metadata_of_an_invalid_name(pair: Pair, v: int) -> None:
    answers = pair.compare(metadata(v, "bad/name", auto_create=True))
    assert answers.kafka.topics[0].error_code == ErrorCode.invalid_topic_exception


def metadata_with_auto_creation(pair: Pair, v: int) -> None:
    name = unique("md-auto")
    answers = pair.send(metadata(v, name, auto_create=True))
    documented("D2")  # Kafka: created in the background, unknown in this answer
    assert answers.kafka.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    assert answers.kafkernel.topics[0].error_code == ErrorCode.none
    for side in (pair.kafka, pair.kafkernel):
        wait_for(side, f"{name} is created", lambda s=side: led(s, name, 1))
    pair.compare(metadata(v, name))


def metadata_of_an_unknown_topic_id(pair: Pair, v: int) -> None:
    """Ids are in the request from v10, served from v12; below, INVALID_REQUEST."""
    if v < 10:
        return metadata_of_an_unknown_topic(pair, v)
    answers = pair.compare(metadata(v, topic_ids=(uuid.uuid4(),)))
    assert answers.kafka.topics[0].error_code == (
        ErrorCode.unknown_topic_id if v >= 12 else ErrorCode.invalid_request)
    return None


def metadata_of_a_known_topic_id(pair: Pair, v: int) -> None:
    if v < 10:
        return metadata_of_a_topic(pair, v)
    name = unique("md-id")
    create_topic(pair, name, partitions=2)
    pair.assert_same(pair.each(lambda side: side.send(metadata(
        v, topic_ids=(topic_id_of(side, name),)))))
    return None


# -- CreateTopics ---------------------------------------------------------------------------

def creatable(v: int, name: str, partitions: int = 1, replication: int = 1,
              configs: dict[str, str | None] | None = None,
              assignments: dict[int, list[int]] | None = None) -> Any:
    return part(CREATE_TOPICS, v, "CreatableTopic", name=name, num_partitions=partitions,
                replication_factor=replication,
                assignments=tuple(part(CREATE_TOPICS, v, "CreatableReplicaAssignment",
                                       partition_index=p, broker_ids=tuple(b))
                                  for p, b in (assignments or {}).items()),
                configs=tuple(part(CREATE_TOPICS, v, "CreatableTopicConfig", name=k, value=x)
                              for k, x in (configs or {}).items()))


def create_topics(v: int, *topics: Any, validate_only: bool = False) -> Any:
    return body(CREATE_TOPICS, v, topics=topics, timeout=TIMEOUT, validate_only=validate_only)


def create_one(pair: Pair, v: int, topic: Any, expected: ErrorCode | None,
               validate_only: bool = False) -> None:
    answers = pair.send(create_topics(v, topic, validate_only=validate_only))
    same_configs(pair, answers)
    if expected is not None:
        assert answers.kafka.topics[0].error_code == expected, answers.kafka


def create_a_topic(pair: Pair, v: int) -> None:
    create_one(pair, v, creatable(v, unique("ct"), partitions=3,
                                  configs={"retention.ms": "3600000",
                                           "cleanup.policy": "compact"}), ErrorCode.none)


def create_with_defaults(pair: Pair, v: int) -> None:
    """-1 partitions and replication factor: the broker's defaults (from v4, yet Kafka
    takes them at every version)."""
    create_one(pair, v, creatable(v, unique("ct-default"), partitions=-1, replication=-1),
               ErrorCode.none)


def create_validate_only(pair: Pair, v: int) -> None:
    name = unique("ct-validate")
    create_one(pair, v, creatable(v, name, partitions=2), ErrorCode.none, validate_only=True)
    pair.compare(metadata(12, name))


def create_with_assignments(pair: Pair, v: int) -> None:
    name = unique("ct-assigned")
    # Each side's own node id, which is 1 on both.
    create_one(pair, v, creatable(v, name, partitions=-1, replication=-1,
                                  assignments={0: [1], 1: [1]}), ErrorCode.none)


def create_an_existing_topic(pair: Pair, v: int) -> None:
    name = unique("ct-exists")
    create_topic(pair, name)
    create_one(pair, v, creatable(v, name), ErrorCode.topic_already_exists)


def create_with_a_bad_replication_factor(pair: Pair, v: int) -> None:
    create_one(pair, v, creatable(v, unique("ct-rf"), replication=3),
               ErrorCode.invalid_replication_factor)
    create_one(pair, v, creatable(v, unique("ct-rf0"), replication=0),
               ErrorCode.invalid_replication_factor)


def create_with_bad_partitions(pair: Pair, v: int) -> None:
    create_one(pair, v, creatable(v, unique("ct-p0"), partitions=0),
               ErrorCode.invalid_partitions)


def create_with_an_unknown_config(pair: Pair, v: int) -> None:
    create_one(pair, v, creatable(v, unique("ct-cfg"), configs={"no.such.config": "1"}),
               ErrorCode.invalid_config)


def create_with_an_invalid_config_value(pair: Pair, v: int) -> None:
    create_one(pair, v, creatable(v, unique("ct-val"), configs={"retention.ms": "soon"}),
               ErrorCode.invalid_config)
    create_one(pair, v, creatable(v, unique("ct-val2"), configs={"cleanup.policy": "keep"}),
               ErrorCode.invalid_config)


def create_with_a_segment_below_the_minimum(pair: Pair, v: int) -> None:
    """KIP-1030: segment.bytes is at least 1 MiB in Kafka 4 (14 bytes before)."""
    answers = pair.send(create_topics(v, creatable(v, unique("ct-seg"),
                                                   configs={"segment.bytes": "14"})))
    same_configs(pair, answers)
    kafka, kafkernel = answers.kafka.topics[0], answers.kafkernel.topics[0]
    assert kafka.error_code == ErrorCode.invalid_config
    assert kafkernel.error_message == kafka.error_message  # the same words, too
    create_one(pair, v, creatable(v, unique("ct-seg1"), configs={"segment.bytes": "1048575"}),
               ErrorCode.invalid_config)
    create_one(pair, v, creatable(v, unique("ct-seg2"), configs={"segment.bytes": "1048576"}),
               ErrorCode.none)


def create_with_internal_segment_bytes(pair: Pair, v: int) -> None:
    """Kafka's internal.segment.bytes, what its tests roll small segments with: accepted
    at any size, never described."""
    name = unique("ct-iseg")
    create_one(pair, v, creatable(v, name, configs={"internal.segment.bytes": "1024"}),
               ErrorCode.none)
    same_configs(pair, pair.send(describe_configs(4, TOPIC_RESOURCE, name)))


def create_with_a_null_config_value(pair: Pair, v: int) -> None:
    create_one(pair, v, creatable(v, unique("ct-null"), configs={"retention.ms": None}),
               ErrorCode.invalid_config)


def create_with_assignments_and_partitions(pair: Pair, v: int) -> None:
    create_one(pair, v, creatable(v, unique("ct-both"), partitions=2,
                                  assignments={0: [1], 1: [1]}), ErrorCode.invalid_request)


def create_with_an_unknown_broker_in_assignments(pair: Pair, v: int) -> None:
    create_one(pair, v, creatable(v, unique("ct-broker"), partitions=-1, replication=-1,
                                  assignments={0: [7]}), ErrorCode.invalid_replica_assignment)


def create_the_same_name_twice_in_one_request(pair: Pair, v: int) -> None:
    name = unique("ct-twice")
    answers = pair.compare(create_topics(v, creatable(v, name), creatable(v, name)))
    assert {t.error_code for t in answers.kafka.topics} == {ErrorCode.invalid_request}


# -- DeleteTopics ---------------------------------------------------------------------------

def delete_topics(v: int, *names: str, topic_ids: tuple[uuid.UUID, ...] = ()) -> Any:
    if v < 6:
        return body(DELETE_TOPICS, v, topic_names=names, timeout=TIMEOUT)
    states = tuple(part(DELETE_TOPICS, v, "DeleteTopicState", name=n, topic_id=ZERO_ID)
                   for n in names)
    states += tuple(part(DELETE_TOPICS, v, "DeleteTopicState", name=None, topic_id=i)
                    for i in topic_ids)
    return body(DELETE_TOPICS, v, topics=states, timeout=TIMEOUT)


def delete_a_topic(pair: Pair, v: int) -> None:
    name = unique("dt")
    create_topic(pair, name)
    answers = pair.compare(delete_topics(v, name))
    assert answers.kafka.responses[0].error_code == ErrorCode.none


def delete_a_topic_by_id(pair: Pair, v: int) -> None:
    if v < 6:
        return delete_a_topic(pair, v)
    name = unique("dt-id")
    create_topic(pair, name)
    answers = pair.each(lambda side: side.send(delete_topics(v, topic_ids=(
        topic_id_of(side, name),))))
    pair.assert_same(answers)
    assert answers.kafka.responses[0].error_code == ErrorCode.none
    return None


def delete_an_unknown_topic(pair: Pair, v: int) -> None:
    answers = pair.compare(delete_topics(v, unique("dt-unknown")))
    assert answers.kafka.responses[0].error_code == ErrorCode.unknown_topic_or_partition


def delete_an_unknown_topic_id(pair: Pair, v: int) -> None:
    if v < 6:
        return delete_an_unknown_topic(pair, v)
    answers = pair.compare(delete_topics(v, topic_ids=(uuid.uuid4(),)))
    assert answers.kafka.responses[0].error_code == ErrorCode.unknown_topic_id
    return None


# -- CreatePartitions ------------------------------------------------------------------------

def create_partitions(v: int, name: str, count: int, *, validate_only: bool = False,
                      assignments: list[list[int]] | None = None) -> Any:
    return body(CREATE_PARTITIONS, v, timeout=TIMEOUT, validate_only=validate_only,
                topics=(part(CREATE_PARTITIONS, v, "CreatePartitionsTopic", name=name,
                             count=count, assignments=None if assignments is None else tuple(
                                 part(CREATE_PARTITIONS, v, "CreatePartitionsAssignment",
                                      broker_ids=tuple(a)) for a in assignments)),))


def partitions_case(pair: Pair, v: int, count: int, expected: ErrorCode, *,
                    initial: int = 2, validate_only: bool = False,
                    assignments: list[list[int]] | None = None) -> None:
    name = unique("cp")
    create_topic(pair, name, partitions=initial)
    answers = pair.compare(create_partitions(v, name, count, validate_only=validate_only,
                                             assignments=assignments))
    assert answers.kafka.results[0].error_code == expected, answers.kafka


def add_partitions(pair: Pair, v: int) -> None:
    partitions_case(pair, v, 4, ErrorCode.none)


def add_partitions_validate_only(pair: Pair, v: int) -> None:
    partitions_case(pair, v, 4, ErrorCode.none, validate_only=True)


def add_partitions_with_assignments(pair: Pair, v: int) -> None:
    partitions_case(pair, v, 3, ErrorCode.none, assignments=[[1]])


def add_partitions_with_wrong_assignments(pair: Pair, v: int) -> None:
    partitions_case(pair, v, 4, ErrorCode.invalid_replica_assignment, assignments=[[1]])


def add_partitions_to_fewer(pair: Pair, v: int) -> None:
    partitions_case(pair, v, 1, ErrorCode.invalid_partitions)


def add_partitions_to_the_same_count(pair: Pair, v: int) -> None:
    partitions_case(pair, v, 2, ErrorCode.invalid_partitions)


def add_partitions_to_an_unknown_topic(pair: Pair, v: int) -> None:
    answers = pair.compare(create_partitions(v, unique("cp-unknown"), 3))
    assert answers.kafka.results[0].error_code == ErrorCode.unknown_topic_or_partition


# -- DescribeConfigs ------------------------------------------------------------------------

def describe_configs(v: int, resource_type: int, name: str,
                     keys: tuple[str, ...] | None = None, synonyms: bool = False,
                     documentation: bool = False) -> Any:
    return body(DESCRIBE_CONFIGS, v, include_synonyms=synonyms,
                include_documentation=documentation,
                resources=(part(DESCRIBE_CONFIGS, v, "DescribeConfigsResource",
                                resource_type=resource_type, resource_name=name,
                                configuration_keys=keys),))


TOPIC_KEYS = ("cleanup.policy", "retention.ms", "segment.bytes", "max.message.bytes",
              "min.insync.replicas", "compression.type", "message.timestamp.type")


def describe_named_topic_configs(pair: Pair, v: int) -> None:
    name = unique("dc")
    create_topic(pair, name, configs={"retention.ms": "3600000"})
    answers = pair.send(describe_configs(v, TOPIC_RESOURCE, name, TOPIC_KEYS, synonyms=True,
                                         documentation=True))
    same_configs(pair, answers, ignore=DOCUMENTATION)


def describe_all_topic_configs(pair: Pair, v: int) -> None:
    name = unique("dc-all")
    create_topic(pair, name, configs={"cleanup.policy": "compact"})
    same_configs(pair, pair.send(describe_configs(v, TOPIC_RESOURCE, name)))


def describe_configs_of_an_unknown_topic(pair: Pair, v: int) -> None:
    answers = pair.compare(describe_configs(v, TOPIC_RESOURCE, unique("dc-unknown")))
    assert answers.kafka.results[0].error_code == ErrorCode.unknown_topic_or_partition


def describe_an_unknown_config_key(pair: Pair, v: int) -> None:
    name = unique("dc-key")
    create_topic(pair, name)
    pair.compare(describe_configs(v, TOPIC_RESOURCE, name, ("no.such.config",)))


def describe_named_broker_configs(pair: Pair, v: int) -> None:
    """Keys the reference Kafka's server.properties leaves at their defaults."""
    pair.compare(describe_configs(v, BROKER_RESOURCE, "1",
                                  ("log.retention.hours", "log.segment.bytes",
                                   "auto.create.topics.enable", "message.max.bytes"),
                                  synonyms=True))


# Set by the reference's server.properties or by the test harness: each broker's setup.
# The reference runs as a one-node KRaft quorum (process.roles, node.id and the
# controller settings set in its file); Kafkernel's embedded node needs none of them.
SETUP_KEYS = frozenset({"broker.id", "listeners", "advertised.listeners",
                        "listener.security.protocol.map", "log.dirs", "num.partitions",
                        "inter.broker.listener.name", "node.id", "process.roles",
                        "controller.listener.names", "controller.quorum.voters"})
KAFKERNEL_ONLY_KEYS = frozenset({"metrics.host", "metrics.port", "logging.format",
                                 "logging.level",
                                 "leader.imbalance.per.broker.percentage"})  # D9
KAFKA_INTERNAL_KEYS = frozenset({"min.incremental.fetch.session.eviction.ms"})  # D16
RUNTIME_KEYS = ("default.replication.factor", "fetch.max.bytes")  # D10
# D12: queued.max.request.bytes's default (the connection limits are compared: dynamic
# on both brokers).
NETWORK_KEYS = ("queued.max.request.bytes",)
# D14: the TLS settings and the inter-broker login are read at start (Kafka reconfigures
# them at runtime).
TLS_KEYS = (*(k.name for k in schema_keys(BrokerConfig).values()
              if k.name.startswith("ssl.") and k.name != "ssl.principal.mapping.rules"),
            "sasl.jaas.config", "sasl.mechanism.inter.broker.protocol")


# D17: the log cleaner's settings are read at start (Kafka restarts its cleaner threads).
CLEANER_KEYS = ("log.cleaner.threads", "log.cleaner.dedupe.buffer.size",
                "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second",
                "log.cleaner.backoff.ms")


def read_only_as_kafka(answers: Answers) -> Answers:
    """Kafkernel's answer with the read_only of the ssl.* settings, the inter-broker
    login and the cleaner's settings as Kafka's (false): the one field D14 and D17
    explain; their values, sources, types and synonyms are compared."""
    documented("D14")
    documented("D17")
    reconfigurable = frozenset((*TLS_KEYS, *CLEANER_KEYS))
    results = tuple(
        dataclasses.replace(r, configs=tuple(
            dataclasses.replace(c, read_only=False) if c.name in reconfigurable else c
            for c in r.configs))
        for r in answers.kafkernel.results)
    return dataclasses.replace(answers, kafkernel=dataclasses.replace(
        answers.kafkernel, results=results))


def describe_every_broker_config_kafkernel_has(pair: Pair, v: int) -> None:
    documented("D9")
    documented("D16")
    keys = tuple(sorted(k.name for k in schema_keys(BrokerConfig).values()
                        if k.name not in SETUP_KEYS | KAFKERNEL_ONLY_KEYS
                        | KAFKA_INTERNAL_KEYS))
    answers = pair.send(describe_configs(v, BROKER_RESOURCE, "1", keys, synonyms=True,
                                         documentation=v >= 3))
    answers = drop_configs(answers, "D3", ("min.insync.replicas",))
    answers = drop_configs(answers, "D10", RUNTIME_KEYS)
    answers = read_only_as_kafka(answers)
    pair.assert_same(drop_configs(answers, "D12", NETWORK_KEYS), ignore=DOCUMENTATION)
    # Neither describes the replication throttle rates where they are not set.
    assert len(answers.kafka.results[0].configs) == (
        len(keys) - 1 - len(RUNTIME_KEYS) - len(DYNAMIC_ONLY_KEYS))
    # Of the keys left out above, the type (v3+) and sensitivity are still Kafka's.
    others = tuple(sorted(SETUP_KEYS | set(RUNTIME_KEYS) | (set(NETWORK_KEYS) & set(keys))))
    answers = pair.send(describe_configs(v, BROKER_RESOURCE, "1", others))
    kinds = [{c.name: (getattr(c, "config_type", None), c.is_sensitive)
              for c in answer.results[0].configs} for answer in (answers.kafka,
                                                                 answers.kafkernel)]
    assert kinds[0] == kinds[1]


def describe_configs_of_another_broker(pair: Pair, v: int) -> None:
    answers = pair.compare(describe_configs(v, BROKER_RESOURCE, "7", ("num.partitions",)))
    assert answers.kafka.results[0].error_code != ErrorCode.none


def describe_configs_of_an_unknown_resource_type(pair: Pair, v: int) -> None:
    pair.compare(describe_configs(v, 99, "x"))


# -- AlterConfigs and IncrementalAlterConfigs -------------------------------------------------

def alter_configs(v: int, name: str, configs: dict[str, str | None], *,
                  validate_only: bool = False, resource_type: int = TOPIC_RESOURCE) -> Any:
    return body(ALTER_CONFIGS, v, validate_only=validate_only, resources=(part(
        ALTER_CONFIGS, v, "AlterConfigsResource", resource_type=resource_type,
        resource_name=name, configs=tuple(part(ALTER_CONFIGS, v, "AlterableConfig", name=k,
                                               value=x) for k, x in configs.items())),))


def incremental(v: int, name: str, *ops: tuple[str, int, str | None],
                validate_only: bool = False, resource_type: int = TOPIC_RESOURCE) -> Any:
    return body(INCREMENTAL_ALTER_CONFIGS, v, validate_only=validate_only, resources=(part(
        INCREMENTAL_ALTER_CONFIGS, v, "AlterConfigsResource", resource_type=resource_type,
        resource_name=name, configs=tuple(part(
            INCREMENTAL_ALTER_CONFIGS, v, "AlterableConfig", name=k, config_operation=op,
            value=x) for k, op, x in ops)),))


def altered(pair: Pair, request: Any, expected: ErrorCode, check: str | None = None) -> None:
    answers = pair.compare(request)
    assert answers.kafka.responses[0].error_code == expected, answers.kafka
    if check is not None:
        same_configs(pair, pair.send(describe_configs(4, TOPIC_RESOURCE, check, TOPIC_KEYS)))


def alter_topic_configs(pair: Pair, v: int) -> None:
    name = unique("ac")
    create_topic(pair, name, configs={"cleanup.policy": "compact"})
    altered(pair, alter_configs(v, name, {"retention.ms": "1000", "segment.bytes": "1048576"}),
            ErrorCode.none, check=name)


def alter_topic_configs_validate_only(pair: Pair, v: int) -> None:
    name = unique("ac-validate")
    create_topic(pair, name)
    altered(pair, alter_configs(v, name, {"retention.ms": "1000"}, validate_only=True),
            ErrorCode.none, check=name)


def alter_configs_of_an_unknown_topic(pair: Pair, v: int) -> None:
    altered(pair, alter_configs(v, unique("ac-unknown"), {"retention.ms": "1"}),
            ErrorCode.unknown_topic_or_partition)


def alter_an_unknown_config(pair: Pair, v: int) -> None:
    name = unique("ac-key")
    create_topic(pair, name)
    altered(pair, alter_configs(v, name, {"no.such.config": "1"}), ErrorCode.invalid_config)


def alter_to_an_invalid_value(pair: Pair, v: int) -> None:
    name = unique("ac-value")
    create_topic(pair, name)
    altered(pair, alter_configs(v, name, {"retention.ms": "soon"}), ErrorCode.invalid_config)
    altered(pair, alter_configs(v, name, {"min.insync.replicas": "0"}),
            ErrorCode.invalid_config, check=name)


def alter_a_segment_below_the_minimum(pair: Pair, v: int) -> None:
    name = unique("ac-seg")
    create_topic(pair, name)
    altered(pair, alter_configs(v, name, {"segment.bytes": "14"}), ErrorCode.invalid_config,
            check=name)


def increment_topic_configs(pair: Pair, v: int) -> None:
    name = unique("iac")
    create_topic(pair, name, configs={"retention.ms": "1000"})
    altered(pair, incremental(v, name, ("segment.bytes", SET, "1048576"),
                              ("retention.ms", DELETE, None),
                              ("cleanup.policy", APPEND, "compact")),
            ErrorCode.none, check=name)
    altered(pair, incremental(v, name, ("cleanup.policy", SUBTRACT, "delete")),
            ErrorCode.none, check=name)


def increment_validate_only(pair: Pair, v: int) -> None:
    name = unique("iac-validate")
    create_topic(pair, name)
    altered(pair, incremental(v, name, ("retention.ms", SET, "1000"), validate_only=True),
            ErrorCode.none, check=name)


def increment_configs_of_an_unknown_topic(pair: Pair, v: int) -> None:
    altered(pair, incremental(v, unique("iac-unknown"), ("retention.ms", SET, "1")),
            ErrorCode.unknown_topic_or_partition)


def increment_an_unknown_config(pair: Pair, v: int) -> None:
    name = unique("iac-key")
    create_topic(pair, name)
    altered(pair, incremental(v, name, ("no.such.config", SET, "1")), ErrorCode.invalid_config)


def increment_to_an_invalid_value(pair: Pair, v: int) -> None:
    name = unique("iac-value")
    create_topic(pair, name)
    altered(pair, incremental(v, name, ("retention.ms", SET, "soon")), ErrorCode.invalid_config)


def increment_a_segment_below_the_minimum(pair: Pair, v: int) -> None:
    name = unique("iac-seg")
    create_topic(pair, name)
    altered(pair, incremental(v, name, ("segment.bytes", SET, "14")),
            ErrorCode.invalid_config, check=name)
    # The broker's default too (validate_only: the shared brokers keep theirs).
    pair.compare(incremental(v, "", ("log.segment.bytes", SET, "14"), validate_only=True,
                             resource_type=BROKER_RESOURCE))


def increment_throttled_replicas(pair: Pair, v: int) -> None:
    """KIP-73's lists, as kafka-reassign-partitions --throttle sets them: described as
    set, appended to as lists, and Kafka's ThrottledReplicaListValidator's refusals
    (empty entries only at the end, '*' alone)."""
    name = unique("iac-throttle")
    create_topic(pair, name)
    leader, follower = ("leader.replication.throttled.replicas",
                        "follower.replication.throttled.replicas")
    altered(pair, incremental(v, name, (leader, SET, "0:1,0:2"), (follower, SET, "*")),
            ErrorCode.none)
    same_configs(pair, pair.send(describe_configs(4, TOPIC_RESOURCE, name)))
    altered(pair, incremental(v, name, (leader, APPEND, "0:3")), ErrorCode.none)
    same_configs(pair, pair.send(describe_configs(4, TOPIC_RESOURCE, name,
                                                  (leader, follower), synonyms=True)))
    for bad in ("*,0:1", "0:x", "1", "0:1;0:2"):
        altered(pair, incremental(v, name, (leader, SET, bad)), ErrorCode.invalid_config)
    for odd in ("0:1,,0:2", "*,", "0:99999999999"):  # Kafka 4.3's validator lets these by
        altered(pair, incremental(v, name, (follower, SET, odd)), ErrorCode.none)
        same_configs(pair, pair.send(describe_configs(4, TOPIC_RESOURCE, name, (follower,))))


def increment_a_replication_throttled_rate(pair: Pair, v: int) -> None:
    """The rates kafka-reassign-partitions --throttle sets per broker: described once
    set, with their synonyms, and gone again once deleted (the shared brokers keep no
    throttle)."""
    rates = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
    try:
        pair.compare(incremental(v, "1", (rates[0], SET, "1000000"), resource_type=BROKER_RESOURCE))
        describe = describe_configs(4, BROKER_RESOURCE, "1", rates, synonyms=True)
        wait_for(pair.kafka, "the rate described", lambda: bool(
            pair.kafka.send(describe).results[0].configs))
        pair.compare(describe, ignore=DOCUMENTATION)
        pair.compare(incremental(v, "1", (rates[1], SET, "-1"),
                                 resource_type=BROKER_RESOURCE))
    finally:
        pair.compare(incremental(v, "1", (rates[0], DELETE, None),
                                 resource_type=BROKER_RESOURCE))
    wait_for(pair.kafka, "the rate removed", lambda: not pair.kafka.send(
        describe_configs(4, BROKER_RESOURCE, "1", rates)).results[0].configs)
    pair.compare(describe_configs(4, BROKER_RESOURCE, "1", rates, synonyms=True))


def increment_with_an_invalid_operation(pair: Pair, v: int) -> None:
    name = unique("iac-op")
    create_topic(pair, name)
    altered(pair, incremental(v, name, ("retention.ms", APPEND, "1")), ErrorCode.invalid_config)
    answers = pair.send(incremental(v, name, ("retention.ms", 9, "1")))
    documented("D6")
    assert answers.kafka.responses[0].error_code == ErrorCode.unknown_server_error
    assert answers.kafkernel.responses[0].error_code == ErrorCode.invalid_request


def increment_the_same_key_twice(pair: Pair, v: int) -> None:
    name = unique("iac-twice")
    create_topic(pair, name)
    altered(pair, incremental(v, name, ("retention.ms", SET, "1"), ("retention.ms", SET, "2")),
            ErrorCode.invalid_request)


# -- DescribeCluster ------------------------------------------------------------------------

def describe_cluster(pair: Pair, v: int) -> None:
    pair.compare(body(DESCRIBE_CLUSTER, v, include_cluster_authorized_operations=False,
                      endpoint_type=1, include_fenced_brokers=True))


def describe_cluster_with_authorized_operations(pair: Pair, v: int) -> None:
    pair.compare(body(DESCRIBE_CLUSTER, v, include_cluster_authorized_operations=True,
                      endpoint_type=1))


def describe_cluster_controllers(pair: Pair, v: int) -> None:
    """Endpoint type 2 (controllers, v1+) is refused by a broker listener."""
    pair.compare(body(DESCRIBE_CLUSTER, v, endpoint_type=2 if v >= 1 else 1))


# -- DescribeTopicPartitions (KIP-966) ---------------------------------------------------------

def describe_topic_partitions(v: int, *names: str, limit: int = 2000,
                              cursor: tuple[str, int] | None = None) -> Any:
    return body(DESCRIBE_TOPIC_PARTITIONS, v, response_partition_limit=limit,
                topics=tuple(part(DESCRIBE_TOPIC_PARTITIONS, v, "TopicRequest", name=n)
                             for n in names),
                cursor=None if cursor is None else part(
                    DESCRIBE_TOPIC_PARTITIONS, v, "Cursor", topic_name=cursor[0],
                    partition_index=cursor[1]))


def describe_topic_partitions_of_topics(pair: Pair, v: int) -> None:
    a, b = unique("dtp-a"), unique("dtp-b")
    create_topic(pair, a, partitions=3)
    create_topic(pair, b)
    pair.compare(describe_topic_partitions(v, a, b), ordered=True)


def describe_topic_partitions_by_pages(pair: Pair, v: int) -> None:
    a, b = unique("dtp-page-a"), unique("dtp-page-b")
    create_topic(pair, a, partitions=3)
    create_topic(pair, b, partitions=2)
    pair.compare(describe_topic_partitions(v, a, b, limit=2), ordered=True)
    pair.compare(describe_topic_partitions(v, a, b, limit=2, cursor=(a, 2)), ordered=True)


def describe_topic_partitions_of_unknown_and_invalid_names(pair: Pair, v: int) -> None:
    pair.compare(describe_topic_partitions(v, unique("dtp-unknown"), "bad/name"))


CASES: list[tuple[int, Case]] = [
    (METADATA, metadata_of_a_topic),
    (METADATA, metadata_with_authorized_operations),
    (METADATA, metadata_of_an_unknown_topic),
    (METADATA, metadata_of_an_invalid_name),
    (METADATA, metadata_with_auto_creation),
    (METADATA, metadata_of_an_unknown_topic_id),
    (METADATA, metadata_of_a_known_topic_id),
    (CREATE_TOPICS, create_a_topic),
    (CREATE_TOPICS, create_with_defaults),
    (CREATE_TOPICS, create_validate_only),
    (CREATE_TOPICS, create_with_assignments),
    (CREATE_TOPICS, create_an_existing_topic),
    (CREATE_TOPICS, create_with_a_bad_replication_factor),
    (CREATE_TOPICS, create_with_bad_partitions),
    (CREATE_TOPICS, create_with_an_unknown_config),
    (CREATE_TOPICS, create_with_an_invalid_config_value),
    (CREATE_TOPICS, create_with_a_null_config_value),
    (CREATE_TOPICS, create_with_a_segment_below_the_minimum),
    (CREATE_TOPICS, create_with_internal_segment_bytes),
    (CREATE_TOPICS, create_with_assignments_and_partitions),
    (CREATE_TOPICS, create_with_an_unknown_broker_in_assignments),
    (CREATE_TOPICS, create_the_same_name_twice_in_one_request),
    (DELETE_TOPICS, delete_a_topic),
    (DELETE_TOPICS, delete_a_topic_by_id),
    (DELETE_TOPICS, delete_an_unknown_topic),
    (DELETE_TOPICS, delete_an_unknown_topic_id),
    (CREATE_PARTITIONS, add_partitions),
    (CREATE_PARTITIONS, add_partitions_validate_only),
    (CREATE_PARTITIONS, add_partitions_with_assignments),
    (CREATE_PARTITIONS, add_partitions_with_wrong_assignments),
    (CREATE_PARTITIONS, add_partitions_to_fewer),
    (CREATE_PARTITIONS, add_partitions_to_the_same_count),
    (CREATE_PARTITIONS, add_partitions_to_an_unknown_topic),
    (DESCRIBE_CONFIGS, describe_named_topic_configs),
    (DESCRIBE_CONFIGS, describe_all_topic_configs),
    (DESCRIBE_CONFIGS, describe_configs_of_an_unknown_topic),
    (DESCRIBE_CONFIGS, describe_an_unknown_config_key),
    (DESCRIBE_CONFIGS, describe_named_broker_configs),
    (DESCRIBE_CONFIGS, describe_every_broker_config_kafkernel_has),
    (DESCRIBE_CONFIGS, describe_configs_of_another_broker),
    (DESCRIBE_CONFIGS, describe_configs_of_an_unknown_resource_type),
    (ALTER_CONFIGS, alter_topic_configs),
    (ALTER_CONFIGS, alter_topic_configs_validate_only),
    (ALTER_CONFIGS, alter_configs_of_an_unknown_topic),
    (ALTER_CONFIGS, alter_an_unknown_config),
    (ALTER_CONFIGS, alter_to_an_invalid_value),
    (ALTER_CONFIGS, alter_a_segment_below_the_minimum),
    (INCREMENTAL_ALTER_CONFIGS, increment_topic_configs),
    (INCREMENTAL_ALTER_CONFIGS, increment_validate_only),
    (INCREMENTAL_ALTER_CONFIGS, increment_configs_of_an_unknown_topic),
    (INCREMENTAL_ALTER_CONFIGS, increment_an_unknown_config),
    (INCREMENTAL_ALTER_CONFIGS, increment_to_an_invalid_value),
    (INCREMENTAL_ALTER_CONFIGS, increment_a_segment_below_the_minimum),
    (INCREMENTAL_ALTER_CONFIGS, increment_throttled_replicas),
    (INCREMENTAL_ALTER_CONFIGS, increment_a_replication_throttled_rate),
    (INCREMENTAL_ALTER_CONFIGS, increment_with_an_invalid_operation),
    (INCREMENTAL_ALTER_CONFIGS, increment_the_same_key_twice),
    (DESCRIBE_CLUSTER, describe_cluster),
    (DESCRIBE_CLUSTER, describe_cluster_with_authorized_operations),
    (DESCRIBE_CLUSTER, describe_cluster_controllers),
    (DESCRIBE_TOPIC_PARTITIONS, describe_topic_partitions_of_topics),
    (DESCRIBE_TOPIC_PARTITIONS, describe_topic_partitions_by_pages),
    (DESCRIBE_TOPIC_PARTITIONS, describe_topic_partitions_of_unknown_and_invalid_names),
]


@pytest.mark.parametrize(("api_key", "version", "case"), cases(*CASES))
def test_conformance(shared: Pair, api_key: int, version: int, case: Case) -> None:
    case(shared, version)


