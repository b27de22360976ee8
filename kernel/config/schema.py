"""The schema engine: a setting is a dataclass field that carries its Kafka name,
default, check and doc; values are coerced and checked against it, and rendered back as
Kafka renders them."""

from __future__ import annotations

import dataclasses
import decimal
import difflib
import math
import os
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
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


def host_counts(items: list[str]) -> str | None:
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


def toml_key(name: str) -> str:
    """``name`` as a TOML key: bare when it can be, else quoted (``"mod:Plugin"``)."""
    return name if name and all(c.isalnum() or c in "_-" for c in name) else f'"{name}"'
