"""The /metrics endpoint after real traffic, the published pytest fixture used from a
scratch project, and the `kafkernel serve` binary (uvloop) answering kcat."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from kernel.testing.embedded import EmbeddedBroker

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    """Every sample of the /metrics endpoint, by sample name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def consume(bootstrap: str, topic: str, expected: int, **conf: Any) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, **conf})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 10
    try:
        while got < expected and time.monotonic() < deadline:
            got += len(consumer.consume(10, 0.5))
    finally:
        consumer.close()
    return got


def test_metrics_endpoint_shows_request_and_topic_metrics(
    broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    b = broker_factory({"metrics.port": 0})
    assert b.broker is not None and b.broker.metrics_port
    port = b.broker.metrics_port
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    futures = admin.create_topics([NewTopic("metered", 1, 1, config={"flush.messages": "1"}),
                                   NewTopic("idle", 1, 1)])
    for future in futures.values():
        future.result(10)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for _ in range(10):
        producer.produce("metered", b"x" * 100)
    assert producer.flush(10) == 0

    # A consumer long-polls the empty topic: its fetch waits in the Fetch purgatory.
    waiting: list[int] = []
    poller = threading.Thread(target=lambda: waiting.append(
        consume(b.bootstrap, "idle", 1, **{"fetch.wait.max.ms": 10_000})))
    poller.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        samples = scrape(port)
        if sample(samples, "kafkernel_purgatory_delayed_operations", purgatory="Fetch") == 1:
            break
        time.sleep(0.05)
    assert sample(samples, "kafkernel_purgatory_delayed_operations", purgatory="Fetch") == 1
    assert sample(samples, "kafkernel_purgatory_delayed_operations", purgatory="Produce") == 0
    producer.produce("idle", b"wake")
    assert producer.flush(10) == 0
    poller.join(30)
    assert waiting == [1]

    assert consume(b.bootstrap, "metered", 10) == 10
    url = f"http://127.0.0.1:{port}/metrics"
    text = subprocess.run(["curl", "-sf", url], capture_output=True, text=True, check=True,
                          timeout=30).stdout
    assert 'kafkernel_requests_total{api="produce"}' in text
    assert 'kafkernel_request_latency_seconds_bucket{api="metadata",le="+Inf"}' in text
    assert "kafkernel_network_bytes_in_total" in text
    assert "kafkernel_network_bytes_out_total" in text
    assert 'kafkernel_active_connections{listener="PLAINTEXT"}' in text
    assert 'kafkernel_build_info{broker_id="1",version="0.1.0"} 1.0' in text
    log = b.broker.logs.get_log("metered", 0)
    assert log is not None
    samples = scrape(port)
    partition = {"topic": "metered", "partition": "0"}
    assert sample(samples, "kafkernel_topic_messages_in_total", topic="metered") == 10
    # batches are stored as the client sent them: bytes in is exactly what the log holds
    bytes_in = sample(samples, "kafkernel_topic_bytes_in_total", topic="metered")
    assert bytes_in == log.size and log.size > 10 * 100
    # counted from the fetched batches' headers; one consumer read the log once
    assert sample(samples, "kafkernel_topic_messages_out_total", topic="metered") == 10
    assert sample(samples, "kafkernel_topic_bytes_out_total", topic="metered") == log.size
    assert sample(samples, "kafkernel_log_size_bytes", **partition) == log.size
    assert sample(samples, "kafkernel_log_segments", **partition) == 1
    assert sample(samples, "kafkernel_log_start_offset", **partition) == 0
    assert sample(samples, "kafkernel_log_end_offset", **partition) == 10
    assert sample(samples, "kafkernel_high_watermark", **partition) == 10
    assert sample(samples, "kafkernel_topic_messages_in_total", topic="idle") == 1
    # flush.messages=1: each produce request waited for an fsync, each one observed
    flushes = sample(samples, "kafkernel_log_flush_seconds_count")
    assert flushes is not None and flushes >= 1
    assert (sample(samples, "kafkernel_log_flush_seconds_sum") or 0) > 0
    assert sample(samples, "kafkernel_log_flush_seconds_bucket", le="+Inf") == flushes
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")


def test_replication_and_log_dir_gauges(broker_factory: Callable[..., EmbeddedBroker],
                                        tmp_path: Path) -> None:
    """One broker: a topic asking for two in-sync replicas is under its min ISR (and not
    under-replicated: its one replica is in sync); each log dir's volume is statvfs's."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    b = broker_factory({"metrics.port": 0, "log.dirs": ",".join(map(str, dirs))})
    assert b.broker is not None and b.broker.metrics_port
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    futures = admin.create_topics([
        NewTopic("strict", 2, 1, config={"min.insync.replicas": "2"}),
        NewTopic("lenient", 1, 1)])
    for future in futures.values():
        future.result(10)
    samples = scrape(b.broker.metrics_port)
    assert sample(samples, "kafkernel_under_min_isr_partitions") == 2
    assert sample(samples, "kafkernel_under_replicated_partitions") == 0
    assert sample(samples, "kafkernel_offline_partitions") == 0
    for directory in dirs:
        st = os.statvfs(directory)
        total = sample(samples, "kafkernel_log_dir_total_bytes", log_dir=str(directory))
        usable = sample(samples, "kafkernel_log_dir_usable_bytes", log_dir=str(directory))
        assert total == st.f_blocks * st.f_frsize
        assert usable is not None and abs(usable - st.f_bavail * st.f_frsize) < 64 << 20


@pytest.mark.broker_errors
def test_an_error_that_escapes_to_the_event_loop_is_logged_and_counted(
    broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    """What escapes a loop callback is the broker's logged error, counted in
    kafkernel_log_errors_total, and kept where the test fixture finds it."""
    b = broker_factory({"metrics.port": 0})
    assert b.broker is not None and b.broker.metrics_port
    assert sample(scrape(b.broker.metrics_port), "kafkernel_log_errors_total") == 0

    def fail() -> None:
        raise RuntimeError("escaped")

    assert b._loop is not None
    b._loop.call_soon_threadsafe(fail)
    deadline = time.monotonic() + 5
    while not b.broker.recent_errors:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert "unhandled error on the event loop" in b.broker.recent_errors[0]
    assert "RuntimeError('escaped')" in b.broker.recent_errors[0]
    assert sample(scrape(b.broker.metrics_port), "kafkernel_log_errors_total") == 1
    b.stop()
    assert len(b.logged_errors) == 1


def test_pytest_fixture_in_a_scratch_project(tmp_path: Path) -> None:
    (tmp_path / "test_users_code.py").write_text(textwrap.dedent("""
        from confluent_kafka import Consumer, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic

        def test_roundtrip(kafkernel_broker):
            admin = AdminClient({"bootstrap.servers": kafkernel_broker})
            admin.create_topics([NewTopic("orders", 3)])["orders"].result(10)
            producer = Producer({"bootstrap.servers": kafkernel_broker})
            producer.produce("orders", b"hello", partition=1)
            assert producer.flush(10) == 0
            consumer = Consumer({"bootstrap.servers": kafkernel_broker, "group.id": "g"})
            consumer.assign([TopicPartition("orders", 1, 0)])
            msg = consumer.poll(10)
            consumer.close()
            assert msg is not None and msg.value() == b"hello"
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_pytest_plugin_imports_the_broker_only_for_its_fixtures(tmp_path: Path) -> None:
    # Installing kafkernel registers the plugin in every pytest run of the environment:
    # loading it must not import the broker (kio, its hypothesis strategies: seconds and
    # a HypothesisSideeffectWarning in a suite that never asks for a broker).
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, kernel.testing.pytest_plugin; "
         "print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, timeout=60, check=True).stdout.split()
    heavy = [m for m in imported if m.split(".")[0] in ("kio", "hypothesis", "plugins")
             or m in ("kernel.server", "kernel.testing.embedded")]
    assert heavy == []
    (tmp_path / "test_plain.py").write_text("def test_nothing_kafka():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout and "Warning" not in result.stdout, result.stdout


def test_serve_binary_answers_kcat_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "k.toml"
    config.write_text(textwrap.dedent(f"""
        listeners = "PLAINTEXT://127.0.0.1:0"
        log.dirs = "{tmp_path / 'data'}"
        [plugins]
        enabled = ["metadata_kraft"]
    """))
    with EmbeddedBroker() as probe:  # a free port: bind one, stop, reuse its number
        port = int(probe.bootstrap.rsplit(":", 1)[1])
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernel", "serve", "--config", str(config),
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        out = ""
        while time.monotonic() < deadline:
            result = subprocess.run(["kcat", "-b", f"127.0.0.1:{port}", "-L", "-t", "served",
                                     "-m", "2"], capture_output=True, text=True, timeout=30)
            out = result.stdout
            if 'topic "served" with 1 partitions' in out:
                break
            time.sleep(0.2)
        assert 'topic "served" with 1 partitions' in out
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stdout is not None
        assert "broker stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
