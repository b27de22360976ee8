"""CreateTopics (key 19): validate each topic as Kafka's controller does, then create the
valid ones through the metadata backend.

Checks run in Kafka's order (ReplicationControlManager.createTopics): duplicate names in
the request, authorization, the name (and '.'/'_' collisions), existence, configs, then
partitions, replication factor or the manual assignment. v5+ answers with the topic id,
partition count, replication factor and every config of the new topic with its source.
"""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kernel.cluster import (
    CLUSTER_METADATA_PROHIBITED,
    CLUSTER_METADATA_TOPIC,
    ClusterImage,
    NewTopic,
    TopicImage,
    is_internal_topic,
    topic_name_problem,
)
from kernel.config import BrokerConfig
from kernel.handlers.config_entries import BrokerConfigView, checked_topic_configs
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import RequestContext

API_KEY = 19
# v0/v1 are not in kio (Kafka 4 removed them); v2-7 are fully served.
MIN_VERSION = 2
MAX_VERSION = 7

ZERO_UUID = uuid.UUID(int=0)
# Kafka's controller refuses requests that would add more partitions than one metadata
# batch may hold (KAFKA-17870), rather than build an unbounded batch in memory.
MAX_PARTITIONS_PER_BATCH = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


@dataclass(slots=True)
class _Outcome:
    name: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    new_topic: NewTopic | None = None
    created: TopicImage | None = None
    configs: dict[str, str] = field(default_factory=dict)


def _collision_key(name: str) -> str:
    # Kafka's metric names turn '.' into '_', so two such topics must not coexist.
    return name.replace(".", "_")


async def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    image = services.metadata.image
    view = BrokerConfigView(services, image)
    authorize = ctx.authorize
    cluster_create = authorize(ctx.session, "CREATE", "CLUSTER", CLUSTER_NAME)
    counts = Counter(t.name for t in request.topics)
    if _total_partitions(request.topics, view.effective) > MAX_PARTITIONS_PER_BATCH:
        refused = [_Outcome(n, ErrorCode.policy_violation, TOO_MANY_PARTITIONS) for n in counts]
        return _respond(ctx, view, refused)
    collisions = {_collision_key(n): n for n in image.topics}
    outcomes: dict[str, _Outcome] = {}
    for topic in request.topics:
        name = topic.name
        if name in outcomes:
            continue
        outcome = outcomes[name] = _Outcome(name)
        if counts[name] > 1:
            outcome.error, outcome.message = ErrorCode.invalid_request, "Duplicate topic name."
        elif name == CLUSTER_METADATA_TOPIC:
            outcome.error, outcome.message = (ErrorCode.invalid_request,
                                              CLUSTER_METADATA_PROHIBITED)
        elif not (cluster_create or authorize(ctx.session, "CREATE", "TOPIC", name)):
            outcome.error = ErrorCode.topic_authorization_failed
            outcome.message = "Authorization failed."
        else:
            try:
                new_topic = _validate(topic, image, view.effective, collisions)
                # KIP-599: the controller takes the partitions last (validate_only too).
                ctx.mutation_quota.record(new_topic.num_partitions)
            except KafkaError as e:
                outcome.error, outcome.message = e.error_code, e.message
            else:
                outcome.new_topic = new_topic
                outcome.configs = dict(outcome.new_topic.configs)
                collisions[_collision_key(name)] = name
    if not request.validate_only:
        await _create(ctx, [o for o in outcomes.values() if o.new_topic is not None])
        # A big topic's logs are made off the event loop: answer once they exist.
        await services.replicas.caught_up()
    return _respond(ctx, view, list(outcomes.values()))


def _total_partitions(topics: Any, cfg: BrokerConfig) -> int:
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += cfg.num_partitions
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


def _validate(topic: Any, image: ClusterImage, cfg: BrokerConfig,
              collisions: dict[str, str]) -> NewTopic:
    name = topic.name
    problem = topic_name_problem(name)
    if problem is not None:
        raise KafkaError(ErrorCode.invalid_topic_exception, problem)
    if name in image.topics:
        raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    other = collisions.get(_collision_key(name))
    if other is not None and other != name:
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"Topic '{name}' collides with existing topic: {other}")
    configs = checked_topic_configs({c.name: c.value for c in topic.configs})
    internal = is_internal_topic(name)
    if topic.assignments:
        assignments = _manual_assignments(topic, image)
        return NewTopic(name, len(assignments), len(assignments[0]), configs, assignments,
                        internal)
    partitions = cfg.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    replication = (cfg.default_replication_factor if topic.replication_factor == -1
                   else topic.replication_factor)
    if partitions <= 0:
        raise KafkaError(ErrorCode.invalid_partitions,
                         "Number of partitions was set to an invalid non-positive value.")
    if replication <= 0:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         "Replication factor must be larger than 0, or -1 to use the default "
                         "value.")
    if replication > len(image.brokers):
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication} time(s): The target "
                         f"replication factor of {replication} cannot be reached because only "
                         f"{len(image.brokers)} broker(s) are registered.")
    return NewTopic(name, partitions, replication, configs, None, internal)


def _manual_assignments(topic: Any, image: ClusterImage) -> dict[int, tuple[int, ...]]:
    if topic.replication_factor != -1:
        raise KafkaError(ErrorCode.invalid_request, "A manual partition assignment was "
                         "specified, but replication factor was not set to -1.")
    if topic.num_partitions != -1:
        raise KafkaError(ErrorCode.invalid_request, "A manual partition assignment was "
                         "specified, but numPartitions was not set to -1.")
    assignments: dict[int, tuple[int, ...]] = {}
    replication: int | None = None
    for a in topic.assignments:
        if a.partition_index in assignments:
            raise KafkaError(ErrorCode.invalid_replica_assignment, "Found multiple manual "
                             f"partition assignments for partition {a.partition_index}")
        replicas = tuple(int(b) for b in a.broker_ids)
        check_replicas(replicas, image, replication)
        replication = len(replicas)
        assignments[a.partition_index] = replicas
    if sorted(assignments) != list(range(len(assignments))):
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "partitions should be a consecutive 0-based integer sequence")
    return dict(sorted(assignments.items()))


def check_replicas(replicas: tuple[int, ...], image: ClusterImage,
                   replication: int | None) -> None:
    """Kafka's validateManualPartitionAssignment (CreatePartitions shares it)."""
    if not replicas:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "The manual partition assignment includes an empty replica list.")
    previous: int | None = None
    for broker_id in sorted(replicas):
        if broker_id not in image.brokers:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"The manual partition assignment includes broker {broker_id}, "
                             "but no such broker is registered.")
        if broker_id == previous:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"The manual partition assignment includes the broker {broker_id} "
                             "more than once.")
        previous = broker_id
    if replication is not None and len(replicas) != replication:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"The manual partition assignment includes a partition with "
                         f"{len(replicas)} replica(s), but this is not consistent with previous "
                         f"partitions, which have {replication} replica(s).")


async def _create(ctx: RequestContext, outcomes: list[_Outcome]) -> None:
    if not outcomes:
        return
    backend = ctx.services.metadata
    try:
        # One metadata write for the whole request; the backend creates all or none.
        created = await backend.create_topics([o.new_topic for o in outcomes if o.new_topic])
    except KafkaError as e:
        if e.error_code == ErrorCode.request_timed_out:
            # The metadata store is out of reach: every topic gets that answer at once
            # (one by one, each would wait its own timeout, long after the client).
            for o in outcomes:
                o.error, o.message = e.error_code, e.message
            return
        # Someone else got in between (or one topic is bad): retry one by one so that
        # each topic gets its own answer.
        for o in outcomes:
            assert o.new_topic is not None
            try:
                (o.created,) = await backend.create_topics([o.new_topic])
            except KafkaError as e:
                o.error, o.message = e.error_code, e.message
        return
    for o, image in zip(outcomes, created, strict=True):
        o.created = image


def _respond(ctx: RequestContext, view: BrokerConfigView, outcomes: list[_Outcome]) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    authorize = ctx.authorize
    results = []
    for o in outcomes:
        if o.error != ErrorCode.none or o.new_topic is None:
            results.append(make(
                m.CreatableTopicResult, name=o.name, topic_id=ZERO_UUID, error_code=o.error,
                error_message=o.message, num_partitions=-1, replication_factor=-1, configs=(),
            ))
            continue
        nt = o.new_topic
        configs: tuple[Any, ...] = ()
        config_error = ErrorCode.none
        if ctx.api_version >= 5:
            if authorize(ctx.session, "DESCRIBE_CONFIGS", "TOPIC", o.name):
                configs = tuple(
                    m.CreatableTopicConfigs(
                        name=e.name, value=e.value, read_only=e.read_only,
                        config_source=e.source, is_sensitive=e.sensitive,
                    )
                    for e in view.topic_entries(o.configs)
                )
            else:
                config_error = ErrorCode.topic_authorization_failed
        results.append(make(
            m.CreatableTopicResult,
            name=o.name,
            # Kafka gives a validate_only answer the id the topic would have had.
            topic_id=o.created.topic_id if o.created is not None else uuid.uuid4(),
            error_code=ErrorCode.none,
            error_message=None,
            topic_config_error_code=config_error.value,
            num_partitions=nt.num_partitions,
            replication_factor=nt.replication_factor,
            configs=configs,
        ))
    return make(m.CreateTopicsResponse, throttle_time=datetime.timedelta(0),
                topics=tuple(results))
