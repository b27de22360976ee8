"""One export's options: the same names in a ``spark_sink`` TOML table and, dots made
dashes, on the command line of ``python -m spark.export`` and ``kafkernel spark export``.

Standard library only: the broker validates its exports without pyspark, and
``spark/export.py`` stays runnable by spark-submit with nothing but pyspark.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

__all__ = ["PARTITION_COLUMNS", "ExportOptionError", "ExportOptions", "RunFlags", "parse_args"]

# Columns an export may partition its table by: the record's UTC date and hour (of its
# Kafka timestamp), its topic and its partition.
PARTITION_COLUMNS = ("date", "hour", "topic", "partition")
# Spark's interval units (CalendarInterval), singular or plural.
_INTERVAL = re.compile(r"^\d+\s+(millisecond|second|minute|hour|day)s?$")
_STARTING = ("earliest", "latest")
_ISOLATION = ("read_committed", "read_uncommitted")


class ExportOptionError(ValueError):
    """One line naming the export, the option and what is wrong."""


@dataclass(frozen=True)
class ExportOptions:
    """What an export reads (topics or a pattern, from ``bootstrap_servers``) and where it
    writes (Parquet under ``path``, its progress in ``checkpoint``)."""

    name: str
    path: str
    bootstrap_servers: str = ""
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    checkpoint: str | None = None
    partition_by: tuple[str, ...] = ()
    trigger_interval: str = "10 seconds"
    master: str = "local[*]"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    isolation_level: str = "read_committed"
    fail_on_data_loss: bool = True
    # Extra Spark configuration, and kafka.* options for the source (security, ...).
    conf: Mapping[str, str] = field(default_factory=dict)
    kafka: Mapping[str, str] = field(default_factory=dict)

    @property
    def checkpoint_location(self) -> str:
        return self.checkpoint or self.path.rstrip("/") + "/_checkpoint"

    # -- from a TOML table -------------------------------------------------------

    @classmethod
    def from_table(cls, table: Mapping[str, Any], *,
                   defaults: Mapping[str, Any] | None = None) -> ExportOptions:
        """An export from its TOML table (Kafka-style dotted names); ``defaults`` fill
        options the table leaves out (the broker's own bootstrap address)."""
        name = table.get("name")
        if not isinstance(name, str) or not name:
            raise ExportOptionError("an export needs a name (a non-empty string)")
        kwargs: dict[str, Any] = {}
        for key, raw in {**(defaults or {}), **table}.items():
            spec = _SPECS.get(key)
            if spec is None:
                raise ExportOptionError(
                    f"export {name!r}: unknown option {key!r}; allowed: "
                    + ", ".join(sorted(_SPECS)))
            kwargs[spec.attr] = spec.coerce(raw, f"export {name!r}: {key}")
        return cls._checked(kwargs)

    @classmethod
    def _checked(cls, kwargs: dict[str, Any]) -> ExportOptions:
        name = kwargs["name"]
        if "path" not in kwargs or not kwargs["path"]:
            raise ExportOptionError(f"export {name!r}: path is required (where the table goes)")
        if bool(kwargs.get("topics")) == bool(kwargs.get("topic_pattern")):
            raise ExportOptionError(
                f"export {name!r}: give exactly one of topics (a list) and topic.pattern")
        if not kwargs.get("bootstrap_servers"):
            raise ExportOptionError(f"export {name!r}: bootstrap.servers is required")
        return cls(**kwargs)

    # -- to and from a command line -----------------------------------------------

    def to_args(self) -> list[str]:
        """The command line that gives back these options through :func:`parse_args`."""
        args = ["--name", self.name, "--path", self.path,
                "--bootstrap-servers", self.bootstrap_servers]
        for spec in _SPECS.values():
            if spec.attr in ("name", "path", "bootstrap_servers"):
                continue
            value = getattr(self, spec.attr)
            if value == spec.default:
                continue
            flag = "--" + spec.key.replace(".", "-")
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, tuple):
                args += [flag, ",".join(value)]
            elif isinstance(value, Mapping):
                for k, v in value.items():
                    args += [flag, f"{k}={v}"]
            else:
                args += [flag, str(value)]
        return args


@dataclass(frozen=True)
class _Spec:
    key: str
    attr: str
    kind: str  # str, int, bool, list, map
    default: Any
    check: Any = None  # value -> problem or None
    help: str = ""

    def coerce(self, raw: Any, where: str) -> Any:
        value: Any
        scalar = {"str": str, "int": int, "bool": bool}.get(self.kind)
        # bool is an int in Python, never in TOML's eyes.
        if scalar is not None and isinstance(raw, scalar) and (
                scalar is bool or not isinstance(raw, bool)):
            value = raw
        elif self.kind == "list" and isinstance(raw, list) and all(
                isinstance(x, str) for x in raw):
            value = tuple(raw)
        elif self.kind == "map" and isinstance(raw, Mapping) and all(
                isinstance(v, str | int | float | bool) for v in raw.values()):
            value = {str(k): _render(v) for k, v in raw.items()}
        else:
            expected = {"str": "a string", "int": "an integer", "bool": "true or false",
                        "list": "a list of strings",
                        "map": "a table of string values"}[self.kind]
            raise ExportOptionError(f"{where}: expected {expected}, got {raw!r}")
        problem = self.check(value) if self.check else None
        if problem:
            raise ExportOptionError(f"{where}: {value!r} is not allowed; expected {problem}")
        return value


def _render(v: str | int | float | bool) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _one_of(*allowed: str) -> Any:
    return lambda v: None if v in allowed else "one of " + ", ".join(allowed)


def _columns(v: tuple[str, ...]) -> str | None:
    bad = [c for c in v if c not in PARTITION_COLUMNS]
    return f"columns among {', '.join(PARTITION_COLUMNS)}" if bad else None


def _interval(v: str) -> str | None:
    return None if _INTERVAL.match(v.strip()) else \
        "an interval such as '10 seconds' or '500 milliseconds'"


def _starting(v: str) -> str | None:
    # earliest, latest, or Spark's JSON of offsets per partition ({"t":{"0":-2}}).
    return None if v in _STARTING or v.lstrip().startswith("{") else \
        "earliest, latest or a JSON object of offsets per topic and partition"


def _positive(v: int) -> str | None:
    return None if v > 0 else "a value > 0"


def _nonempty(v: str) -> str | None:
    return None if v.strip() else "a non-empty string"


_SPECS: dict[str, _Spec] = {s.key: s for s in (
    _Spec("name", "name", "str", None, _nonempty,
          "the export's name (Spark application and query name, metrics label)"),
    _Spec("path", "path", "str", None, _nonempty,
          "where the Parquet table is written (a local path or any Hadoop URI)"),
    _Spec("bootstrap.servers", "bootstrap_servers", "str", "", None,
          "the brokers to read from"),
    _Spec("topics", "topics", "list", (), None, "the topics to export"),
    _Spec("topic.pattern", "topic_pattern", "str", None, _nonempty,
          "a Java regular expression of topics to export, instead of topics"),
    _Spec("checkpoint", "checkpoint", "str", None, _nonempty,
          "Spark's checkpoint of the query (default: <path>/_checkpoint)"),
    _Spec("partition.by", "partition_by", "list", (), _columns,
          "columns the table is partitioned by: " + ", ".join(PARTITION_COLUMNS)),
    _Spec("trigger.interval", "trigger_interval", "str", "10 seconds", _interval,
          "how often a micro-batch starts"),
    _Spec("master", "master", "str", "local[*]", _nonempty,
          "Spark's master URL: local[N] or spark://host:7077"),
    _Spec("starting.offsets", "starting_offsets", "str", "earliest", _starting,
          "where a new export starts (its checkpoint decides afterwards)"),
    _Spec("max.offsets.per.trigger", "max_offsets_per_trigger", "int", None, _positive,
          "at most this many records per micro-batch"),
    _Spec("isolation.level", "isolation_level", "str", "read_committed",
          _one_of(*_ISOLATION), "read_committed leaves out aborted transactions"),
    _Spec("fail.on.data.loss", "fail_on_data_loss", "bool", True, None,
          "stop when records to export were deleted (retention) or a topic went away"),
    _Spec("conf", "conf", "map", {}, None, "extra Spark configuration, key=value"),
    _Spec("kafka", "kafka", "map", {}, None,
          "extra Kafka consumer options for the source, key=value (security.protocol, ...)"),
)}


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


class _OneLineErrors(argparse.ArgumentParser):
    """A bad option is one line naming it, not argparse's usage of every option (a
    screenful: there are a score of them)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (--help lists the options)\n")


def parser(prog: str) -> argparse.ArgumentParser:
    p = _OneLineErrors(
        prog=prog, description="Export Kafka topics to a Parquet table with Spark "
        "Structured Streaming, exactly once (Spark's Kafka source, file sink, checkpoint).")
    for spec in _SPECS.values():
        flag = "--" + spec.key.replace(".", "-")
        if spec.kind == "bool":
            p.add_argument(flag, dest=spec.attr, action=argparse.BooleanOptionalAction,
                           default=spec.default, help=spec.help)
        elif spec.kind == "map":
            p.add_argument(flag, dest=spec.attr, type=_pair, action="append", default=[],
                           metavar="KEY=VALUE", help=spec.help)
        else:
            p.add_argument(flag, dest=spec.attr, type=int if spec.kind == "int" else str,
                           required=spec.key in ("path", "bootstrap.servers"),
                           default=spec.default, help=spec.help)
    p.add_argument("--available-now", action="store_true",
                   help="export what the topics hold now, then stop")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop when the process that started this one exits (the broker's "
                        "spark_sink passes it)")
    return p


@dataclass(frozen=True)
class RunFlags:
    """How one run goes, beside what it exports."""

    available_now: bool = False  # stop once caught up
    exit_with_parent: bool = False


def parse_args(argv: Sequence[str], prog: str = "spark.export",
               ) -> tuple[ExportOptions, RunFlags]:
    """Options and run flags from a command line. Invalid values exit 2 with one line."""
    p = parser(prog)
    ns = p.parse_args(argv)
    flags = RunFlags(ns.available_now, ns.exit_with_parent)
    raw = {k: v for k, v in vars(ns).items() if k not in ("available_now", "exit_with_parent")}
    raw["name"] = raw["name"] or "export"
    raw["topics"] = tuple(t for t in (raw["topics"] or "").split(",") if t)
    raw["partition_by"] = tuple(c for c in (raw["partition_by"] or "").split(",") if c)
    raw["conf"] = dict(raw["conf"])
    raw["kafka"] = dict(raw["kafka"])
    try:
        for spec in _SPECS.values():
            value = raw[spec.attr]
            if spec.check and value is not None and value != spec.default:
                problem = spec.check(value)
                if problem:
                    raise ExportOptionError(
                        f"--{spec.key.replace('.', '-')}: {value!r} is not allowed; "
                        f"expected {problem}")
        options = ExportOptions._checked(raw)
    except ExportOptionError as e:
        p.error(str(e))
    return options, flags

