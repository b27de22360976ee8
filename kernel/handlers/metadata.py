"""Metadata (key 3): brokers, controller, cluster id and topics from the cluster image,
auto-creating requested topics when the broker and the request allow it."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Iterator
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.authorized_operations import OPS_NOT_REQUESTED, authorized_operations
from kernel.cluster import (
    CLUSTER_METADATA_TOPIC,
    NO_LEADER,
    ClusterImage,
    NewTopic,
    PartitionState,
    TopicImage,
    is_internal_topic,
    topic_name_problem,
)
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import KafkaError
from kernel.requests import RequestContext
from kernel.slices import BIG_REQUEST_ENTRIES, in_slices

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13

ZERO_UUID = uuid.UUID(int=0)


def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    image = services.metadata.image
    requested = request.topics
    if requested and ctx.api_version < 12 and any(
            t.name is None or getattr(t, "topic_id", None) not in (None, ZERO_UUID)
            for t in requested):
        return _refuse_topic_ids(ctx, requested)
    if requested is None or (ctx.api_version == 0 and not requested):
        if len(image.topics) > BIG_REQUEST_ENTRIES:
            return _all_topics_in_slices(ctx, request, image)
        return _respond(ctx, request, image, list(_all_topics(ctx, image)), [], [])
    if len(requested) > BIG_REQUEST_ENTRIES:
        return _handle_in_slices(ctx, request)
    unknown_ids: list[uuid.UUID | None] = []  # requested by an id that is not known
    names = list(_names(image, requested, unknown_ids))
    creatable = _creatable(ctx, request, image, list(_missing(image, names)))
    if creatable:
        return _create_then_respond(ctx, request, names, unknown_ids, creatable)
    return _respond(ctx, request, image, [], names, unknown_ids)


async def _handle_in_slices(ctx: RequestContext, request: Any) -> Any:
    """``handle`` for thousands of topics named: their work is done in slices that
    give the event loop back (the image is read anew after each wait)."""
    services = ctx.services
    unknown_ids: list[uuid.UUID | None] = []
    names = await in_slices(_names(services.metadata.image, request.topics, unknown_ids))
    missing = await in_slices(_missing(services.metadata.image, names))
    creatable = _creatable(ctx, request, services.metadata.image, missing)
    if creatable:
        return await _create_then_respond(ctx, request, names, unknown_ids, creatable)
    return await _respond_in_slices(ctx, request, services.metadata.image, [], names,
                                    unknown_ids)


def _names(image: ClusterImage, requested: Any,
           unknown_ids: list[uuid.UUID | None]) -> Iterator[str]:
    """The names of the requested topics; ids that are not known go to ``unknown_ids``."""
    for t in requested:
        name = getattr(t, "name", None)
        if name is None:
            topic_id = getattr(t, "topic_id", None)
            found = image.topics_by_id.get(topic_id) if topic_id is not None else None
            if found is None:
                unknown_ids.append(topic_id)
                continue
            name = found.name
        yield name


def _missing(image: ClusterImage, names: list[str]) -> Iterator[str]:
    # Internal topics are created by their coordinators, with their own settings, and
    # __cluster_metadata by no one.
    return (n for n in dict.fromkeys(names)
            if n not in image.topics and topic_name_problem(n) is None
            and n != CLUSTER_METADATA_TOPIC and not is_internal_topic(n))


def _creatable(ctx: RequestContext, request: Any, image: ClusterImage,
               missing: list[str]) -> list[str]:
    allow_auto = getattr(request, "allow_auto_topic_creation", True)
    if missing and allow_auto and ctx.services.config.auto_create_topics_enable:
        return [n for n in missing if ctx.authorize(ctx.session, "CREATE", "TOPIC", n)]
    return []


async def _create_then_respond(ctx: RequestContext, request: Any, names: list[str],
                               unknown_ids: list[uuid.UUID | None], creatable: list[str]) -> Any:
    services = ctx.services
    cfg = services.config
    for name in creatable:
        try:
            await services.metadata.create_topics([
                NewTopic(name, cfg.num_partitions, cfg.default_replication_factor)
            ])
        except KafkaError as e:
            if e.error_code != ErrorCode.topic_already_exists:
                services.log.warning("auto-create failed", topic=name, error=e.error_code.name)
    await services.replicas.caught_up()  # many partitions are made off the loop: led now
    image = services.metadata.image
    if len(names) + len(unknown_ids) > BIG_REQUEST_ENTRIES:
        return await _respond_in_slices(ctx, request, image, [], names, unknown_ids)
    return _respond(ctx, request, image, [], names, unknown_ids)


def _all_topics(ctx: RequestContext, image: ClusterImage) -> Iterator[TopicImage]:
    authorize = ctx.authorize
    return (t for t in image.topics.values()
            if authorize(ctx.session, "DESCRIBE", "TOPIC", t.name))


async def _all_topics_in_slices(ctx: RequestContext, request: Any,
                                image: ClusterImage) -> Any:
    """Every topic of a big cluster: authorized, described and encoded off the loop's
    critical path (the image is the one read when the request arrived)."""
    topics = await in_slices(_all_topics(ctx, image))
    return await _respond_in_slices(ctx, request, image, topics, [], [])


def _refuse_topic_ids(ctx: RequestContext, requested: Any) -> Any:
    """Topic ids arrived in v10 but are served from v12: Kafka answers v10-11 requests
    naming one with INVALID_REQUEST for every topic and no brokers."""
    m = response_module(API_KEY, ctx.api_version)
    topics = tuple(_error_topic(m, t.name, ErrorCode.invalid_request, t.topic_id)
                   for t in requested)
    return make(m.MetadataResponse, throttle_time=datetime.timedelta(0), brokers=(),
                cluster_id=None, controller_id=-1, topics=topics,
                cluster_authorized_operations=OPS_NOT_REQUESTED)


def _respond(ctx: RequestContext, request: Any, image: ClusterImage, topics: list[TopicImage],
             names: list[str], unknown_ids: list[uuid.UUID | None]) -> Any:
    entries = list(_entries(ctx, request, image, topics, names, unknown_ids))
    return _response(ctx, request, image, entries)


async def _respond_in_slices(ctx: RequestContext, request: Any, image: ClusterImage,
                             topics: list[TopicImage], names: list[str],
                             unknown_ids: list[uuid.UUID | None]) -> Any:
    entries = await in_slices(_entries(ctx, request, image, topics, names, unknown_ids))
    ctx.big_answer = True
    return _response(ctx, request, image, entries)


def _entries(ctx: RequestContext, request: Any, image: ClusterImage, topics: list[TopicImage],
             names: list[str], unknown_ids: list[uuid.UUID | None]) -> Iterator[Any]:
    """The answer's topics: ``topics`` described, then the unknown ids, then the names."""
    m = response_module(API_KEY, ctx.api_version)
    authorize = ctx.authorize

    def topic_entry(t: TopicImage) -> Any:
        entry = _topic(m, t, ErrorCode.none, image, ctx.session.listener_name)
        if getattr(request, "include_topic_authorized_operations", False):
            entry = dataclasses.replace(
                entry, topic_authorized_operations=authorized_operations(ctx, "TOPIC", t.name))
        return entry

    for t in topics:
        yield topic_entry(t)
    for topic_id in dict.fromkeys(unknown_ids):
        yield _error_topic(m, None, ErrorCode.unknown_topic_id, topic_id or ZERO_UUID)
    for name in dict.fromkeys(names):
        if not authorize(ctx.session, "DESCRIBE", "TOPIC", name):
            yield _error_topic(m, name, ErrorCode.topic_authorization_failed)
        elif (topic := image.topics.get(name)) is not None:
            yield topic_entry(topic)
        elif topic_name_problem(name) is not None:
            yield _error_topic(m, name, ErrorCode.invalid_topic_exception)
        else:
            yield _error_topic(m, name, ErrorCode.unknown_topic_or_partition)


def _response(ctx: RequestContext, request: Any, image: ClusterImage, entries: list[Any]) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    cluster_ops = OPS_NOT_REQUESTED
    if getattr(request, "include_cluster_authorized_operations", False):  # v8-10
        cluster_ops = authorized_operations(ctx, "CLUSTER", CLUSTER_NAME)
    # Each client sees the unfenced brokers' endpoints of the listener it came in on,
    # and no broker without one, as Kafka's getAliveBrokerNodes(listenerName).
    listener = ctx.session.listener_name
    brokers = tuple(
        make(m.MetadataResponseBroker, node_id=b.node_id, host=e.host, port=e.port,
             rack=b.rack)
        for b in image.alive_brokers.values() if (e := b.endpoint(listener)) is not None
    )
    return make(
        m.MetadataResponse,
        throttle_time=datetime.timedelta(0),
        brokers=brokers,
        cluster_id=image.cluster_id,
        controller_id=image.controller_id,
        topics=tuple(entries),
        cluster_authorized_operations=cluster_ops,
        error_code=ErrorCode.none,
    )


def partition_fields(p: PartitionState, image: ClusterImage | None = None,
                     listener_name: str | None = None,
                     error_unavailable_listeners: bool = True) -> dict[str, Any]:
    """A partition's leadership and replicas as Metadata and DescribeTopicPartitions
    answer them. Given the client's listener, a leader without an endpoint on it is no
    leader to that client, as Kafka's KRaftMetadataCache: LISTENER_NOT_FOUND, or
    LEADER_NOT_AVAILABLE to Metadata v0-5."""
    error = ErrorCode.none if p.leader != NO_LEADER else ErrorCode.leader_not_available
    leader = p.leader
    if image is not None and listener_name is not None and leader != NO_LEADER:
        broker = image.brokers.get(leader)
        if broker is None:
            error, leader = ErrorCode.leader_not_available, NO_LEADER
        elif broker.endpoint(listener_name) is None:
            error = (ErrorCode.listener_not_found if error_unavailable_listeners
                     else ErrorCode.leader_not_available)
            leader = NO_LEADER
    return {
        "error_code": error,
        "partition_index": p.partition,
        "leader_id": leader,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": p.replicas,
        "isr_nodes": p.isr,
        "offline_replicas": p.offline_replicas,
    }


def _topic(m: Any, topic: TopicImage, error: ErrorCode, image: ClusterImage,
           listener_name: str) -> Any:
    # Kafka answers a missing listener with LISTENER_NOT_FOUND from Metadata v6.
    v6 = m.MetadataResponse.__version__ >= 6
    partitions = tuple(
        make(m.MetadataResponsePartition, **partition_fields(p, image, listener_name, v6))
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition)
    )
    return make(
        m.MetadataResponseTopic,
        error_code=error,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
        topic_authorized_operations=OPS_NOT_REQUESTED,
    )


def _error_topic(m: Any, name: str | None, error: ErrorCode,
                 topic_id: uuid.UUID = ZERO_UUID) -> Any:
    return make(
        m.MetadataResponseTopic,
        error_code=error,
        # Names became nullable in v12 (topics requested by id).
        name=name if name is not None or m.MetadataResponse.__version__ >= 12 else "",
        topic_id=topic_id,
        is_internal=name is not None and is_internal_topic(name),
        partitions=(),
        topic_authorized_operations=OPS_NOT_REQUESTED,
    )
