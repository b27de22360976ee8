"""Kafka Streams with processing.guarantee=exactly_once_v2 (tests/java/WordCountEos.java,
a word count) against Apache Kafka (which proves the test) and against Kafkernel, which
is killed and started again on its data between two halves of the input: under
read_committed the counts topic holds each word's counts 1, 2, ..., n exactly once.
The reference Kafka is not restarted: its harness formats a fresh log dir on each start."""

from __future__ import annotations

import signal
import struct
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reference import tools
from reference.kafka import KafkaNotFetched, ReferenceKafka
from tests.broker_process import BrokerProcess

HERE = Path(__file__).resolve().parent
WORDS = ("apple", "banana", "cherry", "damson")
LINES = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 3 + 1)) for i in range(30)]


@pytest.fixture(scope="session")
def word_count() -> Path:
    try:
        return tools.compile_java([HERE / "WordCountEos.java"], "word-count-eos")
    except KafkaNotFetched as e:
        pytest.fail(str(e), pytrace=False)


class Target:
    """The broker under test, and how to restart it mid-run (None: it is not)."""

    def __init__(self, bootstrap: str, restart: Callable[[], None] | None) -> None:
        self.bootstrap, self.restart = bootstrap, restart


@pytest.fixture(params=["kafka", "kafkernel"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "kafka":
        kafka: ReferenceKafka = request.getfixturevalue("transactional_kafka")
        yield Target(kafka.bootstrap, None)
        return
    brokers = [BrokerProcess(tmp_path).start()]

    def restart() -> None:
        old = brokers[-1]
        assert old.proc is not None
        old.proc.send_signal(signal.SIGKILL)
        old.proc.wait(10)
        brokers.append(BrokerProcess(tmp_path, data=tmp_path / "data", port=old.port).start())

    yield Target(brokers[0].bootstrap, restart)
    brokers[-1].stop()
    problems = [p for b in brokers for p in b.problems()]
    assert not problems, problems


def counts_read(bootstrap: str, topic: str, expected: dict[str, int],
                seconds: float = 60) -> dict[str, list[int]]:
    """Each word's counts as read_committed reads them, once the last of each is the
    expected one (or ``seconds`` passed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: dict[str, list[int]] = defaultdict(list)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and {
                w: c[-1] for w, c in seen.items()} != expected:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen[msg.key().decode()].append(struct.unpack(">q", msg.value())[0])
    finally:
        consumer.close()
    return dict(seen)


def expected_counts(lines: list[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for line in lines:
        for word in line.split():
            counts[word] += 1
    return dict(counts)


def test_exactly_once_v2_word_count(target: Target, word_count: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    source, output = f"wc-in-{tag}", f"wc-counts-{tag}"
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    for f in admin.create_topics([NewTopic(source, 2, 1), NewTopic(output, 1, 1)]).values():
        f.result(30)
    app = subprocess.Popen(tools.java_command(
        "WordCountEos", target.bootstrap, f"wc-{tag}", source, output,
        extra_classpath=[word_count]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        producer = Producer({"bootstrap.servers": target.bootstrap})
        half = len(LINES) // 2
        for line in LINES[:half]:
            producer.produce(source, value=line.encode())
        assert producer.flush(30) == 0
        first = expected_counts(LINES[:half])
        got = counts_read(target.bootstrap, output, first)
        assert {w: c[-1] for w, c in got.items()} == first, got
        if target.restart is not None:
            target.restart()
            producer = Producer({"bootstrap.servers": target.bootstrap})
        for line in LINES[half:]:
            producer.produce(source, value=line.encode())
        assert producer.flush(30) == 0
        final = expected_counts(LINES)
        seen = counts_read(target.bootstrap, output, final, seconds=90)
    finally:
        try:  # a closed stdin ends the program
            out, err = app.communicate(input="", timeout=30)
        except subprocess.TimeoutExpired:
            app.kill()
            out, err = app.communicate()
    assert seen == {w: list(range(1, n + 1)) for w, n in final.items()}, (seen, out, err[-3000:])
    assert "state ERROR" not in out, (out, err[-3000:])
