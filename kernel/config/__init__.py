"""TOML -> typed, validated settings with Kafka's names and defaults.

| module | holds |
|---|---|
| schema.py | the engine: `setting`, checks, coercion, Kafka's rendering |
| broker.py | `BrokerConfig`: every broker setting |
| kraft.py | `KRaftConfig`, BrokerConfig's base: process.roles, node.id, controller.* |
| topic_defs.py | each topic config declared once, with its broker synonyms and default |
| topic.py | the topic keys the admin APIs check and describe, derived from topic_defs |
| loading.py | a TOML file and `--override` items into settings and plugin tables |

Settings are frozen dataclasses whose fields carry their Kafka name (``log.segment.bytes``)
in metadata, so there is one source of truth for the name, type, default and doc of
every key; plugins declare their own tables the same way and return them from the
``kafkernel_config_schema`` hook. TOML dotted keys (``log.segment.bytes = 1024``) and
quoted keys (``"log.segment.bytes" = 1024``) are both accepted. Every error names the
file, the key and what is allowed.
"""

from kernel.config.broker import (
    BROKER_SCHEMA,
    BrokerConfig,
)
from kernel.config.kraft import KRaftConfig, controller_listeners, parse_voters
from kernel.config.loading import (
    SASL_ENABLED_MECHANISMS,
    SASL_JAAS_CONFIG,
    LoadedConfig,
    build_plugin_settings,
    load_config,
    parse_override,
)
from kernel.config.schema import (
    INT_MAX,
    LONG_MAX,
    MIN_SEGMENT_BYTES,
    ConfigError,
    ConfigKey,
    ConfigProblem,
    ConfigSchema,
    StartupError,
    at_least,
    between,
    coerce,
    int_at_least,
    java_double,
    one_of,
    replace_settings,
    schema_keys,
    setting,
    settings_as_strings,
    to_kafka_string,
    toml_key,
)
from kernel.config.topic import (
    INTERNAL_SEGMENT_BYTES,
    INTERNAL_TOPIC_CONFIGS,
    THROTTLED_REPLICAS_KEYS,
    check_throttled_replicas,
    is_topic_config,
    resolve_topic_configs,
    topic_config_keys,
    validate_topic_configs,
)
from kernel.config.topic_defs import (
    TOPIC_CONFIGS,
    BrokerSynonym,
    TopicConfig,
    broker_synonyms,
    topic_configs,
)

__all__ = [
    "BROKER_SCHEMA",
    "INTERNAL_SEGMENT_BYTES",
    "INTERNAL_TOPIC_CONFIGS",
    "INT_MAX",
    "LONG_MAX",
    "MIN_SEGMENT_BYTES",
    "SASL_ENABLED_MECHANISMS",
    "SASL_JAAS_CONFIG",
    "THROTTLED_REPLICAS_KEYS",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "BrokerSynonym",
    "ConfigError",
    "ConfigKey",
    "ConfigProblem",
    "ConfigSchema",
    "KRaftConfig",
    "LoadedConfig",
    "StartupError",
    "TopicConfig",
    "at_least",
    "between",
    "broker_synonyms",
    "build_plugin_settings",
    "check_throttled_replicas",
    "coerce",
    "controller_listeners",
    "int_at_least",
    "is_topic_config",
    "java_double",
    "load_config",
    "one_of",
    "parse_override",
    "parse_voters",
    "replace_settings",
    "resolve_topic_configs",
    "schema_keys",
    "setting",
    "settings_as_strings",
    "to_kafka_string",
    "toml_key",
    "topic_config_keys",
    "topic_configs",
    "validate_topic_configs",
]
