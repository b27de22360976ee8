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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from kernel.testing.embedded import EmbeddedBroker
from reference import tools
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


def _remove_quota(bootstrap: str, client_id: str) -> None:
    """The reference Kafka is shared by later tests: the quota goes, once Kafka's image
    shows it gone (it lags while Kafka makes or deletes this test's partitions)."""
    alter(bootstrap, [([(CLIENT, client_id)], [("controller_mutation_rate", None)])])
    deadline = time.monotonic() + 15
    while describe(bootstrap, [])[2] and time.monotonic() < deadline:
        time.sleep(0.2)
    remove_every_quota(bootstrap)


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
            _remove_quota(reference_kafka.bootstrap, CLIENT_ID)
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


TOOL_CLIENT_ID = "mutator-tool"


def _topics_tool(bootstrap: str, config: Path, topic: str, partitions: int) -> tuple[int, str]:
    ran = tools.run(tools.TOPIC_COMMAND, "--bootstrap-server", bootstrap, "--command-config",
                    str(config), "--create", "--topic", topic, "--partitions", str(partitions),
                    "--replication-factor", "1")
    errors = [line.split(" ERROR ", 1)[-1] for line in ran.stderr.splitlines()
              if " ERROR " in line]
    return ran.returncode, "\n".join(errors)


def _tool_creates_twice(bootstrap: str, config: Path, prefix: str) -> list[tuple[int, str]]:
    """kafka-topics creates 50 partitions (the bucket of 22 goes 28 into debt, 14 s of
    it), then one more, which is refused: the tool asks its admin client not to retry
    on a quota violation (KIP-599), and says so."""
    return [_topics_tool(bootstrap, config, f"{prefix}-big", 50),
            _topics_tool(bootstrap, config, f"{prefix}-small", 1)]


def test_kafka_topics_meets_the_mutation_quota_alike_on_both(reference_kafka: ReferenceKafka,
                                                             tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text(f"client.id={TOOL_CLIENT_ID}\n")
    prefix = f"mutq-tool{time.monotonic_ns()}"
    with EmbeddedBroker() as kafkernel:
        both = {"kafkernel": kafkernel.bootstrap, "kafka": reference_kafka.bootstrap}
        for bootstrap in both.values():
            answer = alter(bootstrap, [([(CLIENT, TOOL_CLIENT_ID)],
                                        [("controller_mutation_rate", RATE)])])
            assert answer[0][1] == 0, answer
        try:
            with ThreadPoolExecutor(2) as pool:
                futures = {name: pool.submit(_tool_creates_twice, b, config, prefix)
                           for name, b in both.items()}
                outcomes = {name: f.result() for name, f in futures.items()}
        finally:
            _remove_quota(reference_kafka.bootstrap, TOOL_CLIENT_ID)
    assert outcomes["kafkernel"] == outcomes["kafka"], outcomes
    assert outcomes["kafka"][0] == (0, ""), outcomes
    assert outcomes["kafka"][1][0] == 1, outcomes
    assert "ThrottlingQuotaExceededException" in outcomes["kafka"][1][1], outcomes
