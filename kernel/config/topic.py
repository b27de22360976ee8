"""Topic-level configs: name, type, and the broker setting that supplies the default."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
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
    schema_keys,
    to_kafka_string,
)

# ---------------------------------------------------------------------------
# topic-level configs: name, type, the broker setting that supplies the default
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    name: str
    broker_key: str | None  # the BrokerConfig Kafka name that supplies the default
    default: Callable[[BrokerConfig], Any]
    key: ConfigKey  # type and check shared with the broker key


def _topic_key(
    name: str, broker_key: str, default: Callable[[BrokerConfig], Any]
) -> TopicConfigKey:
    base = schema_keys(BrokerConfig)[broker_key]
    return TopicConfigKey(name, broker_key, default, dataclasses.replace(base, name=name))


# KIP-73's lists of throttled replicas: no broker default, and Kafka 4.3's
# ThrottledReplicaListValidator (on the raw string, split as Kafka's LIST type splits it).
THROTTLED_REPLICAS_KEYS = ("leader.replication.throttled.replicas",
                           "follower.replication.throttled.replicas")
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def _throttled_replicas_key(name: str, side: str) -> TopicConfigKey:
    doc = (f"A list of replicas for which log replication should be throttled on the {side} "
           "side. The list should describe a set of replicas in the form "
           "[PartitionId]:[BrokerId],[PartitionId]:[BrokerId]:... or alternatively the "
           "wildcard '*' can be used to throttle all replicas for this topic.")
    key = ConfigKey(name, name.replace(".", "_"), list[str], [], doc, None, True, False)
    return TopicConfigKey(name, None, lambda b: [], key)


def check_throttled_replicas(name: str, raw: str) -> None:
    """Every entry ``partition:broker`` (or empty), or the entries joined are ``*``."""
    items = re.split(r"\s*,\s*", raw.strip()) if raw.strip() else []
    if not (all(_REPLICA.fullmatch(i) for i in items) or "".join(items) == "*"):
        raise ConfigError(
            f"Invalid value [{', '.join(items)}] for configuration {name}: {name} must be "
            "the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


@cache
def topic_config_keys() -> dict[str, TopicConfigKey]:
    """Kafka's topic-level configs that Kafkernel honours."""
    keys = [
        _topic_key("cleanup.policy", "log.cleanup.policy", lambda b: b.log_cleanup_policy),
        _topic_key("compression.type", "compression.type", lambda b: b.compression_type),
        _topic_key("delete.retention.ms", "log.cleaner.delete.retention.ms",
                   lambda b: b.log_cleaner_delete_retention_ms),
        _topic_key("file.delete.delay.ms", "log.segment.delete.delay.ms",
                   lambda b: b.log_segment_delete_delay_ms),
        _throttled_replicas_key("follower.replication.throttled.replicas", "follower"),
        _topic_key("flush.messages", "log.flush.interval.messages",
                   lambda b: b.log_flush_interval_messages),
        _topic_key("flush.ms", "log.flush.interval.ms", lambda b: b.log_flush_interval_ms_resolved),
        _topic_key("index.interval.bytes", "log.index.interval.bytes",
                   lambda b: b.log_index_interval_bytes),
        _throttled_replicas_key("leader.replication.throttled.replicas", "leader"),
        _topic_key("max.message.bytes", "message.max.bytes", lambda b: b.message_max_bytes),
        _topic_key("message.timestamp.type", "log.message.timestamp.type",
                   lambda b: b.log_message_timestamp_type),
        _topic_key("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
                   lambda b: b.log_cleaner_max_compaction_lag_ms),
        _topic_key("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio",
                   lambda b: b.log_cleaner_min_cleanable_ratio),
        _topic_key("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms",
                   lambda b: b.log_cleaner_min_compaction_lag_ms),
        _topic_key("min.insync.replicas", "min.insync.replicas", lambda b: b.min_insync_replicas),
        _topic_key("retention.bytes", "log.retention.bytes", lambda b: b.log_retention_bytes),
        _topic_key("retention.ms", "log.retention.ms", lambda b: b.log_retention_ms_resolved),
        _topic_key("segment.bytes", "log.segment.bytes", lambda b: b.log_segment_bytes),
        _topic_key("segment.index.bytes", "log.index.size.max.bytes",
                   lambda b: b.log_index_size_max_bytes),
        _topic_key("segment.ms", "log.roll.ms", lambda b: b.log_roll_ms_resolved),
        _topic_key("unclean.leader.election.enable", "unclean.leader.election.enable",
                   lambda b: b.unclean_leader_election_enable),
    ]
    return {k.name: k for k in keys}


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
