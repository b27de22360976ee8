"""IncrementalAlterConfigs (key 44): change only the named configs of a topic or broker
with SET, DELETE, APPEND or SUBTRACT; APPEND and SUBTRACT work on list-typed configs
(cleanup.policy, log.cleanup.policy) and start from the value in effect."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from kernel.config import BrokerConfig, schema_keys, to_kafka_string, topic_config_keys
from kernel.handlers.alter_configs import NewConfigs, alter_resources, resource_answer
from kernel.handlers.config_entries import BrokerConfigView, ConfigResourceType
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import RequestContext

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1


class OpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    answers = await alter_resources(ctx, request, _changes)
    m = response_module(API_KEY, ctx.api_version)
    responses = tuple(resource_answer(m.AlterConfigsResourceResponse, a) for a in answers)
    return make(m.IncrementalAlterConfigsResponse, throttle_time=datetime.timedelta(0),
                responses=responses)


def _changes(resource: Any) -> NewConfigs:
    ops = [(c.name, c.config_operation, c.value) for c in resource.configs]

    def new_configs(kind: ConfigResourceType, current: Mapping[str, str],
                    view: BrokerConfigView) -> dict[str, str | None]:
        if any(n > 1 for n in Counter(name for name, _, _ in ops).values()):
            raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        configs: dict[str, str | None] = dict(current)
        for name, op, value in ops:
            if op == OpType.DELETE:
                configs.pop(name, None)
                continue
            if op not in (OpType.SET, OpType.APPEND, OpType.SUBTRACT):
                raise KafkaError(ErrorCode.invalid_request, f"Unknown operation type {op}")
            if value is None:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"Null value not supported for : {name}")
            if op == OpType.SET:
                configs[name] = value
                continue
            if not _is_list(kind, name):
                raise KafkaError(ErrorCode.invalid_config, f"Can't {OpType(op).name} to key "
                                 f"{name} because its type is not LIST.")
            old = configs.get(name)
            if old is None:
                old = _in_effect(kind, name, view)
            parts = [p.strip() for p in old.split(",") if p.strip()]
            given = [p.strip() for p in value.split(",") if p.strip()]
            if op == OpType.APPEND:
                parts += [p for p in given if p not in parts]
            else:
                parts = [p for p in parts if p not in given]
            configs[name] = ",".join(parts)
        return configs

    return new_configs


def _is_list(kind: ConfigResourceType, name: str) -> bool:
    if kind == ConfigResourceType.TOPIC:
        tk = topic_config_keys().get(name)
        return tk is not None and tk.key.type_name == "list"
    key = schema_keys(BrokerConfig).get(name)
    return key is not None and key.type_name == "list"


def _in_effect(kind: ConfigResourceType, name: str, view: BrokerConfigView) -> str:
    """The value a list config has without an explicit setting on this resource."""
    if kind == ConfigResourceType.TOPIC:
        value = topic_config_keys()[name].default(view.effective)
    else:
        value = getattr(view.effective, schema_keys(BrokerConfig)[name].attr)
    return to_kafka_string(value) or ""
