"""Crash safety: kill -9 during an acks=all load loses no acknowledged record, with
flush.messages=1 every acknowledged append is already fsynced, and a segment tail with
garbage or half a batch is truncated at restart."""

from __future__ import annotations

import datetime
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from kernel.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    SimpleRecord,
    build_batch,
    iter_batches,
)
from kernel.testing.embedded import EmbeddedBroker
from tests.broker_process import free_port, served
from tests.integration.wire import connect, decode_response, encode_request, recv_frame


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(20)


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
        create_topic(bootstrap, "crash")
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


def slow_down_fsync(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Every fsync of the process still happens, ``seconds`` late: an acknowledgement
    sent without waiting for the flush then arrives visibly before it."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        time.sleep(seconds)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def produce_one(sock: socket.socket, topic: str, acks: int, value: bytes,
                correlation_id: int) -> tuple[ErrorCode, int]:
    """Send one single-record Produce v9 and wait for its answer: (error, base offset)."""
    request = ProduceRequest(acks=acks, timeout=datetime.timedelta(seconds=20), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(
            index=0, records=build_batch([SimpleRecord(value=value)])),)),
    ))
    sock.sendall(encode_request(request, correlation_id=correlation_id))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    got_id, body = decode_response(frame, 0, 9)
    assert got_id == correlation_id
    (partition,) = body.responses[0].partition_responses
    return partition.error_code, partition.base_offset


@pytest.mark.parametrize("acks", [1, -1], ids=["acks1", "acks_all"])
def test_flush_messages_1_acknowledges_only_flushed_records(
    broker_factory: Callable[..., EmbeddedBroker], monkeypatch: pytest.MonkeyPatch, acks: int
) -> None:
    """kill -9 cannot tell an fsync from the page cache; the log's recovery point can:
    it moves only after the fsync returned. With flush.messages=1 it must already cover
    a record when the record's acknowledgement reaches the client."""
    b = broker_factory({"log.flush.interval.messages": 1})
    create_topic(b.bootstrap, "durable")
    assert b.broker is not None
    log = b.broker.logs.get_log("durable", 0)
    assert log is not None and log.config.flush_messages == 1
    slow_down_fsync(monkeypatch, 0.05)
    with connect(b.bootstrap, timeout=30) as sock:
        for i in range(5):
            error, base_offset = produce_one(sock, "durable", acks, b"r%d" % i, i)
            flushed_to = log.recovery_point  # read as soon as the acknowledgement is in
            assert (error, base_offset) == (ErrorCode.none, i)
            assert flushed_to >= i + 1, (
                f"record {i} was acknowledged before the log was flushed past it "
                f"(recovery point {flushed_to})"
            )


def test_garbage_and_half_batch_at_the_tail_are_truncated(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = EmbeddedBroker(data_dir=data).start()
    try:
        create_topic(broker.bootstrap, "tail")
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
    *_, (last, _) = iter_batches(segment.read_bytes())
    assert last.next_offset == 50
    # The next batch as it would have been written, cut mid-body by the crash, then
    # garbage: its header is whole and sound, but its length runs past the file's end.
    whole = build_batch([SimpleRecord(b"half-written" * 200)], base_offset=50,
                        partition_leader_epoch=last.partition_leader_epoch)
    cut = whole[:RECORD_BATCH_OVERHEAD + 300]
    garbage = b"\x5a" * 500
    assert len(cut) + len(garbage) < len(whole)
    with segment.open("ab") as f:
        f.write(cut + garbage)
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
