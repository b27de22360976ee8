"""TOML -> typed, validated settings with Kafka's names and defaults.

Settings are frozen dataclasses whose fields carry their Kafka name (``log.segment.bytes``)
in metadata, so there is one source of truth for the name, type, default and doc of
every key; plugins declare their own tables the same way and return them from the
``kafkernel_config_schema`` hook. TOML dotted keys (``log.segment.bytes = 1024``) and
quoted keys (``"log.segment.bytes" = 1024``) are both accepted. Every error names the
file, the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import decimal
import difflib
import math
import os
import sys
import tomllib
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
# KIP-1030 (Kafka 4): segment.bytes and log.segment.bytes are at least 1 MiB.
MIN_SEGMENT_BYTES = 1024 * 1024

Check = Callable[[Any], str | None]
"""Returns None when the value is allowed, else what is allowed."""


@dataclass(frozen=True)
class ConfigProblem:
    """One line of a ConfigError: ``FILE: KEY: problem``; ``key`` (the dotted name as
    written in the file) lets ``config check`` find the line it is on."""

    text: str
    key: str | None = None

    def __str__(self) -> str:
        return self.text


class ConfigError(Exception):
    """One clear line per problem: the file, the key and what is wrong or allowed. A
    table's keys are all checked before it is refused, so every problem is reported."""

    def __init__(self, message: str = "", problems: Sequence[ConfigProblem] = ()) -> None:
        super().__init__(message or "\n".join(map(str, problems)))
        self.problems = tuple(problems) or (ConfigProblem(message),)


class StartupError(ConfigError):
    """A valid setting the machine refuses at start-up (a port in use, a log dir that is
    locked by another broker, unwritable or full): ``FILE: KEY: problem``, like every
    config error, so ``kafkernel serve`` prints one line and exits non-zero."""


def at_least(low: int | float) -> Check:
    return lambda v: None if v >= low else f"a value >= {low}"


def between(low: int | float, high: int | float) -> Check:
    return lambda v: None if low <= v <= high else f"a value in [{low}, {high}]"


def int_at_least(low: int) -> Check:
    """Kafka's ``atLeast`` on an INT setting: the value must also fit 32 bits."""
    def check(v: int) -> str | None:
        if v < low:
            return f"a value >= {low}"
        return None if v <= INT_MAX else f"a value <= {INT_MAX} (a 32-bit int)"
    return check


def port(*, disabled: int | None = None) -> Check:
    """A TCP port; 0 picks a free one, ``disabled`` (e.g. -1) turns the endpoint off."""
    extra = f", or {disabled} to disable" if disabled is not None else ""
    return lambda v: None if 0 <= v <= 65535 or v == disabled else f"a port in [0, 65535]{extra}"


def listener_list(v: list[str]) -> str | None:
    """Each ``NAME://host:port`` with a port in [0, 65535], as Kafka's listener parser."""
    for item in v:
        name, sep, rest = item.partition("://")
        _host, colon, port_s = rest.rpartition(":")
        if not sep or not name or not colon or not port_s.isdigit() or int(port_s) > 65535:
            return f"NAME://host:port with a port in [0, 65535]; {item!r} is not one"
    return None


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def protocol_map(v: list[str]) -> str | None:
    for item in v:
        name, sep, proto = item.partition(":")
        if not sep or not name.strip() or proto.strip().upper() not in SECURITY_PROTOCOLS:
            return ("NAME:PROTOCOL entries with a protocol of "
                    f"{', '.join(SECURITY_PROTOCOLS)} ({item!r} is not one)")
    return None


def non_empty_list(v: list[str]) -> str | None:
    return None if v and all(x.strip() for x in v) else "a non-empty list"


def log_dir_list(v: list[str]) -> str | None:
    """Kafka refuses a directory named twice: each one is locked by its broker."""
    if non_empty_list(v):
        return "a non-empty list"
    names = [os.path.normpath(d) for d in v]
    return None if len(set(names)) == len(names) else "a list without duplicates"


def one_of(*allowed: str) -> Check:
    return lambda v: None if v in allowed else "one of " + ", ".join(allowed)


def all_of(*allowed: str) -> Check:
    return lambda v: (
        None if all(x in allowed for x in v) else "a list of " + ", ".join(allowed)
    )


def _host_counts(items: list[str]) -> str | None:
    for item in items:
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip() or not count.strip().isdigit():
            return "a list of host:count items"
    return None


def setting(
    name: str,
    default: Any,
    doc: str,
    *,
    check: Check | None = None,
    dynamic: bool = False,
    sensitive: bool = False,
) -> Any:
    """A settings field: Kafka name, default, doc; ``dynamic`` ones may be changed by
    AlterConfigs at runtime."""
    kwargs: dict[str, Any] = {
        "metadata": {
            "name": name, "doc": doc, "check": check, "dynamic": dynamic,
            "sensitive": sensitive,
        }
    }
    if isinstance(default, list | dict):
        kwargs["default_factory"] = (lambda d=default: type(d)(d))
    else:
        kwargs["default"] = default
    return field(**kwargs)


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    attr: str
    type: Any
    default: Any
    doc: str
    check: Check | None
    dynamic: bool
    sensitive: bool

    @property
    def type_name(self) -> str:
        return _type_name(self.type)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is list:
        return "list"
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _type_name(args[0])
    return {int: "long", str: "string", bool: "boolean", float: "double"}.get(tp, str(tp))


def _optional(tp: Any) -> bool:
    return type(None) in typing.get_args(tp)


@dataclass(frozen=True)
class ConfigSchema:
    """The keys of one table: the broker's settings or one plugin's."""

    table: str  # "" for the top level, "plugins.<name>" for a plugin
    settings_type: type

    @property
    def keys(self) -> dict[str, ConfigKey]:
        return schema_keys(self.settings_type)

    def build(self, values: Mapping[str, Any], source: str,
              elsewhere: Mapping[str, str] | None = None) -> Any:
        """Validate ``values`` (Kafka names -> TOML values) and build the settings.
        ``elsewhere`` maps keys of other tables to the table that takes them (a plugin's
        keys written at the top level, as Kafka's one properties file has them)."""
        keys = self.keys
        kwargs: dict[str, Any] = {}
        problems: list[ConfigProblem] = []
        for name, raw in values.items():
            key = keys.get(name)
            full = f"{self.table}.{name}" if self.table else name
            where = f"{source}: {full}"
            try:
                if key is None:
                    raise ConfigError(f"{where}: {unknown_key(name, keys, elsewhere or {})}")
                kwargs[key.attr] = coerce(key, raw, where)
            except ConfigError as e:
                problems.append(ConfigProblem(str(e), full))
        if problems:
            raise ConfigError(problems=problems)
        return self.settings_type(**kwargs)


SHORT_KEY_LIST = 8  # a table this small lists its keys in an unknown key's error


def unknown_key(name: str, keys: Mapping[str, Any], elsewhere: Mapping[str, str]) -> str:
    """What to say of a key the table does not take: the table it belongs to, a close
    spelling (difflib), or a small table's keys; never a list of a hundred keys."""
    if name in elsewhere:
        return f"unknown key here; it belongs to the [{elsewhere[name]}] table"
    close = difflib.get_close_matches(name, keys, n=3)
    if close:
        return f"unknown key; did you mean {' or '.join(map(repr, close))}?"
    if len(keys) <= SHORT_KEY_LIST:
        return f"unknown key; allowed keys: {', '.join(sorted(keys))}"
    return "unknown key"


@cache
def schema_keys(settings_type: type) -> dict[str, ConfigKey]:
    hints = typing.get_type_hints(settings_type)
    keys: dict[str, ConfigKey] = {}
    for f in dataclasses.fields(settings_type):
        meta = f.metadata
        if "name" not in meta:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        keys[meta["name"]] = ConfigKey(
            meta["name"], f.name, hints[f.name], default, meta["doc"], meta["check"],
            meta["dynamic"], meta["sensitive"],
        )
    return keys


def coerce(key: ConfigKey, raw: Any, where: str) -> Any:
    """Check a TOML (or string, from --override / AlterConfigs) value against the key."""
    tp = key.type
    if raw is None or (isinstance(raw, str) and raw == "" and _optional(tp)):
        if _optional(tp):
            return None
        raise ConfigError(f"{where}: a value is required ({key.type_name})")
    base = tp
    if _optional(tp):
        base = next(a for a in typing.get_args(tp) if a is not type(None))
    value: Any
    if typing.get_origin(base) is list and typing.get_args(base)[0] is not str:
        # list[dict[str, Any]]: a TOML array of tables (a plugin's list of things, each
        # a table its check validates); never from a string.
        if not (isinstance(raw, list) and all(isinstance(x, Mapping) for x in raw)):
            raise ConfigError(f"{where}: expected an array of tables, got {raw!r}")
        value = [dict(x) for x in raw]
        problem = key.check(value) if key.check is not None else None
        if problem:
            raise ConfigError(f"{where}: {problem}")
        return value
    if typing.get_origin(base) is list:
        if isinstance(raw, str):
            value = [s.strip() for s in raw.split(",") if s.strip()]
        elif isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            value = list(raw)
        else:
            raise ConfigError(f"{where}: expected a list of strings, got {raw!r}")
    elif base is bool:
        if isinstance(raw, bool):
            value = raw
        elif isinstance(raw, str) and raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            raise ConfigError(f"{where}: expected true or false, got {raw!r}")
    elif base is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{where}: expected an integer, got {raw!r}")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str):
            try:
                value = int(raw.strip())
            except ValueError:
                raise ConfigError(f"{where}: expected an integer, got {raw!r}") from None
        else:
            raise ConfigError(f"{where}: expected an integer, got {raw!r}")
        if not -(2**63) <= value <= LONG_MAX:
            raise ConfigError(f"{where}: {value} does not fit a 64-bit long")
    elif base is float:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            value = float(raw)
        else:
            try:
                value = float(str(raw))
            except ValueError:
                raise ConfigError(f"{where}: expected a number, got {raw!r}") from None
    elif base is str:
        if not isinstance(raw, str):
            raise ConfigError(f"{where}: expected a string, got {raw!r}")
        value = raw
    else:  # pragma: no cover - schema author error
        raise ConfigError(f"{where}: unsupported setting type {base!r}")
    if key.check is not None:
        problem = key.check(value)
        if problem:
            raise ConfigError(f"{where}: {value!r} is not allowed; expected {problem}")
    return value


def to_kafka_string(value: Any) -> str | None:
    """How Kafka renders a config value in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, float):
        return java_double(value)
    return str(value)


def java_double(value: float) -> str:
    """Java's Double.toString: the shortest digits that read back, in plain notation
    from 1e-3 up to 1e7 and as ``d.dddE<n>`` outside it."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(value)  # Python's plain notation reaches below 1e-3 and up to 1e16
        return text if "." in text else text + ".0"
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits))
    return (f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}"
            f"E{exponent + len(mantissa) - 1}")


# ---------------------------------------------------------------------------
# the broker's settings
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int = setting(
        "broker.id", 1, "This broker's id in the cluster (Kafka's node.id in KRaft mode).",
        check=int_at_least(0),
    )
    broker_rack: str | None = setting(
        "broker.rack", None,
        "Rack of the broker, registered with it: replicas are placed over the racks "
        "(Kafka's rack-aware assignment); racks on some brokers only refuse automatic "
        "placement.")
    listeners: list[str] = setting(
        "listeners", ["PLAINTEXT://127.0.0.1:9092"],
        "Listeners as NAME://host:port; port 0 picks a free port.",
        check=listener_list,
    )
    advertised_listeners: list[str] | None = setting(
        "advertised.listeners", None,
        "Addresses given to clients in Metadata; defaults to listeners.",
        check=listener_list,
    )
    listener_security_protocol_map: list[str] = setting(
        "listener.security.protocol.map",
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
        "Listener name to security protocol.", check=protocol_map,
    )
    inter_broker_listener_name: str | None = setting(
        "inter.broker.listener.name", None,
        "Listener the brokers use between themselves; must name one of listeners.",
    )
    security_inter_broker_protocol: str = setting(
        "security.inter.broker.protocol", "PLAINTEXT",
        "Names the inter-broker listener when inter.broker.listener.name is unset.",
        check=one_of(*SECURITY_PROTOCOLS),
    )
    # The client side of a SASL inter-broker listener: how a broker logs in to the others.
    sasl_mechanism_inter_broker_protocol: str = setting(
        "sasl.mechanism.inter.broker.protocol", "GSSAPI",
        "The SASL mechanism brokers log in to each other with on a SASL inter-broker "
        "listener: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default, GSSAPI, is not "
        "supported). Its user name and password come from "
        "listener.name.<listener>.<mechanism>.sasl.jaas.config, else sasl.jaas.config.",
    )
    sasl_jaas_config: str | None = setting(
        "sasl.jaas.config", None,
        "A JAAS login, as Kafka's: `org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="broker" password="...";` (ScramLoginModule for SCRAM): the '
        "user this broker logs in to the others as.", sensitive=True,
    )
    # TLS (ssl.*): every one may be set per listener as listener.name.<name>.ssl.*.
    ssl_keystore_type: str = setting(
        "ssl.keystore.type", "JKS", "Format of the keystore; PEM is the one read (KIP-651).",
    )
    ssl_keystore_location: str | None = setting(
        "ssl.keystore.location", None,
        "PEM file with the listener's private key and its certificate chain.",
    )
    ssl_keystore_password: str | None = setting(
        "ssl.keystore.password", None, "Not used with PEM (ssl.key.password decrypts the "
        "key).", sensitive=True,
    )
    ssl_keystore_certificate_chain: str | None = setting(
        "ssl.keystore.certificate.chain", None,
        "The certificate chain in PEM, inline (instead of ssl.keystore.location).",
        sensitive=True,
    )
    ssl_keystore_key: str | None = setting(
        "ssl.keystore.key", None, "The private key in PEM (PKCS#8), inline.", sensitive=True,
    )
    ssl_key_password: str | None = setting(
        "ssl.key.password", None, "Password of an encrypted private key.", sensitive=True,
    )
    ssl_truststore_type: str = setting(
        "ssl.truststore.type", "JKS",
        "Format of the truststore; PEM is the one read (KIP-651).",
    )
    ssl_truststore_location: str | None = setting(
        "ssl.truststore.location", None,
        "PEM file with the CA certificates client certificates are checked against.",
    )
    ssl_truststore_password: str | None = setting(
        "ssl.truststore.password", None, "Not used with PEM.", sensitive=True,
    )
    ssl_truststore_certificates: str | None = setting(
        "ssl.truststore.certificates", None, "Trusted certificates in PEM, inline.",
        sensitive=True,
    )
    ssl_client_auth: str = setting(
        "ssl.client.auth", "none", "Client certificates: none, requested or required.",
        check=one_of("none", "requested", "required"),
    )
    ssl_protocol: str = setting(
        "ssl.protocol", "TLSv1.3", "The TLS protocol (TLSv1.2 or TLSv1.3).",
        check=one_of("TLSv1.2", "TLSv1.3", "TLS"),
    )
    ssl_enabled_protocols: list[str] = setting(
        "ssl.enabled.protocols", ["TLSv1.2", "TLSv1.3"], "TLS versions a listener accepts.",
        check=lambda v: None if v and all(p in ("TLSv1.2", "TLSv1.3") for p in v)
        else "a non-empty list of TLSv1.2, TLSv1.3",
    )
    ssl_cipher_suites: list[str] = setting(
        "ssl.cipher.suites", [], "TLS 1.2 cipher suites (IANA or OpenSSL names); empty "
        "is OpenSSL's default set. TLS 1.3 suites are always on.",
    )
    ssl_principal_mapping_rules: str = setting(
        "ssl.principal.mapping.rules", "DEFAULT", "Rules mapping a client certificate's "
        "subject (RFC 2253) to a principal name: RULE:pattern/replacement/[LU], DEFAULT.",
    )
    ssl_endpoint_identification_algorithm: str | None = setting(
        "ssl.endpoint.identification.algorithm", "https",
        "Followers check the leader's host name against its certificate on an SSL "
        "inter-broker listener; empty turns the check off.",
    )
    log_dirs: list[str] = setting(
        "log.dirs", ["/tmp/kafka-logs"], "Directories holding partition logs and metadata.",
        check=log_dir_list,
    )
    num_partitions: int = setting(
        "num.partitions", 1, "Partitions of an auto-created topic.", check=int_at_least(1),
        dynamic=True,
    )
    default_replication_factor: int = setting(
        "default.replication.factor", 1, "Replication factor of auto-created topics.",
        check=between(1, 32767), dynamic=True,
    )
    # Replication: the follower's fetchers and the leader's ISR (Kafka's names and
    # defaults).
    replica_lag_time_max_ms: int = setting(
        "replica.lag.time.max.ms", 30000, "A follower that has not caught up with the "
        "leader's log end for this long leaves the ISR.", check=int_at_least(1),
    )
    replica_fetch_wait_max_ms: int = setting(
        "replica.fetch.wait.max.ms", 500, "How long a follower's fetch waits at the leader "
        "for data.", check=int_at_least(0),
    )
    replica_fetch_min_bytes: int = setting(
        "replica.fetch.min.bytes", 1, "Bytes a follower's fetch waits for at the leader.",
        check=int_at_least(1),
    )
    replica_fetch_max_bytes: int = setting(
        "replica.fetch.max.bytes", 1048576, "Bytes a follower fetches per partition (a "
        "larger first batch still comes whole).", check=int_at_least(0),
    )
    replica_fetch_response_max_bytes: int = setting(
        "replica.fetch.response.max.bytes", 10485760, "Bytes a follower's fetch response "
        "may carry.", check=int_at_least(0),
    )
    replica_fetch_backoff_ms: int = setting(
        "replica.fetch.backoff.ms", 1000, "Pause of a follower's fetching after an error.",
        check=int_at_least(0),
    )
    replica_high_watermark_checkpoint_interval_ms: int = setting(
        "replica.high.watermark.checkpoint.interval.ms", 5000, "How often the high "
        "watermarks are saved to disk (a restarted replica starts from them).",
        check=int_at_least(0),
    )
    replica_socket_timeout_ms: int = setting(
        "replica.socket.timeout.ms", 30000, "How long a follower waits for a fetch's answer "
        "before reconnecting.", check=int_at_least(1),
    )
    auto_create_topics_enable: bool = setting(
        "auto.create.topics.enable", True,
        "Create a topic that a Metadata request names (allow_auto_topic_creation); as in "
        "Kafka, Produce to an unknown topic answers unknown_topic_or_partition."
    )
    delete_topic_enable: bool = setting(
        "delete.topic.enable", True, "Allow DeleteTopics."
    )
    message_max_bytes: int = setting(
        "message.max.bytes", 1048588, "Largest record batch a topic accepts (default for "
        "max.message.bytes).", check=int_at_least(0), dynamic=True,
    )
    log_segment_bytes: int = setting(
        "log.segment.bytes", 1073741824, "Size at which a segment rolls; at least 1 MiB "
        "(Kafka 4, KIP-1030; tests use the topic config internal.segment.bytes).",
        check=int_at_least(MIN_SEGMENT_BYTES), dynamic=True,
    )
    log_roll_hours: int = setting(
        "log.roll.hours", 168, "Age at which a segment rolls.", check=int_at_least(1)
    )
    log_roll_ms: int | None = setting(
        "log.roll.ms", None, "Age at which a segment rolls; overrides log.roll.hours.",
        check=at_least(1), dynamic=True,
    )
    log_retention_hours: int = setting(
        "log.retention.hours", 168, "Time to keep a segment; -1 keeps forever.",
        check=int_at_least(-1),
    )
    log_retention_minutes: int | None = setting(
        "log.retention.minutes", None, "Overrides log.retention.hours.",
        check=int_at_least(-1),
    )
    log_retention_ms: int | None = setting(
        "log.retention.ms", None, "Overrides log.retention.minutes; -1 keeps forever.",
        check=at_least(-1), dynamic=True,
    )
    log_retention_bytes: int = setting(
        "log.retention.bytes", -1, "Size a partition may keep; -1 is unlimited.",
        check=at_least(-1), dynamic=True,
    )
    log_retention_check_interval_ms: int = setting(
        "log.retention.check.interval.ms", 300000, "How often retention runs.",
        check=at_least(1),
    )
    log_flush_interval_messages: int = setting(
        "log.flush.interval.messages", LONG_MAX, "Messages appended before an fsync.",
        check=at_least(1), dynamic=True,
    )
    log_flush_interval_ms: int | None = setting(
        "log.flush.interval.ms", None, "Time between fsyncs of a partition.",
        check=at_least(0), dynamic=True,
    )
    log_flush_scheduler_interval_ms: int = setting(
        "log.flush.scheduler.interval.ms", LONG_MAX, "How often flush.ms is checked.",
        check=at_least(1),
    )
    log_flush_offset_checkpoint_interval_ms: int = setting(
        "log.flush.offset.checkpoint.interval.ms", 60000,
        "How often the recovery point is checkpointed.", check=int_at_least(0),
    )
    log_index_interval_bytes: int = setting(
        "log.index.interval.bytes", 4096, "Bytes between offset index entries.",
        check=int_at_least(0), dynamic=True,
    )
    log_index_size_max_bytes: int = setting(
        "log.index.size.max.bytes", 10485760, "Size of an offset index; full rolls.",
        check=int_at_least(4), dynamic=True,
    )
    log_message_timestamp_type: str = setting(
        "log.message.timestamp.type", "CreateTime", "Timestamps from the producer or the "
        "broker.", check=one_of("CreateTime", "LogAppendTime"), dynamic=True,
    )
    log_cleanup_policy: list[str] = setting(
        "log.cleanup.policy", ["delete"], "delete and/or compact.",
        check=all_of("delete", "compact"), dynamic=True,
    )
    log_segment_delete_delay_ms: int = setting(
        "log.segment.delete.delay.ms", 60000, "Delay before a deleted segment's files go.",
        check=at_least(0), dynamic=True,
    )
    log_cleaner_delete_retention_ms: int = setting(
        "log.cleaner.delete.retention.ms", 86400000, "How long tombstones are kept.",
        check=at_least(0), dynamic=True,
    )
    log_cleaner_min_compaction_lag_ms: int = setting(
        "log.cleaner.min.compaction.lag.ms", 0, "Minimum age before compaction.",
        check=at_least(0), dynamic=True,
    )
    log_cleaner_min_cleanable_ratio: float = setting(
        "log.cleaner.min.cleanable.ratio", 0.5, "Dirty ratio that triggers compaction.",
        check=between(0, 1), dynamic=True,
    )
    log_cleaner_max_compaction_lag_ms: int = setting(
        "log.cleaner.max.compaction.lag.ms", LONG_MAX, "Maximum age of a record before "
        "it is eligible for compaction whatever the dirty ratio.",
        check=at_least(1), dynamic=True,
    )
    log_cleaner_enable: bool = setting(
        "log.cleaner.enable", True, "Run the log cleaner (compacted topics).",
    )
    log_cleaner_threads: int = setting(
        "log.cleaner.threads", 1, "Cleaner threads.", check=int_at_least(0),
    )
    log_cleaner_dedupe_buffer_size: int = setting(
        "log.cleaner.dedupe.buffer.size", 134217728, "Memory of the cleaners' key -> "
        "offset maps, shared by the threads.", check=at_least(0),
    )
    log_cleaner_io_buffer_size: int = setting(
        "log.cleaner.io.buffer.size", 524288, "Read and write buffer of the cleaners, "
        "shared by the threads.", check=int_at_least(0),
    )
    log_cleaner_io_max_bytes_per_second: float = setting(
        "log.cleaner.io.max.bytes.per.second", sys.float_info.max, "Cleaner I/O "
        "(reads plus writes) per second.", check=at_least(0),
    )
    log_cleaner_backoff_ms: int = setting(
        "log.cleaner.backoff.ms", 15000, "Sleep of a cleaner with no log to clean.",
        check=at_least(0),
    )
    producer_id_expiration_ms: int = setting(
        "producer.id.expiration.ms", 86400000, "Time after its last write that a "
        "partition forgets an idempotent producer's sequence numbers.",
        check=int_at_least(1), dynamic=True,
    )
    transaction_partition_verification_enable: bool = setting(
        "transaction.partition.verification.enable", True,
        "Ask the transaction coordinator before a producer's first transactional write "
        "to a partition (or its TxnOffsetCommit) whether the partition is in its "
        "transaction (KIP-890), so a late write cannot open a hanging transaction.",
        dynamic=True,
    )
    min_insync_replicas: int = setting(
        "min.insync.replicas", 1, "ISR size below which acks=all produce fails.",
        check=int_at_least(1), dynamic=True,
    )
    compression_type: str = setting(
        "compression.type", "producer", "Compression of stored batches.",
        check=one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        dynamic=True,
    )
    unclean_leader_election_enable: bool = setting(
        "unclean.leader.election.enable", False,
        "When no in-sync replica is live, the controller makes the first live replica "
        "leader, with an ISR of itself alone (records may be lost). Topic default.",
        dynamic=True,
    )
    fetch_max_bytes: int = setting(
        "fetch.max.bytes", 8388608, "Most record bytes in one consumer fetch response, "
        "besides the request's max_bytes (Kafka's default: 55 MB; see ARCHITECTURE.md).",
        check=int_at_least(1024), dynamic=True,
    )
    # KIP-227 incremental fetch sessions (kernel/fetch_session.py).
    max_incremental_fetch_session_cache_slots: int = setting(
        "max.incremental.fetch.session.cache.slots", 1000, "Incremental fetch sessions "
        "kept; a full cache answers new ones with session id 0 (full fetches).",
        check=int_at_least(0),
    )
    min_incremental_fetch_session_eviction_ms: int = setting(
        "min.incremental.fetch.session.eviction.ms", 120000, "How long a fetch session "
        "goes unused before any newcomer may evict it.", check=int_at_least(0),
    )
    socket_request_max_bytes: int = setting(
        "socket.request.max.bytes", 104857600, "Largest request frame accepted.",
        check=int_at_least(1),
    )
    connections_max_idle_ms: int = setting(
        "connections.max.idle.ms", 600000, "Idle connections are closed after this.",
        check=at_least(1),
    )
    connections_max_reauth_ms: int = setting(
        "connections.max.reauth.ms", 0,
        "KIP-368: a SASL session's longest life before the client must re-authenticate "
        "(the broker closes a connection whose session expired on its next request); 0 "
        "leaves only a credential's own expiry (an OAUTHBEARER token's exp).",
        check=int_at_least(0),
    )
    sasl_server_max_receive_size: int = setting(
        "sasl.server.max.receive.size", 524288,
        "Largest frame a SASL listener reads before the connection has authenticated; a "
        "larger size prefix closes the connection before its bytes are read. -1 is "
        "unbounded (socket.request.max.bytes still applies).",
        check=int_at_least(-INT_MAX - 1),
    )
    queued_max_request_bytes: int = setting(
        "queued.max.request.bytes", 268435456, "Request bytes held across all connections "
        "(arrived, not yet handled) before reads stop; -1 is unbounded, as Kafka's "
        "default; otherwise at least socket.request.max.bytes.",
        check=lambda v: None if v == -1 or v >= 1 else "-1 (unbounded) or a value >= 1",
    )
    max_connections: int = setting(
        "max.connections", INT_MAX, "Connections the broker holds; at the limit new ones "
        "wait to be accepted until one closes. listener.name.<listener>.max.connections "
        "sets one listener's.", check=at_least(0),
    )
    max_connection_creation_rate: int = setting(
        "max.connection.creation.rate", INT_MAX, "New connections per second the broker "
        "accepts (KIP-612, measured over 11 one-second windows); above it the acceptor "
        "holds each new connection, up to a second, before serving it or accepting the next. "
        "listener.name.<listener>.max.connection.creation.rate sets one listener's.",
        check=int_at_least(0),
    )
    max_connections_per_ip: int = setting(
        "max.connections.per.ip", INT_MAX, "Connections from one address; more are closed "
        "at once. 0 only with max.connections.per.ip.overrides.", check=at_least(0),
    )
    max_connections_per_ip_overrides: list[str] = setting(
        "max.connections.per.ip.overrides", [], "Per-address or host name limits, "
        "host:count items (e.g. hostName:100,127.0.0.1:200).", check=_host_counts,
    )
    metrics_host: str = setting("metrics.host", "127.0.0.1", "Prometheus endpoint host.")
    metrics_port: int = setting(
        "metrics.port", -1, "Prometheus /metrics port; -1 disables, 0 picks a free port.",
        check=port(disabled=-1),
    )
    logging_format: str = setting(
        "logging.format", "console", "console for humans, json for machines.",
        check=one_of("console", "json"),
    )
    logging_level: str = setting(
        "logging.level", "info", "Log level.",
        check=one_of("debug", "info", "warning", "error"),
    )
    # listener.name.<name>.ssl.* and .sasl.enabled.mechanisms: listener name (upper
    # case) -> Kafka name -> value.
    listener_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def log_retention_ms_resolved(self) -> int:
        # Kafka: any negative value means "keep forever", which is -1
        if self.log_retention_ms is not None:
            return max(self.log_retention_ms, -1)
        if self.log_retention_minutes is not None:
            return max(self.log_retention_minutes * 60_000, -1)
        return max(self.log_retention_hours * 3_600_000, -1)

    @property
    def log_roll_ms_resolved(self) -> int:
        return self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * 3_600_000

    @property
    def log_flush_interval_ms_resolved(self) -> int:
        if self.log_flush_interval_ms is not None:
            return self.log_flush_interval_ms
        return self.log_flush_scheduler_interval_ms


BROKER_SCHEMA = ConfigSchema("", BrokerConfig)


# ---------------------------------------------------------------------------
# topic-level configs: name, type, the broker setting that supplies the default
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    name: str
    broker_key: str  # the BrokerConfig Kafka name that supplies the default
    default: Callable[[BrokerConfig], Any]
    key: ConfigKey  # type and check shared with the broker key


def _topic_key(
    name: str, broker_key: str, default: Callable[[BrokerConfig], Any]
) -> TopicConfigKey:
    base = schema_keys(BrokerConfig)[broker_key]
    return TopicConfigKey(name, broker_key, default, dataclasses.replace(base, name=name))


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
        _topic_key("flush.messages", "log.flush.interval.messages",
                   lambda b: b.log_flush_interval_messages),
        _topic_key("flush.ms", "log.flush.interval.ms", lambda b: b.log_flush_interval_ms_resolved),
        _topic_key("index.interval.bytes", "log.index.interval.bytes",
                   lambda b: b.log_index_interval_bytes),
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


def settings_as_strings(settings: Any) -> dict[str, str | None]:
    """Kafka name -> rendered value of every key of a settings object."""
    return {
        k.name: to_kafka_string(getattr(settings, k.attr))
        for k in schema_keys(type(settings)).values()
    }


def replace_settings(settings: T, changes: Mapping[str, Any]) -> T:
    """A copy of ``settings`` with Kafka-named changes applied (dynamic configs)."""
    keys = schema_keys(type(settings))
    return dataclasses.replace(  # type: ignore[type-var]
        settings, **{keys[name].attr: v for name, v in changes.items()}
    )
