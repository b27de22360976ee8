"""The /metrics endpoint after real traffic, the published pytest fixture used from a
scratch project, and the `kafkernel serve` binary (uvloop) answering kcat."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.testing.embedded import EmbeddedBroker


def test_metrics_endpoint_shows_request_and_topic_metrics(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory({"metrics.port": 0})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("metered", 1, 1)])["metered"].result(10)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for _ in range(10):
        producer.produce("metered", b"x" * 100)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "metered"})
    consumer.assign([TopicPartition("metered", 0, 0)])
    got = 0
    deadline = time.monotonic() + 10
    while got < 10 and time.monotonic() < deadline:
        got += len(consumer.consume(10, 0.5))
    consumer.close()
    assert got == 10
    assert b.broker is not None and b.broker.metrics_port
    url = f"http://127.0.0.1:{b.broker.metrics_port}/metrics"
    text = subprocess.run(["curl", "-sf", url], capture_output=True, text=True, check=True,
                          timeout=30).stdout
    assert 'kafkernel_requests_total{api="produce"}' in text
    assert 'kafkernel_request_latency_seconds_bucket{api="metadata",le="+Inf"}' in text
    assert "kafkernel_network_bytes_in_total" in text
    assert "kafkernel_network_bytes_out_total" in text
    assert 'kafkernel_active_connections{listener="PLAINTEXT"}' in text
    assert 'kafkernel_build_info{broker_id="1",version="0.1.0"} 1.0' in text
    assert 'kafkernel_topic_messages_in_total{topic="metered"} 10.0' in text
    # counted from the fetched batches' headers
    assert 'kafkernel_topic_messages_out_total{topic="metered"} 10.0' in text
    assert 'kafkernel_log_end_offset{partition="0",topic="metered"} 10.0' in text
    assert 'kafkernel_log_segments{partition="0",topic="metered"} 1.0' in text
    assert 'kafkernel_purgatory_delayed_operations{purgatory="Fetch"}' in text
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")


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
