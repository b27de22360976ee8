"""Differential testing: the same kio request to the reference Apache Kafka and to a
Kafkernel broker over raw sockets, both answers decoded by kio, normalised where the two
brokers must differ, compared field by field.

Normalised, and only these: the cluster id; the node's own id wherever a node id stands
(other ids such as -1 are kept); the node's own host and port; topic ids other than the
zero id; fetch session ids other than 0; timestamps; throttle times; error-message text
(whether there is one is kept; Kafka's empty message counts as none); the random part of
a generated member id (``<client id>-<uuid>``: the client id before it is kept).
Everything else must be equal. Lists of entities are compared as sets (Kafka gives
topics and partitions in hash order) unless ``ordered=True``. A test may leave out fields
outside its concern with ``ignore``, dotted field names from the response down
(``"topics.configs"``), saying why; a field left out because the brokers differ names
its entry in DIFFERENCES.md (``conformance.known``).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import re
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.integration.wire import request

NODE_ID_FIELDS = frozenset({
    "node_id", "leader_id", "controller_id", "broker_id", "replica_nodes", "isr_nodes",
    "offline_replicas", "eligible_leader_replicas", "last_known_elr", "coordinator_id",
})
ZERO_UUID = uuid.UUID(int=0)
MEMBER_ID_FIELDS = frozenset({"member_id", "leader"})
GENERATED_MEMBER_ID = re.compile(
    r"^(.*)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# Fields naming an entity inside a list, used to pair list elements in a diff.
IDENTITY_FIELDS = ("name", "topic_name", "resource_name", "partition_index", "key", "node_id",
                   "group_id", "topic")


@dataclass(frozen=True)
class Side:
    """One broker spoken to: what of its answers is its own (node id, host, port)."""

    label: str
    bootstrap: str
    node_id: int

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def send(self, body: Any) -> Any:
        """One request on a new connection; the decoded response body."""
        return request(self.bootstrap, body)


def kafka_side(kafka: ReferenceKafka) -> Side:
    return Side("kafka", kafka.bootstrap, kafka.node_id)


def kafkernel_side(broker: EmbeddedBroker) -> Side:
    assert broker.broker is not None, "broker not started"
    return Side("kafkernel", broker.bootstrap, broker.broker.config.broker_id)


@dataclass(frozen=True)
class Answers:
    kafka: Any
    kafkernel: Any


@dataclass(frozen=True)
class Pair:
    """The reference Kafka and a Kafkernel broker, asked the same things."""

    kafka: Side
    kafkernel: Side

    def send(self, body: Any) -> Answers:
        return Answers(self.kafka.send(body), self.kafkernel.send(body))

    def each(self, action: Callable[[Side], Any]) -> Answers:
        """Run ``action`` (e.g. a setup step of several requests) against both sides."""
        return Answers(action(self.kafka), action(self.kafkernel))

    def assert_same(self, answers: Answers, *, ordered: bool = False,
                    ignore: Collection[str] = ()) -> None:
        assert_same(answers.kafka, self.kafka, answers.kafkernel, self.kafkernel,
                    ordered=ordered, ignore=ignore)

    def compare(self, body: Any, *, ordered: bool = False,
                ignore: Collection[str] = ()) -> Answers:
        answers = self.send(body)
        self.assert_same(answers, ordered=ordered, ignore=ignore)
        return answers


def assert_same(expected: Any, expected_side: Side, actual: Any, actual_side: Side,
                *, ordered: bool = False, ignore: Collection[str] = ()) -> None:
    """Fail with one line per differing field (``path: kafka=... kafkernel=...``)."""
    a = normalise(expected, expected_side, ordered=ordered, ignore=frozenset(ignore))
    b = normalise(actual, actual_side, ordered=ordered, ignore=frozenset(ignore))
    lines = differences(a, b, type(expected).__name__, expected_side.label, actual_side.label)
    if lines:
        raise AssertionError(
            f"{len(lines)} difference(s) from {expected_side.label}:\n" + "\n".join(lines)
        )


def normalise(value: Any, side: Side, *, ordered: bool = False,
              ignore: frozenset[str] = frozenset(), path: str = "") -> Any:
    """A plain tree (dicts, lists, scalars) with what must differ replaced by markers;
    ``path`` is the dotted field path of ``value`` (no list indices)."""
    if path in ignore:
        return "<ignored>"
    name = path.rsplit(".", 1)[-1]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: normalise(getattr(value, f.name), side, ordered=ordered, ignore=ignore,
                                  path=f"{path}.{f.name}" if path else f.name)
                for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        items = [normalise(v, side, ordered=ordered, ignore=ignore, path=path) for v in value]
        if not ordered and items and all(isinstance(i, dict) for i in items):
            items.sort(key=repr)
        return items
    if name in NODE_ID_FIELDS and isinstance(value, int) and value == side.node_id:
        return "<node>"
    if name == "host" and value == side.host:
        return "<host>"
    if name == "port" and value == side.port:
        return "<port>"
    if name == "cluster_id" and value is not None:
        return "<cluster-id>"
    if name == "topic_id" and isinstance(value, uuid.UUID):
        return "<zero-uuid>" if value == ZERO_UUID else "<topic-id>"
    if name == "producer_id" and isinstance(value, int) and value >= 0:
        return "<producer-id>"  # each broker hands out its own
    if name == "session_id" and isinstance(value, int) and value != 0:
        return "<session-id>"  # a fetch session's: random on each broker (0: none)
    if name.startswith("throttle_time"):
        return "<throttle>"
    if name in MEMBER_ID_FIELDS and isinstance(value, str) and (
            generated := GENERATED_MEMBER_ID.match(value)):
        return f"{generated.group(1)}-<uuid>"
    if name == "error_message":
        return "<message>" if value else None
    if "timestamp" in name and (isinstance(value, datetime.datetime)
                                or (isinstance(value, int) and value >= 0)):
        return "<timestamp>"
    if isinstance(value, enum.Enum):
        return f"{value.name}({value.value})"
    if isinstance(value, datetime.timedelta):
        return f"{round(value.total_seconds() * 1000)}ms"
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def differences(a: Any, b: Any, path: str, a_label: str, b_label: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in dict.fromkeys([*a, *b]):
            if key not in a or key not in b:
                out.append(f"{path}.{key}: {a_label}={a.get(key, '<absent>')!r} "
                           f"{b_label}={b.get(key, '<absent>')!r}")
            else:
                out.extend(differences(a[key], b[key], f"{path}.{key}", a_label, b_label))
        return out
    if isinstance(a, list) and isinstance(b, list):
        return _list_differences(a, b, path, a_label, b_label)
    if a != b:
        return [f"{path}: {a_label}={a!r} {b_label}={b!r}"]
    return []


def _list_differences(a: list[Any], b: list[Any], path: str, a_label: str,
                      b_label: str) -> list[str]:
    key = _identity(a, b)
    if key is None:
        if len(a) != len(b):
            return [f"{path}: {a_label}={a!r} {b_label}={b!r}"]
        out: list[str] = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out.extend(differences(x, y, f"{path}[{i}]", a_label, b_label))
        return out
    by_a = {item[key]: item for item in a}
    by_b = {item[key]: item for item in b}
    out = []
    for ident in dict.fromkeys([*by_a, *by_b]):
        where = f"{path}[{key}={ident!r}]"
        if ident not in by_b:
            out.append(f"{where}: only {a_label} has it: {by_a[ident]!r}")
        elif ident not in by_a:
            out.append(f"{where}: only {b_label} has it: {by_b[ident]!r}")
        else:
            out.extend(differences(by_a[ident], by_b[ident], where, a_label, b_label))
    return out


def _identity(a: list[Any], b: list[Any]) -> str | None:
    """The field that names each element uniquely on both sides, if there is one."""
    if not all(isinstance(i, dict) for i in a + b) or not a + b:
        return None
    for key in IDENTITY_FIELDS:
        names = [[i.get(key, _MISSING) for i in side] for side in (a, b)]
        if all(isinstance(v, str | int) and v is not _MISSING and len(set(side)) == len(side)
               for side in names for v in side):
            return key
    return None


_MISSING = object()
