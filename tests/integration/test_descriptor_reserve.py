"""Issue 30, descriptors: a broker under a low open files limit that receives more idle
connections than the limit keeps the descriptors its own work needs. Its periodic log
tasks and cleaner never fail for want of one, connected clients keep producing and
consuming, the connections it has no room for are refused (counted, logged a bounded
number of times), and once the idle ones close new clients connect again."""

from __future__ import annotations

import socket
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.broker_process import BrokerProcess, free_port

OPEN_FILES = 3000
IDLE_CONNECTIONS = 3500
# The periodic tasks that failed with EMFILE, run every 100 ms instead of every few
# seconds, so that a few seconds of flood see dozens of their runs.
FAST_TASKS = (
    "replica.high.watermark.checkpoint.interval.ms=100",
    "log.flush.offset.checkpoint.interval.ms=100",
    "log.flush.scheduler.interval.ms=100",
    "log.cleaner.backoff.ms=100",
)


def _metric(port: int, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v
                                           for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def _eventually(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def _round_trip(producer: Producer, consumer: Consumer, topic: str, tag: str,
                n: int = 20) -> None:
    """``n`` records produced and then read by the consumer already subscribed."""
    for i in range(n):
        producer.produce(topic, f"{tag}-{i}".encode())
    assert producer.flush(20) == 0, f"{tag}: records not delivered"
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(msg.value())
    assert seen == [f"{tag}-{i}".encode() for i in range(n)], f"{tag}: {len(seen)} read"


def _assert_no_emfile(log: str) -> None:
    """Before the reserve, checkpoint_high_watermarks failed with OSError(24) and the
    cleaner could not size __consumer_offsets."""
    assert "Too many open files" not in log and "OSError(24" not in log, [
        line for line in log.splitlines() if "open files" in line or "(24" in line][:5]


def _flood(bootstrap: str, count: int) -> list[socket.socket]:
    """``count`` idle connections, or as many as connect within a short timeout (on
    the starting code the ones beyond the accept backlog are never accepted)."""
    host, port = bootstrap.rsplit(":", 1)
    opened = []
    for _ in range(count):
        sock = socket.socket()
        sock.settimeout(0.2)
        try:
            sock.connect((host, int(port)))
        except OSError:
            sock.close()
            continue
        opened.append(sock)
    return opened


def test_idle_connections_beyond_the_limit_leave_the_broker_its_descriptors(
    tmp_path: Path,
) -> None:
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path, *FAST_TASKS, f"metrics.port={metrics_port}",
                           open_files=OPEN_FILES)
    with broker:
        topic = "fds-" + uuid.uuid4().hex[:8]
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic,
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        idle: list[socket.socket] = []
        try:
            # The group's offsets topic exists (compacted: the cleaner sizes it).
            _round_trip(producer, consumer, topic, "before")
            consumer.commit(asynchronous=False)
            idle = _flood(broker.bootstrap, IDLE_CONNECTIONS)
            assert len(idle) > OPEN_FILES // 2
            # The flood holds while the periodic tasks run dozens of times.
            _round_trip(producer, consumer, topic, "during")
            consumer.commit(asynchronous=False)
            time.sleep(2.0)
            _assert_no_emfile(broker.log())
            refused = _metric(metrics_port, "kafkernel_connections_rejected_total",
                              listener="PLAINTEXT", reason="file_descriptors")
            room = _metric(metrics_port, "kafkernel_client_connection_room")
            held = _metric(metrics_port, "kafkernel_active_connections", listener="PLAINTEXT")
            assert 0 < room < OPEN_FILES
            # Every idle connection was either kept, within the room, or refused.
            assert held <= room
            assert refused > 0 and refused + held >= len(idle), (refused, held, len(idle))
            assert broker.open_files() < OPEN_FILES
            _round_trip(producer, consumer, topic, "flooded")
        finally:
            for sock in idle:
                sock.close()
        # Once the idle connections are gone, new clients are served again.
        _eventually(broker.answers)
        _round_trip(producer, consumer, topic, "after")
        consumer.close()
        assert broker.alive
        _assert_no_emfile(broker.log())
        refusals = [e for e in broker.events()
                    if str(e.get("event", "")).startswith("refusing new connections")]
        assert len(refusals) == 1, refusals
        assert broker.problems() == []
