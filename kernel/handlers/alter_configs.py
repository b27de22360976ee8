"""AlterConfigs (key 33): replace the whole set of explicit configs of a topic, of a
broker or of the cluster-wide broker defaults (resource name "").

Shared with IncrementalAlterConfigs: both compute the resource's new explicit configs
from its current ones, validate all of them, and persist through the metadata backend,
which publishes a new cluster image (the broker applies dynamic broker configs itself).
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from kernel.cluster import topic_name_problem
from kernel.handlers.config_entries import (
    CLUSTER_DEFAULT,
    BrokerConfigView,
    ConfigResourceType,
    checked_broker_configs,
    checked_topic_configs,
)
from kernel.handlers.describe_configs import broker_id_of
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import RequestContext

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

NewConfigs = Callable[
    [ConfigResourceType, Mapping[str, str], BrokerConfigView], dict[str, str | None]
]
"""Given the resource's type, its current explicit configs and the broker's configs (for
defaults), the explicit configs it should have; raises KafkaError."""


async def handle(ctx: RequestContext, request: Any) -> Any:
    def replace_all(resource: Any) -> NewConfigs:
        configs = {c.name: c.value for c in resource.configs}
        nulls = [n for n, v in configs.items() if v is None]

        def new_configs(kind: ConfigResourceType, current: Mapping[str, str],
                        view: BrokerConfigView) -> dict[str, str | None]:
            if nulls:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"Null value not supported for : {', '.join(nulls)}")
            return dict(configs)

        return new_configs

    answers = await alter_resources(ctx, request, replace_all)
    m = response_module(API_KEY, ctx.api_version)
    responses = tuple(resource_answer(m.AlterConfigsResourceResponse, a) for a in answers)
    return make(m.AlterConfigsResponse, throttle_time=datetime.timedelta(0), responses=responses)


def resource_answer(cls: type, answer: tuple[Any, ErrorCode, str | None]) -> Any:
    resource, error, message = answer
    return make(cls, error_code=error, error_message=message,
                resource_type=resource.resource_type, resource_name=resource.resource_name)


async def alter_resources(
    ctx: RequestContext, request: Any, change: Callable[[Any], NewConfigs]
) -> list[tuple[Any, ErrorCode, str | None]]:
    """Alter every resource of an (Incremental)AlterConfigs request; one answer each."""
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    answers: list[tuple[Any, ErrorCode, str | None]] = []
    seen: set[tuple[int, str]] = set()
    for resource in request.resources:
        key = (resource.resource_type, resource.resource_name)
        if key in seen:
            continue
        seen.add(key)
        try:
            if counts[key] > 1:
                raise KafkaError(ErrorCode.invalid_request, "Duplicate resource.")
            await _alter(ctx, resource, change(resource), request.validate_only)
        except KafkaError as e:
            answers.append((resource, e.error_code, e.message))
        else:
            answers.append((resource, ErrorCode.none, None))
    return answers


async def _alter(ctx: RequestContext, resource: Any, new_configs: NewConfigs,
                 validate_only: bool) -> None:
    services = ctx.services
    authorize = ctx.authorize
    kind, name = resource.resource_type, resource.resource_name
    if kind == ConfigResourceType.TOPIC:
        if not authorize(ctx.session, "ALTER_CONFIGS", "TOPIC", name):
            raise KafkaError(ErrorCode.topic_authorization_failed)
        problem = topic_name_problem(name)
        if problem is not None:
            raise KafkaError(ErrorCode.invalid_topic_exception, problem)
        image = services.metadata.image
        topic = image.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"The topic '{name}' does not exist.")
        view = BrokerConfigView(services, image)
        configs = checked_topic_configs(
            new_configs(ConfigResourceType.TOPIC, topic.configs, view))
        if not validate_only:
            await services.metadata.set_topic_configs(name, configs)
        return
    if kind == ConfigResourceType.BROKER:
        if not authorize(ctx.session, "ALTER_CONFIGS", "CLUSTER", CLUSTER_NAME):
            raise KafkaError(ErrorCode.cluster_authorization_failed)
        # Like Kafka's controller, any broker id may be configured from any broker.
        broker_id = broker_id_of(name) if name else CLUSTER_DEFAULT
        image = services.metadata.image
        view = BrokerConfigView(services, image)
        configs = checked_broker_configs(new_configs(
            ConfigResourceType.BROKER, image.broker_configs.get(broker_id, {}), view))
        if not validate_only:
            await services.metadata.set_broker_configs(broker_id, configs)
        return
    try:
        known = ConfigResourceType(kind).name
    except ValueError:
        raise KafkaError(ErrorCode.invalid_request, f"Unknown resource type {kind}.") from None
    raise KafkaError(ErrorCode.invalid_request,
                     f"Altering configs of resource type {known} is not supported.")
