"""Loading a TOML file and --override items into the broker settings and the
plugins' raw tables."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel.config.broker import BROKER_SCHEMA, BrokerConfig
from kernel.config.kraft import check_roles
from kernel.config.schema import (
    ConfigError,
    ConfigProblem,
    ConfigSchema,
    coerce,
    schema_keys,
)

# ---------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config file: broker settings, enabled plugins and their raw tables
    (each plugin's table is validated against its schema once plugins are loaded)."""

    source: str
    broker: BrokerConfig
    enabled_plugins: tuple[str, ...]
    plugin_tables: Mapping[str, Mapping[str, Any]]
    # Broker keys set by the file or overrides (DescribeConfigs: STATIC_BROKER_CONFIG).
    explicit_keys: frozenset[str] = frozenset()


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in table.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(_flatten(v, name + "."))
        else:
            flat[name] = v
    return flat


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` as Kafka's ``--override``; the value is read as a TOML value when it
    parses as one (numbers, booleans, arrays), else taken as a string."""
    if "=" not in text:
        raise ConfigError(f"--override {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def load_config(
    path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
    extra: Mapping[str, Any] | None = None,
    plugin_tables: Mapping[str, Mapping[str, Any]] | None = None,
    plugin_keys: Callable[[], Mapping[str, str]] | None = None,
) -> LoadedConfig:
    """Read and validate a config file; ``overrides`` are ``key=value`` strings and
    ``extra`` a mapping of Kafka names and ``plugin_tables`` plugin name -> table (for
    embedding, where plugin names may contain dots), all applied over the file.
    ``plugin_keys`` gives the plugins' keys and their tables, asked only when the top
    level has a key the broker does not take, to say where it belongs."""
    source = str(path) if path is not None else "<defaults>"
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{source}: no such config file") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{source}: not valid TOML: {e}") from None
    plugins_table = data.pop("plugins", {})
    if not isinstance(plugins_table, dict):
        raise ConfigError(f"{source}: plugins: expected a table with enabled = [...]")
    flat = _flatten(data)
    plugin_values = dict(plugins_table)
    for item in overrides:
        key, value = parse_override(item)
        _apply_override(key, value, flat, plugin_values)
    for key, value in (extra or {}).items():
        _apply_override(key, value, flat, plugin_values)
    for name, table in (plugin_tables or {}).items():
        plugin_values.setdefault(name, {}).update(table)

    if "inter.broker.listener.name" in flat and "security.inter.broker.protocol" in flat:
        # Kafka checks the originals: one names the listener, the other implies it.
        raise ConfigError(f"{source}: inter.broker.listener.name: only one of "
                          "inter.broker.listener.name and security.inter.broker.protocol "
                          "should be set")
    per_listener = {k: flat.pop(k) for k in [k for k in flat if k.startswith(LISTENER_PREFIX)]}
    unknown = plugin_keys is not None and not flat.keys() <= BROKER_SCHEMA.keys.keys()
    problems: list[ConfigProblem] = []
    try:
        broker = BROKER_SCHEMA.build(flat, source, plugin_keys() if unknown else None)
    except ConfigError as e:
        problems += e.problems
    try:
        listener_overrides = _listener_overrides(per_listener, source)
    except ConfigError as e:
        problems += e.problems
    if problems:
        raise ConfigError(problems=problems)
    if per_listener:
        broker = dataclasses.replace(broker, listener_overrides=listener_overrides)
    broker = _with_controller_protocols(_with_node_id(broker, flat.keys()), flat.keys())
    problems = check_roles(broker, flat.keys(), source)
    if problems:
        raise ConfigError(problems=problems)
    enabled = plugin_values.pop("enabled", [])
    if not isinstance(enabled, list) or not all(isinstance(p, str) for p in enabled):
        raise ConfigError(f"{source}: plugins.enabled: expected a list of plugin names")
    tables: dict[str, dict[str, Any]] = {}
    for name, table in plugin_values.items():
        if not isinstance(table, dict):
            raise ConfigError(
                f"{source}: plugins.{name}: expected a table [plugins.{name}] "
                "(the only other key of [plugins] is enabled)"
            )
        tables[name] = _flatten(table)
    return LoadedConfig(source, broker, tuple(dict.fromkeys(enabled)), tables, frozenset(flat))


LISTENER_PREFIX = "listener.name."


def _with_controller_protocols(broker: BrokerConfig, explicit: Any) -> BrokerConfig:
    """Kafka's effectiveListenerSecurityProtocolMap: with process.roles set and the map
    left at its default, controller listeners are PLAINTEXT unless SSL or SASL is in use
    in listeners or controller.listener.names."""
    if not broker.process_roles or "listener.security.protocol.map" in explicit:
        return broker
    names = {n.strip().upper() for n in broker.controller_listener_names}
    used = names | {item.partition("://")[0].strip().upper() for item in broker.listeners}
    if used & {"SSL", "SASL_SSL", "SASL_PLAINTEXT"}:
        return broker
    mapped = {item.partition(":")[0].strip().upper()
              for item in broker.listener_security_protocol_map}
    extra = [f"{n}:PLAINTEXT" for n in sorted(names - mapped)]
    return dataclasses.replace(
        broker, listener_security_protocol_map=[*broker.listener_security_protocol_map, *extra])


def _with_node_id(broker: BrokerConfig, explicit: Any) -> BrokerConfig:
    """node.id and broker.id are synonyms, as in Kafka (populateSynonyms): the one set
    gives the other its value (check_roles refuses two different values)."""
    if "node.id" in explicit and "broker.id" not in explicit:
        return dataclasses.replace(broker, broker_id=broker.node_id)
    if "broker.id" in explicit and "node.id" not in explicit:
        return dataclasses.replace(broker, node_id=broker.broker_id)
    return broker


def _listener_overrides(
    values: Mapping[str, Any], source: str
) -> dict[str, dict[str, Any]]:
    """Kafka's per-listener settings, ``listener.name.<listener>.ssl.*``,
    ``.max.connections`` and ``.max.connection.creation.rate`` (checked as the
    setting they override) and ``listener.name.<listener>.sasl.enabled.mechanisms`` (the
    mechanisms that listener's SaslHandshake offers, for the SASL plugin). The listener
    is matched case-insensitively (Kafka's prefix is its lower-case name); the broker
    refuses a prefix that names no listener."""
    keys = schema_keys(BrokerConfig)
    out: dict[str, dict[str, Any]] = {}
    for name, raw in values.items():
        where = f"{source}: {name}"
        listener, _, sub = name[len(LISTENER_PREFIX):].partition(".")
        if listener and sub == SASL_ENABLED_MECHANISMS:
            out.setdefault(listener.upper(), {})[sub] = _mechanism_list(raw, where)
            continue
        if listener and sub.endswith(SASL_JAAS_CONFIG) and sub.count(".") == 3:
            if not isinstance(raw, str):
                raise ConfigError(f"{where}: expected a JAAS login string")
            out.setdefault(listener.upper(), {})[sub.lower()] = raw
            continue
        key = keys.get(sub)
        if (not listener or key is None
                or not (sub.startswith("ssl.") or sub in PER_LISTENER_LIMITS)):
            raise ConfigError(
                f"{where}: unknown key; per listener (listener.name.<listener>.KEY) only "
                "the ssl.* settings, max.connections, max.connection.creation.rate, "
                "sasl.enabled.mechanisms and <mechanism>.sasl.jaas.config may be set"
            )
        out.setdefault(listener.upper(), {})[sub] = coerce(key, raw, where)
    return out


SASL_ENABLED_MECHANISMS = "sasl.enabled.mechanisms"
# Kafka's per-listener connection limits (ConnectionQuotas' ListenerConnectionQuota).
PER_LISTENER_LIMITS = ("max.connections", "max.connection.creation.rate")
SASL_JAAS_CONFIG = "sasl.jaas.config"


def _mechanism_list(raw: Any, where: str) -> list[str]:
    """A list of mechanism names, or Kafka's comma-separated string of them."""
    if isinstance(raw, str):
        raw = [m.strip() for m in raw.split(",") if m.strip()]
    if not isinstance(raw, list) or not all(isinstance(m, str) and m for m in raw):
        raise ConfigError(f"{where}: expected a list of SASL mechanism names")
    return list(raw)


def _apply_override(
    key: str, value: Any, flat: dict[str, Any], plugin_values: dict[str, Any]
) -> None:
    if key == "plugins.enabled":
        plugin_values["enabled"] = value if isinstance(value, list) else [
            s.strip() for s in str(value).split(",") if s.strip()
        ]
    elif key.startswith("plugins."):
        name, _, sub = key[len("plugins."):].partition(".")
        plugin_values.setdefault(name, {})[sub] = value
    else:
        flat[key] = value


def build_plugin_settings(
    schema: ConfigSchema, loaded: LoadedConfig, plugin: str
) -> Any:
    return schema.build(loaded.plugin_tables.get(plugin, {}), loaded.source)
