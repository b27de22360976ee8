"""Topic-level configs as CreateTopics and AlterConfigs check them and DescribeConfigs
lists them, derived from their declarations (kernel/config/topic_defs.py)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kernel.config.broker import BrokerConfig
from kernel.config.schema import (
    INT_MAX,
    ConfigError,
    ConfigKey,
    coerce,
    int_at_least,
    to_kafka_string,
)
from kernel.config.topic_defs import TOPIC_CONFIGS, TopicConfig


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    """A topic config as the admin APIs check and describe it, from its declaration."""

    name: str
    broker_key: str | None  # the BrokerConfig Kafka name that supplies the default
    config: TopicConfig
    key: ConfigKey  # type, check and doc

    def default(self, broker: BrokerConfig) -> Any:
        """The value without an override, from ``broker``'s synonyms."""
        return self.config.default_from(broker)


# KIP-73's lists of throttled replicas: no broker default, and Kafka 4.3's
# ThrottledReplicaListValidator (on the raw string, split as Kafka's LIST type splits it).
THROTTLED_REPLICAS_KEYS = ("leader.replication.throttled.replicas",
                           "follower.replication.throttled.replicas")
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def check_throttled_replicas(name: str, raw: str) -> None:
    """Every entry ``partition:broker`` (or empty), or the entries joined are ``*``."""
    items = re.split(r"\s*,\s*", raw.strip()) if raw.strip() else []
    if not (all(_REPLICA.fullmatch(i) for i in items) or "".join(items) == "*"):
        raise ConfigError(
            f"Invalid value [{', '.join(items)}] for configuration {name}: {name} must be "
            "the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


# Kafka's LogConfig.validateRemoteStorageOnlyIfSystemEnabled, on a broker without
# remote.log.storage.system.enable (Kafkernel has no tiered storage).
REMOTE_STORAGE_ENABLE = "remote.storage.enable"
REMOTE_STORAGE_DISABLED = ("Tiered Storage functionality is disabled in the broker. Topic "
                           "cannot be configured with remote log storage.")


def _key_of(tc: TopicConfig) -> TopicConfigKey:
    key = ConfigKey(tc.name, tc.attr, tc.type, tc.static_default, tc.doc, tc.check,
                    True, False)
    return TopicConfigKey(tc.name, tc.broker_key, tc, key)


@cache
def topic_config_keys() -> dict[str, TopicConfigKey]:
    """Kafka 4.3's topic-level configs (kernel/config/topic_defs.py), by name."""
    return {tc.name: _key_of(tc) for tc in TOPIC_CONFIGS}


# Kafka's internal topic configs (LogConfig.defineInternal): accepted where topic
# configs are set, never described. internal.segment.bytes, when set, is the segment
# size instead of segment.bytes and has no minimum: what tests use to roll often.
INTERNAL_SEGMENT_BYTES = "internal.segment.bytes"
INTERNAL_TOPIC_CONFIGS: dict[str, ConfigKey] = {
    INTERNAL_SEGMENT_BYTES: ConfigKey(
        INTERNAL_SEGMENT_BYTES, "internal_segment_bytes", int | None, None,
        "The maximum size of a single log file. This should be used for testing only.",
        int_at_least(-INT_MAX - 1), True, False),
}


def is_topic_config(name: str) -> bool:
    return name in topic_config_keys() or name in INTERNAL_TOPIC_CONFIGS


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic config strings (CreateTopics, AlterConfigs); raises ConfigError naming
    the key. Returns the configs normalised to Kafka's string form."""
    keys = topic_config_keys()
    out: dict[str, str] = {}
    for name, raw in configs.items():
        tk = keys.get(name)
        if tk is None and name in INTERNAL_TOPIC_CONFIGS:
            internal = coerce(INTERNAL_TOPIC_CONFIGS[name], raw, name)
            if internal is not None:
                out[name] = str(internal)
            continue
        if tk is None:
            raise ConfigError(f"unknown topic config {name!r}")
        if name in THROTTLED_REPLICAS_KEYS and isinstance(raw, str):
            check_throttled_replicas(name, raw)
            out[name] = raw  # kept as given, as Kafka keeps it
            continue
        value = coerce(tk.key, raw, name)
        if name == REMOTE_STORAGE_ENABLE and value:
            raise ConfigError(REMOTE_STORAGE_DISABLED)
        rendered = to_kafka_string(value)
        if rendered is not None:
            out[name] = rendered
    return out


@cache
def _stored_topic_config_keys() -> dict[str, TopicConfigKey]:
    """The topic keys without their range checks: a stored config was checked when it
    was set, under the rules of then (a segment.bytes under KIP-1030's minimum, from
    before it, still opens its log)."""
    return {name: dataclasses.replace(tk, key=dataclasses.replace(tk.key, check=None))
            for name, tk in topic_config_keys().items()}


def resolve_topic_configs(broker: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, Any]:
    """Typed values of every topic config: explicit topic value, else broker default."""
    keys = _stored_topic_config_keys()
    resolved: dict[str, Any] = {}
    for name, tk in keys.items():
        if name in overrides:
            resolved[name] = coerce(tk.key, overrides[name], name)
        else:
            resolved[name] = tk.default(broker)
    if INTERNAL_SEGMENT_BYTES in overrides:
        resolved[INTERNAL_SEGMENT_BYTES] = coerce(
            INTERNAL_TOPIC_CONFIGS[INTERNAL_SEGMENT_BYTES], overrides[INTERNAL_SEGMENT_BYTES],
            INTERNAL_SEGMENT_BYTES)
    return resolved
