"""Internal topics and topic names, Kafka 4.3 against Kafkernel over raw kio requests.

Each test first checks Kafka's own answer against the record below (so the record stays
true when the pinned version moves), then compares Kafkernel's answer with Kafka's field
by field, then checks on both brokers whether the action happened.

What Kafka 4.3 (KRaft) does, in short: only ``__cluster_metadata`` is protected (its
creation is refused, and it exists for no API). ``__consumer_offsets`` and
``__transaction_state`` may be created by hand (they are then internal), extended,
reconfigured and deleted like any topic; Metadata calls them internal even when they do
not exist.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.alter_configs.v2 import request as alter_configs
from kio.schema.create_partitions.v3 import request as create_partitions
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter_configs
from kio.schema.metadata.v12 import request as metadata
from kio.schema.produce.v9 import request as produce
from kio.schema.types import TopicName

from kernel.protocol.records import SimpleRecord, build_batch
from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.reference.conformance import documented
from tests.reference.diff import Answers, Pair, Side, kafka_side, kafkernel_side

OFFSETS = "__consumer_offsets"
TRANSACTIONS = "__transaction_state"
CLUSTER_METADATA = "__cluster_metadata"
TIMEOUT = datetime.timedelta(seconds=10)
ZERO_ID = uuid.UUID(int=0)
TOPIC_RESOURCE = 2
SET, DELETE = 0, 1
# The topic configs Kafka gives __consumer_offsets (offsets.topic.* and its own defaults).
OFFSETS_CONFIGS = {"cleanup.policy": "compact", "compression.type": "producer",
                   "segment.bytes": "104857600"}
# CreateTopics v5+ lists every topic config; which ones is the CreateTopics tests' concern.
NOT_CONFIGS = ("topics.configs",)


# -- requests -----------------------------------------------------------------------------

def create(*names: str, partitions: int = 1, validate_only: bool = False) -> Any:
    return create_topics.CreateTopicsRequest(
        topics=tuple(create_topics.CreatableTopic(
            name=TopicName(n), num_partitions=partitions, replication_factor=1,
            assignments=(), configs=()) for n in names),
        timeout=TIMEOUT, validate_only=validate_only,
    )


def delete_by_name(name: str) -> Any:
    return delete_topics.DeleteTopicsRequest(
        topics=(delete_topics.DeleteTopicState(name=TopicName(name), topic_id=ZERO_ID),),
        timeout=TIMEOUT)


def delete_by_id(topic_id: uuid.UUID) -> Any:
    return delete_topics.DeleteTopicsRequest(
        topics=(delete_topics.DeleteTopicState(name=None, topic_id=topic_id),), timeout=TIMEOUT)


def describe(*names: str) -> Any:
    """Metadata of these topics; of all topics when none is named (a null list)."""
    topics = tuple(metadata.MetadataRequestTopic(topic_id=ZERO_ID, name=TopicName(n))
                   for n in names) or None
    return metadata.MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False)


def describe_configs_of(name: str, keys: tuple[str, ...]) -> Any:
    return describe_configs.DescribeConfigsRequest(
        resources=(describe_configs.DescribeConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=name, configuration_keys=keys),),
        include_synonyms=False, include_documentation=False)


def set_configs(name: str, configs: dict[str, str]) -> Any:
    """AlterConfigs: the topic's configs become exactly ``configs``."""
    return alter_configs.AlterConfigsRequest(
        resources=(alter_configs.AlterConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=name,
            configs=tuple(alter_configs.AlterableConfig(name=k, value=v)
                          for k, v in configs.items())),),
        validate_only=False)


def change_config(name: str, key: str, value: str, *, validate_only: bool = False) -> Any:
    return incremental_alter_configs.IncrementalAlterConfigsRequest(
        resources=(incremental_alter_configs.AlterConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=name,
            configs=(incremental_alter_configs.AlterableConfig(
                name=key, config_operation=SET, value=value),)),),
        validate_only=validate_only)


# -- state of a broker --------------------------------------------------------------------

def topic_state(side: Side, name: str) -> Any:
    return side.send(describe(name)).topics[0]


def wait_for(side: Side, what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Kafka applies a change to its metadata image shortly after it answered."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{side.label}: {what} within {timeout} s"
        time.sleep(0.05)


def ensure_offsets_topic(side: Side) -> None:
    """Use a group, so that the broker creates __consumer_offsets if it has none."""
    def ready() -> bool:
        answer = side.send(find_coordinator.FindCoordinatorRequest(
            key_type=0, coordinator_keys=("reference-probe",)))
        return answer.coordinators[0].error_code == ErrorCode.none
    def led() -> bool:
        partitions = topic_state(side, OFFSETS).partitions
        return bool(partitions) and all(p.leader_id >= 0 for p in partitions)
    wait_for(side, "FindCoordinator answers", ready, timeout=30.0)
    wait_for(side, f"every partition of {OFFSETS} has a leader", led)


def topic_result(answer: Any) -> tuple[ErrorCode, str | None]:
    """(error code, message) of the only topic of a CreateTopics/DeleteTopics answer."""
    results = getattr(answer, "topics", None) or answer.responses
    (result,) = results
    return result.error_code, result.error_message


def config_values(answer: Any) -> dict[str, tuple[str | None, int]]:
    (result,) = answer.results
    assert result.error_code == ErrorCode.none, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


@pytest.fixture
def with_offsets(pair: Pair) -> Pair:
    """Both brokers with __consumer_offsets (Kafkernel creates it at startup)."""
    ensure_offsets_topic(pair.kafka)
    ensure_offsets_topic(pair.kafkernel)
    return pair


# -- CreateTopics of internal topics -------------------------------------------------------

@pytest.mark.reference_pristine
def test_create_consumer_offsets_before_it_exists_is_allowed(
    reference_kafka: ReferenceKafka, broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    """Before any group, Kafka has no __consumer_offsets and lets a client create it
    (validate_only here, so the session's Kafka keeps the topic its coordinator makes).
    Kafkernel's state without a group is a broker without the coordinator plugin."""
    pair = Pair(kafka_side(reference_kafka),
                kafkernel_side(broker_factory(plugins=("metadata_kraft",))))
    state = topic_state(pair.kafka, OFFSETS)
    assert state.error_code == ErrorCode.unknown_topic_or_partition, (
        "a test used a group on the reference Kafka before this reference_pristine test")

    answers = pair.send(create(OFFSETS, partitions=50, validate_only=True))
    assert topic_result(answers.kafka) == (ErrorCode.none, None)
    assert answers.kafka.topics[0].num_partitions == 50
    pair.assert_same(answers, ignore=NOT_CONFIGS)

    pair.compare(describe(OFFSETS))  # not created; Kafka: unknown, but is_internal=True


def test_create_consumer_offsets_once_it_exists_is_refused(with_offsets: Pair) -> None:
    answers = with_offsets.send(create(OFFSETS, partitions=50))
    assert topic_result(answers.kafka) == (
        ErrorCode.topic_already_exists, "Topic '__consumer_offsets' already exists.")
    with_offsets.assert_same(answers, ignore=NOT_CONFIGS)


def test_create_cluster_metadata_is_prohibited(pair: Pair) -> None:
    for validate_only in (True, False):
        answers = pair.send(create(CLUSTER_METADATA, validate_only=validate_only))
        assert topic_result(answers.kafka) == (
            ErrorCode.invalid_request,
            "Creation of internal topic __cluster_metadata is prohibited.")
        pair.assert_same(answers, ignore=NOT_CONFIGS)
    pair.compare(describe(CLUSTER_METADATA))  # Kafka: unknown, is_internal=False


@pytest.mark.reference_destructive
def test_create_transaction_state_is_allowed_and_internal(pair: Pair) -> None:
    answers = pair.send(create(TRANSACTIONS))
    assert topic_result(answers.kafka) == (ErrorCode.none, None)
    pair.assert_same(answers, ignore=NOT_CONFIGS)
    for side in (pair.kafka, pair.kafkernel):
        wait_for(side, f"{TRANSACTIONS} has a leader",
                 lambda s=side: topic_state(s, TRANSACTIONS).error_code == ErrorCode.none)
    answers = pair.compare(describe(TRANSACTIONS))
    assert answers.kafka.topics[0].is_internal


# -- CreateTopics: names --------------------------------------------------------------------

INVALID_NAMES = {
    ".": "Topic name is invalid: '.' is not allowed",
    "..": "Topic name is invalid: '..' is not allowed",
    "x" * 250: "Topic name is invalid: the length of '" + "x" * 250
               + "' is longer than the max allowed length 249",
    "a/b": "Topic name is invalid: 'a/b' contains one or more characters other than "
           "ASCII alphanumerics, '.', '_' and '-'",
    "": "Topic name is invalid: the empty string is not allowed",
}


@pytest.mark.parametrize("name", list(INVALID_NAMES), ids=[".", "..", "250-chars", "a/b", "empty"])
def test_create_invalid_name(pair: Pair, name: str) -> None:
    answers = pair.send(create(name))
    assert topic_result(answers.kafka) == (ErrorCode.invalid_topic_exception,
                                           INVALID_NAMES[name])
    pair.assert_same(answers, ignore=NOT_CONFIGS)


def test_create_name_colliding_by_dot_and_underscore(pair: Pair) -> None:
    base = f"collide-{uuid.uuid4().hex[:8]}"
    answers = pair.send(create(f"{base}_x"))
    assert topic_result(answers.kafka) == (ErrorCode.none, None)
    pair.assert_same(answers, ignore=NOT_CONFIGS)
    answers = pair.send(create(f"{base}.x"))
    assert topic_result(answers.kafka) == (
        ErrorCode.invalid_topic_exception,
        f"Topic '{base}.x' collides with existing topic: {base}_x")
    pair.assert_same(answers, ignore=NOT_CONFIGS)
    pair.compare(describe(f"{base}.x"))


# -- Metadata ----------------------------------------------------------------------------

def test_metadata_of_all_topics_lists_consumer_offsets_as_internal(with_offsets: Pair) -> None:
    """Only internal-looking names are compared: the session's Kafka holds other tests'
    topics too. __cluster_metadata is never listed."""
    answers = with_offsets.send(describe())
    internal = {
        side: [t for t in answer.topics if t.name.startswith("__")]
        for side, answer in (("kafka", answers.kafka), ("kafkernel", answers.kafkernel))
    }
    assert [(t.name, t.is_internal, len(t.partitions)) for t in internal["kafka"]] == [
        (OFFSETS, True, 50)]
    with_offsets.assert_same(Answers(
        kafka=_with_topics(answers.kafka, internal["kafka"]),
        kafkernel=_with_topics(answers.kafkernel, internal["kafkernel"])))


def _with_topics(answer: Any, topics: list[Any]) -> Any:
    return dataclasses.replace(answer, topics=tuple(topics))


def test_metadata_naming_internal_topics(with_offsets: Pair) -> None:
    """Kafka marks __consumer_offsets and __transaction_state internal even when the topic
    does not exist; __cluster_metadata is unknown and not internal."""
    answers = with_offsets.compare(describe(OFFSETS, TRANSACTIONS, CLUSTER_METADATA))
    kafka = {t.name: (t.error_code, t.is_internal) for t in answers.kafka.topics}
    assert kafka == {
        OFFSETS: (ErrorCode.none, True),
        TRANSACTIONS: (ErrorCode.unknown_topic_or_partition, True),
        CLUSTER_METADATA: (ErrorCode.unknown_topic_or_partition, False),
    }


# -- Configs of __consumer_offsets ----------------------------------------------------------

CONFIG_KEYS = ("cleanup.policy", "compression.type", "segment.bytes", "retention.ms")


def test_describe_configs_of_consumer_offsets(with_offsets: Pair) -> None:
    answers = with_offsets.compare(describe_configs_of(OFFSETS, CONFIG_KEYS))
    assert config_values(answers.kafka) == {
        "cleanup.policy": ("compact", 1), "compression.type": ("producer", 1),
        "segment.bytes": ("104857600", 1), "retention.ms": ("604800000", 5)}


def test_describe_configs_of_cluster_metadata(pair: Pair) -> None:
    """Kafka's message here is empty, unlike the alter APIs' for the same topic."""
    answers = pair.send(describe_configs_of(CLUSTER_METADATA, ("cleanup.policy",)))
    (result,) = answers.kafka.results
    assert (result.error_code, result.error_message, result.configs) == (
        ErrorCode.unknown_topic_or_partition, "", ())
    pair.assert_same(answers)


@pytest.mark.reference_destructive
def test_alter_configs_of_consumer_offsets_is_allowed(with_offsets: Pair) -> None:
    """Kafka guards nothing here: cleanup.policy=delete is taken, and AlterConfigs
    replaces the whole set (the offsets.topic.* configs fall back to defaults)."""
    pair = with_offsets
    try:
        answers = pair.compare(change_config(OFFSETS, "retention.ms", "1000",
                                             validate_only=True))
        assert answers.kafka.responses[0].error_code == ErrorCode.none
        answers = pair.compare(change_config(OFFSETS, "cleanup.policy", "delete"))
        assert answers.kafka.responses[0].error_code == ErrorCode.none
        answers = pair.compare(describe_configs_of(OFFSETS, CONFIG_KEYS))
        assert config_values(answers.kafka)["cleanup.policy"] == ("delete", 1)
        assert config_values(answers.kafka)["retention.ms"] == ("604800000", 5)

        answers = pair.compare(set_configs(OFFSETS, {"retention.ms": "1000"}))
        assert answers.kafka.responses[0].error_code == ErrorCode.none
        answers = pair.compare(describe_configs_of(OFFSETS, CONFIG_KEYS))
        assert config_values(answers.kafka) == {
            "cleanup.policy": ("delete", 5), "compression.type": ("producer", 5),
            "segment.bytes": ("1073741824", 5), "retention.ms": ("1000", 1)}
    finally:
        pair.send(set_configs(OFFSETS, OFFSETS_CONFIGS))
    answers = pair.compare(describe_configs_of(OFFSETS, CONFIG_KEYS))
    assert config_values(answers.kafka)["cleanup.policy"] == ("compact", 1)


def test_alter_configs_of_cluster_metadata_finds_no_topic(pair: Pair) -> None:
    message = "The topic '__cluster_metadata' does not exist."
    for request in (change_config(CLUSTER_METADATA, "retention.ms", "1000"),
                    set_configs(CLUSTER_METADATA, {"retention.ms": "1000"})):
        answers = pair.compare(request)
        (result,) = answers.kafka.responses
        assert (result.error_code, result.error_message) == (
            ErrorCode.unknown_topic_or_partition, message)


# -- CreatePartitions and DeleteTopics ------------------------------------------------------

@pytest.mark.reference_destructive
def test_create_partitions_of_consumer_offsets_is_allowed(with_offsets: Pair) -> None:
    pair = with_offsets
    body = create_partitions.CreatePartitionsRequest(
        topics=(create_partitions.CreatePartitionsTopic(
            name=TopicName(OFFSETS), count=51, assignments=None),),
        timeout=TIMEOUT, validate_only=False)
    answers = pair.compare(body)
    (result,) = answers.kafka.results
    assert (result.error_code, result.error_message) == (ErrorCode.none, None)
    for side in (pair.kafka, pair.kafkernel):
        wait_for(side, f"{OFFSETS} has 51 partitions",
                 lambda s=side: len(topic_state(s, OFFSETS).partitions) == 51)
    pair.compare(describe(OFFSETS))


def test_delete_cluster_metadata_finds_no_topic(pair: Pair) -> None:
    answers = pair.send(delete_by_name(CLUSTER_METADATA))
    assert topic_result(answers.kafka) == (
        ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
    pair.assert_same(answers)


@pytest.mark.reference_destructive
def test_delete_consumer_offsets_by_name_is_allowed(with_offsets: Pair) -> None:
    pair = with_offsets
    try:
        answers = pair.send(delete_by_name(OFFSETS))
        assert topic_result(answers.kafka) == (ErrorCode.none, None)
        pair.assert_same(answers)
        _assert_gone(pair, OFFSETS)
    finally:
        ensure_offsets_topic(pair.kafka)


@pytest.mark.reference_destructive
def test_delete_consumer_offsets_by_topic_id_is_allowed(with_offsets: Pair) -> None:
    """DeleteTopics v6 by id: each broker is sent its own topic id."""
    pair = with_offsets
    try:
        answers = pair.each(
            lambda side: side.send(delete_by_id(topic_state(side, OFFSETS).topic_id)))
        (result,) = answers.kafka.responses
        assert (result.name, result.error_code, result.error_message) == (
            OFFSETS, ErrorCode.none, None)
        pair.assert_same(answers)
        _assert_gone(pair, OFFSETS)
    finally:
        ensure_offsets_topic(pair.kafka)


@pytest.mark.reference_destructive
def test_metadata_does_not_auto_create_an_internal_topic(pair: Pair) -> None:
    """Kafka creates __transaction_state when a Metadata request that may auto-create
    names it; Kafkernel leaves internal topics to the plugin running their coordinator.
    Leaves the Kafka without __transaction_state, as it started."""
    def drop(side: Side) -> None:
        if topic_state(side, TRANSACTIONS).error_code == ErrorCode.none:
            side.send(delete_by_name(TRANSACTIONS))
            wait_for(side, f"{TRANSACTIONS} is gone", lambda: topic_state(
                side, TRANSACTIONS).error_code == ErrorCode.unknown_topic_or_partition)

    auto = dataclasses.replace(describe(TRANSACTIONS), allow_auto_topic_creation=True)
    drop(pair.kafka)
    drop(pair.kafkernel)
    try:
        documented("D13")
        answers = pair.send(auto)
        for answer in (answers.kafka, answers.kafkernel):
            (topic,) = answer.topics
            assert (topic.error_code, topic.is_internal) == (
                ErrorCode.unknown_topic_or_partition, True)
        wait_for(pair.kafka, f"Kafka created {TRANSACTIONS}",
                 lambda: len(pair.kafka.send(auto).topics[0].partitions) == 50)
        (topic,) = pair.kafkernel.send(auto).topics
        assert (topic.error_code, topic.partitions) == (ErrorCode.unknown_topic_or_partition, ())
    finally:
        drop(pair.kafka)


def _assert_gone(pair: Pair, name: str) -> None:
    for side in (pair.kafka, pair.kafkernel):
        wait_for(side, f"{name} is gone", lambda s=side: topic_state(s, name).error_code
                 == ErrorCode.unknown_topic_or_partition)
    pair.compare(describe(name))


def test_produce_to_consumer_offsets_is_refused(with_offsets: Pair) -> None:
    """A client's append to an internal topic: Kafka refuses it (its client id is not
    "__admin_client", the one exception Kafkernel does not make)."""
    garbage = build_batch([SimpleRecord(b"\xff\xff\xff", key=b"\x00\x01\xff\xff")])
    answers = with_offsets.compare(produce.ProduceRequest(
        transactional_id=None, acks=1, timeout=TIMEOUT,
        topic_data=(produce.TopicProduceData(name=TopicName(OFFSETS), partition_data=(
            produce.PartitionProduceData(index=0, records=garbage),)),)))
    (topic,) = answers.kafka.responses
    assert topic.partition_responses[0].error_code == ErrorCode.invalid_topic_exception
