"""Topic and broker configs as the admin APIs see them: effective values, where each
comes from (Kafka's config sources and synonyms), and validation of new values.

Shared by CreateTopics (its v5+ response lists the new topic's configs), DescribeConfigs,
AlterConfigs and IncrementalAlterConfigs, so all four agree on values and sources. The
rules follow Kafka's ConfigHelper: a topic config without an override takes its value
from a broker key, whose own value comes from the first of per-broker dynamic config,
cluster-wide dynamic default, the static config file, the built-in default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from kernel.cluster import ClusterImage
from kernel.config import (
    INT_MAX,
    INTERNAL_TOPIC_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigKey,
    broker_synonyms,
    coerce,
    is_topic_config,
    replace_settings,
    schema_keys,
    to_kafka_string,
    topic_config_keys,
    validate_topic_configs,
)
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.services import BrokerServices

CLUSTER_DEFAULT = -1  # ClusterImage.broker_configs key of cluster-wide dynamic defaults


class ConfigResourceType(IntEnum):
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """DescribeConfigs v3+ config_type."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_TYPE_BY_NAME = {
    "boolean": ConfigType.BOOLEAN, "string": ConfigType.STRING, "long": ConfigType.LONG,
    "double": ConfigType.DOUBLE, "list": ConfigType.LIST,
}

# Keys Kafka declares as INT (32-bit); the settings schema only knows "integer", so
# these are reported as INT and new values must fit 32 bits, as on a Kafka broker. The
# topic configs and their broker synonyms say so in their declarations.
KAFKA_INT_KEYS = frozenset({
    "internal.segment.bytes",
    "broker.id", "num.partitions", "default.replication.factor",
    "log.flush.offset.checkpoint.interval.ms", "socket.request.max.bytes",
    "fetch.max.bytes", "max.connections", "max.connections.per.ip",
    "max.connection.creation.rate",
    "producer.id.expiration.ms", "replica.fetch.backoff.ms", "replica.fetch.max.bytes",
    "replica.fetch.min.bytes", "replica.fetch.response.max.bytes",
    "replica.fetch.wait.max.ms", "replica.socket.timeout.ms",
    "max.incremental.fetch.session.cache.slots", "min.incremental.fetch.session.eviction.ms",
    "log.cleaner.threads", "log.cleaner.io.buffer.size", "sasl.server.max.receive.size",
    "replication.quota.window.num", "replication.quota.window.size.seconds",
    # KRaft (kernel/config/kraft.py)
    "node.id", "broker.heartbeat.interval.ms", "broker.session.timeout.ms",
    "initial.broker.registration.timeout.ms", "controller.quorum.append.linger.ms",
    "controller.quorum.election.backoff.max.ms", "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.max.bytes", "controller.quorum.fetch.snapshot.max.bytes",
    "controller.quorum.fetch.timeout.ms", "controller.quorum.request.timeout.ms",
    "controller.quorum.retry.backoff.ms", "metadata.log.segment.bytes",
    "metadata.max.idle.interval.ms", "leader.imbalance.per.broker.percentage",
    *(tc.name for tc in TOPIC_CONFIGS if tc.int32),
    *(s.name for tc in TOPIC_CONFIGS for s in tc.synonyms if s.int32),
})
# Kafka's DynamicConfig.Broker quota keys: not KafkaConfig keys, so a broker describes
# them only where they are set dynamically (per broker or cluster default).
DYNAMIC_ONLY_KEYS = frozenset({"leader.replication.throttled.rate",
                               "follower.replication.throttled.rate",
                               "replica.alter.log.dirs.io.max.bytes.per.second"})
# Keys Kafka declares as STRING that the settings schema reads as a list.
KAFKA_STRING_KEYS = frozenset({"listener.security.protocol.map",
                               "max.connections.per.ip.overrides"})


def config_type(key: ConfigKey) -> ConfigType:
    if key.name in KAFKA_INT_KEYS:
        return ConfigType.INT
    if key.name in KAFKA_STRING_KEYS:
        return ConfigType.STRING
    if key.sensitive:
        return ConfigType.PASSWORD
    return _TYPE_BY_NAME.get(key.type_name, ConfigType.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    synonyms: tuple[Synonym, ...]
    config_type: ConfigType
    documentation: str


class BrokerConfigView:
    """One broker's configs as of one cluster image: the static file, the dynamic
    configs in the image, and the effective settings they make together."""

    def __init__(self, services: BrokerServices, image: ClusterImage | None = None) -> None:
        image = image if image is not None else services.metadata.image
        self.broker_id = services.config.broker_id
        self.static = services.loaded.broker
        self.static_keys = services.loaded.explicit_keys
        self.keys = schema_keys(BrokerConfig)
        self.dynamic_default: Mapping[str, str] = image.broker_configs.get(CLUSTER_DEFAULT, {})
        self.dynamic_broker: Mapping[str, str] = image.broker_configs.get(self.broker_id, {})
        self.effective = self._effective()

    def _effective(self) -> BrokerConfig:
        changes: dict[str, Any] = {}
        for layer in (self.dynamic_default, self.dynamic_broker):
            for name, raw in layer.items():
                key = self.keys.get(name)
                if key is None:
                    continue  # stored by another broker version; nothing here reads it
                try:
                    changes[name] = coerce(key, raw, name)
                except ConfigError:
                    continue  # validated when altered; never let one value break describe
        return replace_settings(self.static, changes)

    def _static_value(self, name: str) -> str | None:
        return to_kafka_string(getattr(self.static, self.keys[name].attr))

    def synonyms(self, name: str, sensitive: bool) -> list[Synonym]:
        """Kafka's ConfigHelper.configSynonyms: every source that sets ``name`` or a
        synonym, most precedent first, starting at ``name`` itself."""
        names = broker_synonyms(name)
        found: list[Synonym] = []
        layers: list[tuple[ConfigSource, Any]] = [
            (ConfigSource.DYNAMIC_BROKER_CONFIG, self.dynamic_broker.get),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default.get),
            (ConfigSource.STATIC_BROKER_CONFIG,
             lambda n: self._static_value(n) if n in self.static_keys else None),
            (ConfigSource.DEFAULT_CONFIG,
             lambda n: to_kafka_string(self.keys[n].default) if n in self.keys else None),
        ]
        if name in DYNAMIC_ONLY_KEYS:
            layers = layers[:2]
        for source, lookup in layers:
            for n in names:
                value = lookup(n)
                if value is not None:
                    found.append(Synonym(n, None if sensitive else value, source))
        while found and found[0].name != name:
            found.pop(0)
        return found

    def broker_entries(self, per_broker: bool) -> list[ConfigEntry]:
        """This broker's configs (``per_broker``), or the cluster-wide dynamic defaults
        (only the keys set there, as Kafka answers for resource name "")."""
        entries: list[ConfigEntry] = []
        for name, key in sorted(self.keys.items()):
            if not per_broker and name not in self.dynamic_default:
                continue
            if name in DYNAMIC_ONLY_KEYS and name not in self.dynamic_broker \
                    and name not in self.dynamic_default:
                continue
            synonyms = self.synonyms(name, key.sensitive)
            if not per_broker:
                synonyms = [s for s in synonyms
                            if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
                value = self.dynamic_default[name]
            else:
                value = to_kafka_string(getattr(self.effective, key.attr))
            entries.append(ConfigEntry(
                name=name,
                value=None if key.sensitive else value,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=not key.dynamic,
                sensitive=key.sensitive,
                synonyms=tuple(synonyms),
                config_type=config_type(key),
                documentation=key.doc,
            ))
        return entries

    def topic_entries(self, overrides: Mapping[str, str]) -> list[ConfigEntry]:
        """Every topic config of a topic with these explicit configs."""
        entries: list[ConfigEntry] = []
        for name, tk in sorted(topic_config_keys().items()):
            sensitive = tk.key.sensitive
            synonyms = self.synonyms(tk.broker_key, sensitive) if tk.broker_key else []
            if name in overrides:
                value: str | None = overrides[name]
                synonyms.insert(0, Synonym(name, None if sensitive else value,
                                           ConfigSource.DYNAMIC_TOPIC_CONFIG))
            else:
                value = to_kafka_string(tk.default(self.effective))
            entries.append(ConfigEntry(
                name=name,
                value=None if sensitive else value,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=False,
                sensitive=sensitive,
                synonyms=tuple(synonyms),
                config_type=config_type(tk.key),
                documentation=tk.key.doc,
            ))
        # Kafka's internal topic configs are described only where a topic sets them.
        for name in sorted(INTERNAL_TOPIC_CONFIGS.keys() & overrides.keys()):
            key = INTERNAL_TOPIC_CONFIGS[name]
            synonym = Synonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG)
            entries.append(ConfigEntry(
                name=name, value=overrides[name], source=ConfigSource.DYNAMIC_TOPIC_CONFIG,
                read_only=False, sensitive=False, synonyms=(synonym,),
                config_type=config_type(key), documentation=key.doc,
            ))
        return entries


def _check_int(name: str, value: str) -> None:
    if name in KAFKA_INT_KEYS and not -(2**31) <= int(value) <= INT_MAX:
        raise ConfigError(f"Invalid value {value} for configuration {name}: "
                          "Not a number of type INT")


def checked_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Topic config strings in Kafka's normal form; INVALID_CONFIG naming the key."""
    unknown = [n for n in configs if not is_topic_config(n)]
    if unknown:
        raise KafkaError(ErrorCode.invalid_config,
                         f"Unknown topic config name: {', '.join(unknown)}")
    nulls = [n for n, v in configs.items() if v is None]
    if nulls:
        raise KafkaError(ErrorCode.invalid_config,
                         f"Null value not supported for topic configs: {', '.join(nulls)}")
    try:
        normalised = validate_topic_configs(configs)
        for name, value in normalised.items():
            _check_int(name, value)
    except ConfigError as e:
        raise KafkaError(ErrorCode.invalid_config, _kafka_words(str(e))) from None
    return normalised


_BELOW = re.compile(r"(?P<name>[\w.]+): (?P<value>\S+) is not allowed; "
                    r"expected a value >= (?P<low>-?\d+)")


def _kafka_words(message: str) -> str:
    """A value under a minimum in the words of Kafka's ConfigDef.Range.atLeast."""
    m = _BELOW.fullmatch(message)
    if m is None:
        return message
    return (f"Invalid value {m['value']} for configuration {m['name']}: "
            f"Value must be at least {m['low']}")


def checked_broker_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Dynamic broker config strings in Kafka's normal form. Like Kafka (KAFKA-13609),
    a key that cannot change at runtime or a bad value is INVALID_REQUEST."""
    keys = schema_keys(BrokerConfig)
    fixed = sorted(n for n in configs if n not in keys or not keys[n].dynamic)
    if fixed:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Cannot update these configs dynamically: {', '.join(fixed)}")
    out: dict[str, str] = {}
    try:
        for name, raw in configs.items():
            rendered = to_kafka_string(coerce(keys[name], raw, name))
            if rendered is None:
                continue  # an optional key set to nothing is the same as not set
            _check_int(name, rendered)
            out[name] = rendered
    except ConfigError as e:
        raise KafkaError(ErrorCode.invalid_request, str(e)) from None
    return out
