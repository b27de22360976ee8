"""DescribeConfigs (key 32): every config of a topic or broker with its value, source,
synonyms, type and documentation (see ``config_entries`` for where values come from).

BROKER resource "" is the cluster-wide dynamic defaults; otherwise the name must be this
broker's id, as on Kafka. BROKER_LOGGER is answered with an empty list: Kafkernel has
no per-logger levels to show (its log level is one broker setting).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

from kernel.cluster import topic_name_problem
from kernel.handlers.config_entries import BrokerConfigView, ConfigEntry, ConfigResourceType
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import RequestContext
from kernel.slices import BIG_REQUEST_ENTRIES, in_slices

API_KEY = 32
# v0 is not in kio (Kafka 4 removed it); v1-4 are fully served.
MIN_VERSION = 1
MAX_VERSION = 4


def handle(ctx: RequestContext, request: Any) -> Any:
    if len(request.resources) > BIG_REQUEST_ENTRIES:
        return _handle_in_slices(ctx, request)
    return _response(ctx, list(_results(ctx, request)))


async def _handle_in_slices(ctx: RequestContext, request: Any) -> Any:
    """Thousands of resources are described in slices that give the loop back."""
    results = await in_slices(_results(ctx, request))
    ctx.big_answer = True
    return _response(ctx, results)


def _results(ctx: RequestContext, request: Any) -> Iterator[Any]:
    m = response_module(API_KEY, ctx.api_version)
    view = BrokerConfigView(ctx.services)
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    include_docs = bool(getattr(request, "include_documentation", False))
    for resource in request.resources:
        error, message, entries = ErrorCode.none, None, []
        try:
            entries = _describe(ctx, view, resource)
        except KafkaError as e:
            error, message = e.error_code, e.message
        wanted = resource.configuration_keys
        if wanted:
            names = set(wanted)
            entries = [e for e in entries if e.name in names]
        yield make(
            m.DescribeConfigsResult,
            error_code=error,
            error_message=message,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=tuple(_entry(m, e, include_synonyms, include_docs) for e in entries),
        )


def _response(ctx: RequestContext, results: list[Any]) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    return make(m.DescribeConfigsResponse, throttle_time=datetime.timedelta(0),
                results=tuple(results))


def _describe(ctx: RequestContext, view: BrokerConfigView, resource: Any) -> list[ConfigEntry]:
    authorize = ctx.authorize
    kind, name = resource.resource_type, resource.resource_name
    if kind == ConfigResourceType.TOPIC:
        if not authorize(ctx.session, "DESCRIBE_CONFIGS", "TOPIC", name):
            raise KafkaError(ErrorCode.topic_authorization_failed)
        problem = topic_name_problem(name)
        if problem is not None:
            raise KafkaError(ErrorCode.invalid_topic_exception, problem)
        topic = ctx.services.metadata.image.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition)
        return view.topic_entries(topic.configs)
    if kind in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER):
        if not authorize(ctx.session, "DESCRIBE_CONFIGS", "CLUSTER", CLUSTER_NAME):
            raise KafkaError(ErrorCode.cluster_authorization_failed)
        if kind == ConfigResourceType.BROKER_LOGGER:
            if not name:
                raise KafkaError(ErrorCode.invalid_request, "Broker id must not be empty")
            if broker_id_of(name) != view.broker_id:
                raise KafkaError(ErrorCode.invalid_request, f"Unexpected broker id, expected "
                                 f"{view.broker_id} but received {name}")
            return []
        if not name:
            return view.broker_entries(per_broker=False)
        if broker_id_of(name) != view.broker_id:
            raise KafkaError(ErrorCode.invalid_request, f"Unexpected broker id, expected "
                             f"{view.broker_id} or empty string, but received {name}")
        return view.broker_entries(per_broker=True)
    raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type: {kind}")


def broker_id_of(name: str) -> int:
    try:
        return int(name)
    except ValueError:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Broker id must be an integer, but it is: {name}") from None


def _entry(m: Any, e: ConfigEntry, include_synonyms: bool, include_docs: bool) -> Any:
    synonyms = tuple(
        m.DescribeConfigsSynonym(name=s.name, value=s.value, source=s.source)
        for s in e.synonyms
    ) if include_synonyms else ()
    return make(
        m.DescribeConfigsResourceResult,
        name=e.name,
        value=e.value,
        read_only=e.read_only,
        config_source=e.source,
        is_sensitive=e.sensitive,
        synonyms=synonyms,
        config_type=e.config_type,
        documentation=e.documentation if include_docs else None,
    )
