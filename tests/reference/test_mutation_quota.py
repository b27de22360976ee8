"""KIP-599's controller_mutation_rate on Apache Kafka and on Kafkernel side by side: the
same client-id quota (2 partitions a second, so a token bucket of 22), the same bursts
of CreateTopics, CreatePartitions and DeleteTopics on each; per topic the same error
codes and messages, and on both a throttle_time_ms where Kafka throttles.

Strict versions (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) take any
topic while the bucket is not in debt, refuse the rest with THROTTLING_QUOTA_EXCEEDED
and throttle; older versions take everything and throttle once the bucket is in debt."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.integration.wire import connect, decode_response, encode_request, recv_frame
from tests.reference.conformance import body, part
from tests.reference.test_conformance_quotas import CLIENT, alter, describe, remove_every_quota

CLIENT_ID = "mutator"
TIMEOUT = datetime.timedelta(seconds=30)
RATE = 2.0  # partitions/s: a full bucket holds 11 windows of it, 22
THROTTLING_QUOTA_EXCEEDED = 89


def _ask(bootstrap: str, request: Any) -> Any:
    with connect(bootstrap, timeout=30) as sock:
        sock.sendall(encode_request(request, correlation_id=3, client_id=CLIENT_ID))
        frame = recv_frame(sock)
        assert frame is not None, "the broker closed the connection"
        return decode_response(frame, request.__api_key__, request.__version__)[1]


def _create(bootstrap: str, version: int, topics: list[tuple[str, int]]) -> Any:
    return _ask(bootstrap, body(19, version, timeout=TIMEOUT, validate_only=False, topics=tuple(
        part(19, version, "CreatableTopic", name=name, num_partitions=count,
             replication_factor=1, assignments=(), configs=())
        for name, count in topics)))


def _throttle_ms(answer: Any) -> float:
    return answer.throttle_time.total_seconds() * 1000


def _burst(bootstrap: str, prefix: str) -> dict[str, Any]:
    """From a full bucket: a strict burst (topics of 5, 5, 5, 5, 10 and 5 partitions: the
    fifth takes the bucket 8 into debt, 4 s of it, and the sixth is refused), then a
    strict CreatePartitions and DeleteTopics in debt, then a permissive CreateTopics
    (v5) in debt."""
    names = [f"{prefix}-{i}" for i in range(6)]
    seen: dict[str, Any] = {}
    strict = _create(bootstrap, 7, [(n, 10 if i == 4 else 5) for i, n in enumerate(names)])
    seen["strict"] = [(t.name, t.error_code, t.error_message) for t in strict.topics]
    seen["strict_throttled"] = _throttle_ms(strict) > 0
    grow = _ask(bootstrap, body(37, 3, timeout=TIMEOUT, validate_only=False, topics=(
        part(37, 3, "CreatePartitionsTopic", name=names[0], count=6, assignments=None),)))
    seen["create_partitions"] = [(r.name, r.error_code, r.error_message) for r in grow.results]
    seen["create_partitions_throttled"] = _throttle_ms(grow) > 0
    delete = _ask(bootstrap, body(20, 5, timeout=TIMEOUT, topic_names=(names[1],)))
    seen["delete"] = [(r.name, r.error_code, r.error_message) for r in delete.responses]
    seen["delete_throttled"] = _throttle_ms(delete) > 0
    permissive = _create(bootstrap, 5, [(f"{prefix}-old-{i}", 1) for i in range(2)])
    seen["permissive"] = [(t.name.removeprefix(prefix), t.error_code) for t in permissive.topics]
    seen["permissive_throttled"] = _throttle_ms(permissive) > 0
    seen["strict"] = [(n.removeprefix(prefix), c, m) for n, c, m in seen["strict"]]
    for key in ("create_partitions", "delete"):
        seen[key] = [(n.removeprefix(prefix), c, m) for n, c, m in seen[key]]
    return seen


@pytest.fixture
def brokers(reference_kafka: ReferenceKafka) -> Iterator[dict[str, str]]:
    with EmbeddedBroker() as kafkernel:
        both = {"kafkernel": kafkernel.bootstrap, "kafka": reference_kafka.bootstrap}
        for bootstrap in both.values():
            answer = alter(bootstrap, [([(CLIENT, CLIENT_ID)],
                                        [("controller_mutation_rate", RATE)])])
            assert answer[0][1] == 0, answer
        try:
            yield both
        finally:
            alter(reference_kafka.bootstrap, [([(CLIENT, CLIENT_ID)],
                                               [("controller_mutation_rate", None)])])
            # Kafka's image lags while it deletes this test's topics.
            deadline = time.monotonic() + 15
            while describe(reference_kafka.bootstrap, [])[2] and time.monotonic() < deadline:
                time.sleep(0.2)
            remove_every_quota(reference_kafka.bootstrap)  # shared by later tests
        assert kafkernel.broker is not None
        text = generate_latest(kafkernel.broker.metrics.registry).decode()
        assert ('kafkernel_client_quota_throttled_total{client_id="mutator",'
                'quota="controller_mutation",user=""}') in text, text
        assert ('kafkernel_client_quota_mutations_total{client_id="mutator",user=""} '
                '32.0') in text, text


def test_a_mutation_quota_refuses_and_throttles_as_kafka(brokers: dict[str, str]) -> None:
    prefix = f"mutq{time.monotonic_ns()}"
    seen = {name: _burst(bootstrap, prefix) for name, bootstrap in brokers.items()}
    assert seen["kafkernel"] == seen["kafka"], seen
    strict = seen["kafka"]["strict"]
    assert [code for _, code, _ in strict] == [0] * 5 + [THROTTLING_QUOTA_EXCEEDED], seen
    assert seen["kafka"]["strict_throttled"] and seen["kafka"]["permissive_throttled"], seen
