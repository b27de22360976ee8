"""Client quotas, differentially: the same AlterClientQuotas and DescribeClientQuotas
frames to Apache Kafka and to Kafkernel. Each case alters entities of its own names, then
describes; what both answer (error codes, messages, entities and values, in a sorted
form: Kafka answers in hash-map order) must be equal. Cases run in order on both
brokers, so the match types that span every entity see the same quotas on both."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from kernel.testing.embedded import DEFAULT_PLUGINS, EmbeddedBroker
from reference import tools
from reference.kafka import ReferenceKafka
from tests.integration.admin_cli import kafkernel
from tests.integration.wire import connect, decode_response, encode_request, recv_frame
from tests.reference.conformance import body, part

# Kafka applies a committed change to the broker's image a moment after it answers.
SETTLE_S = 0.5

Entity = Sequence[tuple[str, str | None]]
Op = tuple[str, float | None]  # None: remove the key


def _ask(bootstrap: str, request: Any) -> Any:
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(request, correlation_id=7))
        frame = recv_frame(sock)
        assert frame is not None, "the broker closed the connection"
        return decode_response(frame, request.__api_key__, request.__version__)[1]


def _entity(parts: Any) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted(((e.entity_type, e.entity_name) for e in parts),
                        key=lambda p: (p[0], p[1] or "")))


def alter(b: str, entries: Sequence[tuple[Entity, Sequence[Op]]], *,
          validate_only: bool = False, version: int = 1) -> Any:
    request = body(49, version, validate_only=validate_only, entries=tuple(
        part(49, version, "EntryData",
             entity=tuple(part(49, version, "EntityData", entity_type=t, entity_name=n)
                          for t, n in entity),
             ops=tuple(part(49, version, "OpData", key=k, value=0.0 if v is None else v,
                            remove=v is None) for k, v in ops))
        for entity, ops in entries))
    answer = _ask(b, request)
    time.sleep(SETTLE_S)
    return sorted(((_entity(e.entity), e.error_code, e.error_message) for e in answer.entries),
                  key=repr)


def describe(b: str, components: Sequence[tuple[str, int, str | None]], *,
             strict: bool = False, version: int = 1) -> Any:
    request = body(48, version, strict=strict, components=tuple(
        part(48, version, "ComponentData", entity_type=t, match_type=mt, match=m)
        for t, mt, m in components))
    answer = _ask(b, request)
    entries = None if answer.entries is None else sorted((
        (_entity(e.entity),
         sorted((v.key, "NaN" if math.isnan(v.value) else v.value) for v in e.values))
        for e in answer.entries), key=repr)
    return answer.error_code, answer.error_message, entries


# The keys these cases cover, at v0 and v1 (test_api_versions checks every advertised
# key is covered somewhere).
KEYS = (48, 49)
EXACT, DEFAULT, ANY = 0, 1, 2
USER, CLIENT, IP = "user", "client-id", "ip"


def set_and_describe_each_entity_kind(b: str) -> Any:
    return [
        alter(b, [([(USER, "q-alice")], [("producer_byte_rate", 1024.0),
                                         ("consumer_byte_rate", 2048.0)])]),
        alter(b, [([(CLIENT, "q-c1")], [("consumer_byte_rate", 100.0),
                                        ("request_percentage", 12.5)])]),
        alter(b, [([(USER, "q-alice"), (CLIENT, "q-c1")],
                   [("controller_mutation_rate", 3.0)])]),
        alter(b, [([(USER, None)], [("producer_byte_rate", 100.0)]),
                  ([(USER, None), (CLIENT, None)], [("producer_byte_rate", 300.0)]),
                  ([(CLIENT, None)], [("request_percentage", 50.0)])]),
        alter(b, [([(IP, "10.1.2.3")], [("connection_creation_rate", 10.0)]),
                  ([(IP, None)], [("connection_creation_rate", 20.0)])]),
        alter(b, [([(USER, "q-zed")], [("producer_byte_rate", 4096.0)])], version=0),
        describe(b, [(USER, EXACT, "q-alice")]),
        describe(b, [(USER, EXACT, "q-alice")], strict=True),
        describe(b, [(USER, EXACT, "q-zed")], version=0),
        describe(b, [(CLIENT, EXACT, "q-c1"), (USER, EXACT, "q-alice")], strict=True),
    ]


def every_match_type(b: str) -> Any:
    return [
        describe(b, []),
        describe(b, [], strict=True),
        describe(b, [(USER, DEFAULT, None)]),
        describe(b, [(USER, DEFAULT, None)], strict=True),
        describe(b, [(USER, ANY, None)]),
        describe(b, [(USER, ANY, None)], strict=True),
        describe(b, [(USER, ANY, None), (CLIENT, ANY, None)]),
        describe(b, [(USER, DEFAULT, None), (CLIENT, DEFAULT, None)], strict=True),
        describe(b, [(CLIENT, ANY, None)], strict=True),
        describe(b, [(CLIENT, EXACT, "q-c1"), (USER, ANY, None)]),
        describe(b, [(IP, ANY, None)]),
        describe(b, [(IP, DEFAULT, None)]),
        describe(b, [(USER, EXACT, "nobody")]),
    ]


def removal_and_unchanged_values(b: str) -> Any:
    return [
        alter(b, [([(USER, "q-rm")], [("producer_byte_rate", 10.0),
                                      ("consumer_byte_rate", 20.0)])]),
        alter(b, [([(USER, "q-rm")], [("producer_byte_rate", None)])]),
        describe(b, [(USER, EXACT, "q-rm")]),
        alter(b, [([(USER, "q-rm")], [("consumer_byte_rate", 20.0)])]),
        alter(b, [([(USER, "q-rm")], [("consumer_byte_rate", None)])]),
        describe(b, [(USER, EXACT, "q-rm")]),
        alter(b, [([(USER, "q-nobody")], [("producer_byte_rate", None), ("nope", None)])]),
        describe(b, [(USER, EXACT, "q-nobody")]),
    ]


def validate_only_stores_nothing(b: str) -> Any:
    return [
        alter(b, [([(USER, "q-vo")], [("producer_byte_rate", 1.0)])], validate_only=True),
        alter(b, [([(USER, "q-vo2")], [("producer_byte_rate", 1.5)])], validate_only=True),
        describe(b, [(USER, EXACT, "q-vo")]),
    ]


def bad_alterations_are_refused_as_kafka_refuses(b: str) -> Any:
    cases: list[tuple[Entity, Sequence[Op]]] = [
        ([(USER, "q-b1")], [("connection_creation_rate", 10.0)]),
        ([(USER, "q-b2")], [("nope", 10.0), ("producer_byte_rate", 5.0)]),
        ([(USER, "q-b3")], [("producer_byte_rate", 10.5)]),
        ([(USER, "q-b4")], [("producer_byte_rate", -1.0)]),
        ([(USER, "q-b5")], [("producer_byte_rate", 0.0)]),
        ([(USER, "q-b6")], [("request_percentage", -1.0)]),
        ([(USER, "q-b7")], [("producer_byte_rate", 1e30)]),
        ([(USER, "q-b8")], [("request_percentage", math.inf)]),
        ([], [("producer_byte_rate", 1.0)]),
        ([("group", "g")], [("producer_byte_rate", 1.0)]),
        ([(USER, "")], [("producer_byte_rate", 1.0)]),
        ([(CLIENT, "")], [("producer_byte_rate", 1.0)]),
        ([(USER, "q-b9"), (USER, "q-b10")], [("producer_byte_rate", 1.0)]),
        ([(USER, "q-b11")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]),
        ([(IP, "10.0.0.2")], [("connection_creation_rate", 1.5)]),
        ([(IP, "10.0.0.2")], [("connection_creation_rate", -1.0)]),
        ([(IP, "10.0.0.2")], [("connection_creation_rate", 3e9)]),
        ([(IP, "not an ip!")], [("connection_creation_rate", 1.0)]),
        ([(IP, "10.0.0.3")], [("producer_byte_rate", 1.0)]),
        ([(IP, "10.0.0.3"), (USER, "x")], [("producer_byte_rate", 1.0)]),
    ]
    answers = [alter(b, [entry]) for entry in cases]
    answers.append(alter(b, [([(USER, "q-d")], [("producer_byte_rate", 1.0)]),
                             ([(USER, "q-d")], [("consumer_byte_rate", 1.0)])]))
    answers.append(describe(b, [(USER, ANY, None)], strict=True))
    return answers


def bad_filters_are_refused_as_kafka_refuses(b: str) -> Any:
    return [
        describe(b, [(USER, EXACT, None)]),
        describe(b, [(USER, DEFAULT, "x")]),
        describe(b, [(USER, ANY, "x")]),
        describe(b, [(USER, 7, None)]),
        describe(b, [("group", ANY, None)]),
        describe(b, [("", ANY, None)]),
        describe(b, [(USER, ANY, None), (USER, EXACT, "a")]),
        describe(b, [(IP, ANY, None), (USER, ANY, None)]),
    ]


CASES: list[Callable[[str], Any]] = [
    set_and_describe_each_entity_kind,
    every_match_type,
    removal_and_unchanged_values,
    validate_only_stores_nothing,
    bad_alterations_are_refused_as_kafka_refuses,
    bad_filters_are_refused_as_kafka_refuses,
]


def remove_every_quota(b: str) -> None:
    """Leaves the broker with no quota at all. The reference Kafka is shared by every
    module after this one, and a default quota left on it (these cases set user and
    client-id defaults of 100 B/s, and an ip default of 20 connections a second, which
    Kafka enforces by closing connections) throttles every later test's clients. Kafka
    lists ip entities only to a filter that names the ip type."""
    left: dict[Any, Any] = {}
    for components in ([], [(IP, ANY, None)]):
        error, _, entries = describe(b, components)
        assert error == 0, error
        left.update((entity, values) for entity, values in entries or [])
    if left:
        alter(b, [(entity, [(key, None) for key, _ in values])
                  for entity, values in left.items()])
    assert describe(b, [])[2] == [] and describe(b, [(IP, ANY, None)])[2] == []


@pytest.fixture(scope="module", autouse=True)
def _no_quota_left_on_the_reference(reference_kafka: ReferenceKafka) -> Any:
    yield
    remove_every_quota(reference_kafka.bootstrap)


@pytest.fixture(scope="module")
def quota_kafkernel() -> Any:
    """A broker of this module's own: the cases see every quota they and no other module
    set, as on the reference Kafka, where no other module sets quotas. With auth_sasl,
    which serves DescribeUserScramCredentials: kafka-configs asks it when it describes
    a user, as Kafka always serves it."""
    with EmbeddedBroker(plugins=(*DEFAULT_PLUGINS, "auth_sasl")) as broker:
        yield broker


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_client_quotas_conformance(case: Callable[[str], Any], reference_kafka: ReferenceKafka,
                                   quota_kafkernel: EmbeddedBroker) -> None:
    assert case(quota_kafkernel.bootstrap) == case(reference_kafka.bootstrap)


# kafka-configs' quota forms, run against both brokers: its output and exit code.
CONFIGS_SCRIPT: list[tuple[str, ...]] = [
    ("--alter", "--entity-type", "users", "--entity-name", "cfg-user",
     "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152"),
    ("--alter", "--entity-type", "clients", "--entity-default",
     "--add-config", "request_percentage=25"),
    ("--alter", "--entity-type", "users", "--entity-name", "cfg-user",
     "--entity-type", "clients", "--entity-name", "cfg-client",
     "--add-config", "controller_mutation_rate=5"),
    ("--alter", "--entity-type", "ips", "--entity-name", "10.9.8.7",
     "--add-config", "connection_creation_rate=7"),
    ("--describe", "--entity-type", "users", "--entity-name", "cfg-user"),
    ("--describe", "--entity-type", "clients", "--entity-default"),
    ("--describe", "--entity-type", "users", "--entity-name", "cfg-user",
     "--entity-type", "clients", "--entity-name", "cfg-client"),
    ("--describe", "--entity-type", "ips", "--entity-name", "10.9.8.7"),
    ("--alter", "--entity-type", "users", "--entity-name", "cfg-user",
     "--delete-config", "consumer_byte_rate"),
    ("--describe", "--entity-type", "users", "--entity-name", "cfg-user"),
    ("--alter", "--entity-type", "users", "--entity-name", "cfg-user",
     "--add-config", "producer_byte_rate=1.5"),
]


def _configs_tool(bootstrap: str) -> list[tuple[int, list[str]]]:
    outcomes = []
    for args in CONFIGS_SCRIPT:
        result = tools.run(tools.CONFIG_COMMAND, "--bootstrap-server", bootstrap, *args)
        # The error's first lines (the rest is the tool's usage text or a stack trace).
        error = [line.replace(bootstrap, "<bootstrap>") for line in result.stderr.splitlines()
                 if "Error" in line or "Exception:" in line][:2]
        outcomes.append((result.returncode, result.stdout.strip().splitlines() + error))
        time.sleep(SETTLE_S)
    return outcomes


def test_kafka_configs_quota_forms(reference_kafka: ReferenceKafka,
                                   quota_kafkernel: EmbeddedBroker) -> None:
    ours = _configs_tool(quota_kafkernel.bootstrap)
    assert ours == _configs_tool(reference_kafka.bootstrap)
    assert ours[4][1] == ["Quota configs for user-principal 'cfg-user' are "
                          "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0"], ours
    assert any("cannot be a fractional value" in line for line in ours[10][1]), ours


def _quota_commands(bootstrap: str) -> list[tuple[int, Any]]:
    """`kafkernel quota` list, set and delete: exit codes, and the JSON or the error."""
    script: list[tuple[str, ...]] = [
        ("set", "--user", "cli-user", "producer_byte_rate=1048576", "consumer_byte_rate=2e6"),
        ("set", "--user", "cli-user", "--client-id", "cli-c", "request_percentage=25"),
        ("set", "--client-id-default", "controller_mutation_rate=5", "--validate-only"),
        ("list", "--user", "cli-user"),
        ("list", "--user", "cli-user", "--strict"),
        ("delete", "--user", "cli-user", "consumer_byte_rate"),
        ("list", "--user", "cli-user", "--strict"),
        ("set", "--user", "cli-user", "producer_byte_rate=1.5"),
        ("set", "--ip", "10.3.2.1", "connection_creation_rate=9"),
        ("list", "--ip", "10.3.2.1"),
    ]
    seen = []
    for argv in script:
        ran = kafkernel(bootstrap, "quota", *argv, "-o", "json")
        seen.append((ran.code, json.loads(ran.out) if ran.code == 0 else ran.err.strip()))
        time.sleep(SETTLE_S)
    return seen


def test_quota_commands_answer_as_on_kafka(reference_kafka: ReferenceKafka,
                                           quota_kafkernel: EmbeddedBroker) -> None:
    ours = _quota_commands(quota_kafkernel.bootstrap)
    assert ours == _quota_commands(reference_kafka.bootstrap)
    assert ours[4][1] == [
        {"entity": "user=cli-user", "key": "consumer_byte_rate", "value": 2000000.0},
        {"entity": "user=cli-user", "key": "producer_byte_rate", "value": 1048576.0}]
    assert ours[7] == (1, "kafkernel: user=cli-user: producer_byte_rate cannot be a "
                          "fractional value.")
