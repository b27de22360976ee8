"""Crash safety: kill -9 during an acks=all load loses no acknowledged record, and a
segment tail with garbage or half a batch is truncated at restart."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.log.records import SimpleRecord, build_batch
from kernel.testing.embedded import EmbeddedBroker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(data: Path, port: int, *overrides: str) -> Iterator[subprocess.Popen[str]]:
    config = data.parent / "k.toml"
    config.write_text(textwrap.dedent(f"""
        listeners = "PLAINTEXT://127.0.0.1:{port}"
        log.dirs = "{data}"
        [plugins]
        enabled = ["metadata_kraft", "coordinator"]
        [plugins.coordinator]
        "offsets.topic.num.partitions" = 1
    """))
    args = [sys.executable, "-m", "kernel", "serve", "--config", str(config)]
    for o in overrides:
        args += ["--override", o]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    break
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def test_kill_9_during_acks_all_load_loses_no_acknowledged_record(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    acked: dict[int, bytes] = {}
    with served(data, port, "log.flush.interval.messages=1") as proc:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("crash", 1, 1)])["crash"].result(20)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                             "retries": 0, "message.timeout.ms": 5000})

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 3 and i < 200_000:
            producer.produce("crash", f"record-{i}".encode(), on_delivery=on_delivery)
            producer.poll(0)
            i += 1
            if i % 1000 == 0 and len(acked) > 2000:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        producer.flush(10)
    assert len(acked) > 100, "the load produced acknowledged records before the kill"
    with served(data, port):
        got = dict(read_all(bootstrap, "crash"))
    missing = [o for o in acked if got.get(o) != acked[o]]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. offset {missing[0]}"


def test_garbage_and_half_batch_at_the_tail_are_truncated(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = EmbeddedBroker(data_dir=data).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("tail", 1, 1)])["tail"].result(20)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(50):
            producer.produce("tail", f"v{i}".encode())
            producer.flush(10)
        # An unclean stop: the broker is abandoned without its clean-shutdown marker
        # (the embedded broker stops cleanly, so remove the marker it writes).
    finally:
        broker.stop(remove_data=False)
    (data / ".kafka_cleanshutdown").unlink(missing_ok=True)
    segment = data / "tail-0" / f"{0:020d}.log"
    good_size = segment.stat().st_size
    half = bytes(build_batch([SimpleRecord(b"half-written")], base_offset=50))[:40]
    with segment.open("ab") as f:
        f.write(half)
    restarted = EmbeddedBroker(data_dir=data).start()
    try:
        got = read_all(restarted.bootstrap, "tail")
        assert [v for _, v in got] == [f"v{i}".encode() for i in range(50)]
        assert segment.stat().st_size == good_size
        producer = Producer({"bootstrap.servers": restarted.bootstrap})
        producer.produce("tail", b"after")
        assert producer.flush(10) == 0
        assert read_all(restarted.bootstrap, "tail")[-1] == (50, b"after")
    finally:
        restarted.stop(remove_data=False)
    (data / ".kafka_cleanshutdown").unlink(missing_ok=True)
    with segment.open("ab") as f:
        f.write(b"\xde\xad\xbe\xef" * 100)
    again = EmbeddedBroker(data_dir=data).start()
    try:
        got = read_all(again.bootstrap, "tail")
        assert len(got) == 51 and got[-1] == (50, b"after")
    finally:
        again.stop()
