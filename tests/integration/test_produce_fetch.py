"""Records reach the log and come back through real clients: confluent-kafka
(librdkafka), kafka-python, aiokafka and kcat; every codec, keys, null values, headers,
1 MB records, many partitions, offsets by time, and long polls."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import connect, decode_response, encode_request, recv_frame

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(10)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int,
                **conf: Any) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, **conf})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            messages.append(msg)
    finally:
        consumer.close()
    return messages


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_roundtrip_each_codec(broker: EmbeddedBroker, codec: str) -> None:
    topic = f"cf-{codec}"
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                         "linger.ms": 5, "acks": "all"})
    sent = []
    for i in range(500):
        key = f"k{i}".encode() if i % 3 else None
        value = None if i % 7 == 0 else f"value-{i}".encode() * (i % 5 + 1)
        headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 2 else None
        producer.produce(topic, value=value, key=key, headers=headers)
        sent.append((key, value, headers))
    assert producer.flush(30) == 0
    got = consume_all(broker.bootstrap, topic, 1, len(sent))
    assert [m.offset() for m in got] == list(range(len(sent)))
    for msg, (key, value, headers) in zip(got, sent, strict=True):
        assert msg.key() == key
        assert msg.value() == value
        assert (msg.headers() or None) == headers


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", None])
def test_kafka_python_roundtrip(broker: EmbeddedBroker, codec: str | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = f"kp-{codec}"
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec,
                             acks="all", linger_ms=5)
    for i in range(200):
        producer.send(topic, key=str(i).encode(), value=None if i == 3 else b"v" * i,
                      headers=[("n", str(i).encode())], partition=i % 2)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    consumer.assign([KTP(topic, 0), KTP(topic, 1)])
    consumer.seek_to_beginning()
    got = {}
    for msg in consumer:
        got[int(msg.key)] = msg
        if len(got) == 200:
            break
    consumer.close()
    assert len(got) == 200
    assert got[3].value is None
    assert got[150].value == b"v" * 150
    assert got[150].headers == [("n", b"150")]
    assert got[150].partition == 0


def test_aiokafka_roundtrip(broker: EmbeddedBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    topic = "aio"
    create_topic(broker.bootstrap, topic)

    async def run() -> list[Any]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                                    compression_type="gzip")
        await producer.start()
        try:
            for i in range(100):
                await producer.send(topic, key=b"k", value=f"m{i}".encode(),
                                    headers=[("x", b"y")])
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([ATP(topic, 0)])
            await consumer.seek_to_beginning(ATP(topic, 0))
            got: list[Any] = []
            while len(got) < 100:
                batch = await consumer.getmany(timeout_ms=2000)
                if not batch:
                    break
                for msgs in batch.values():
                    got.extend(msgs)
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert [m.value for m in got] == [f"m{i}".encode() for i in range(100)]
    assert got[0].headers == (("x", b"y"),)


def test_kcat_produce_and_consume(broker: EmbeddedBroker, tmp_path: Any) -> None:
    topic = "kcat"
    create_topic(broker.bootstrap, topic)
    lines = [f"line-{i}" for i in range(1000)]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-z", "lz4",
                    "-l", str(src)], check=True, timeout=60)
    out = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning",
                          "-e", "-q"], check=True, timeout=60, capture_output=True, text=True)
    assert out.stdout.splitlines() == lines


def test_one_megabyte_records(broker: EmbeddedBroker) -> None:
    topic = "big"
    create_topic(broker.bootstrap, topic, config={"max.message.bytes": str(3 * 1024 * 1024)})
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "message.max.bytes": 3 * 1024 * 1024, "acks": "all"})
    payloads = [bytes([i]) * (1024 * 1024) for i in range(5)]
    for p in payloads:
        producer.produce(topic, value=p)
    assert producer.flush(30) == 0
    got = consume_all(broker.bootstrap, topic, 1, 5, **{"fetch.max.bytes": 1024 * 1024,
                                                        "max.partition.fetch.bytes": 1024})
    assert [m.value() for m in got] == payloads


def test_too_large_batch_is_rejected_and_nothing_appended(broker: EmbeddedBroker) -> None:
    topic = "small"
    create_topic(broker.bootstrap, topic, config={"max.message.bytes": "2000"})
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 100000,
                         "retries": 0})
    producer.produce(topic, value=b"x" * 5000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    producer.produce(topic, value=b"ok")
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].name() == "MSG_SIZE_TOO_LARGE"
    got = consume_all(broker.bootstrap, topic, 1, 1)
    assert [m.value() for m in got] == [b"ok"]


def test_many_partitions(broker: EmbeddedBroker) -> None:
    topic = "wide"
    create_topic(broker.bootstrap, topic, partitions=64)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 10})
    for i in range(64 * 20):
        producer.produce(topic, value=str(i).encode(), partition=i % 64)
    assert producer.flush(30) == 0
    got = consume_all(broker.bootstrap, topic, 64, 64 * 20)
    assert sorted(int(m.value()) for m in got) == list(range(64 * 20))
    assert {m.partition() for m in got} == set(range(64))


def test_a_deleted_topic_leaves_nothing_and_its_namesake_starts_empty(
        broker: EmbeddedBroker) -> None:
    """Every partition's log goes with the topic; a topic created again under the name
    serves none of the old records."""
    topic = "reborn"
    create_topic(broker.bootstrap, topic, partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(3):
        producer.produce(topic, value=b"old", partition=p)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic])[topic].result(10)
    deadline = time.monotonic() + 10
    while any(d.name.startswith(f"{topic}-") for d in broker.data_dir.iterdir()):
        assert time.monotonic() < deadline, sorted(d.name for d in broker.data_dir.iterdir())
        time.sleep(0.05)

    create_topic(broker.bootstrap, topic, partitions=3)
    for p in range(3):
        producer.produce(topic, value=b"new", partition=p)
    assert producer.flush(30) == 0
    got = consume_all(broker.bootstrap, topic, 3, 3)
    assert sorted((m.partition(), m.offset(), m.value()) for m in got) == [
        (p, 0, b"new") for p in range(3)]


def test_offsets_earliest_latest_and_by_timestamp(broker: EmbeddedBroker) -> None:
    topic = "times"
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    base = int(time.time() * 1000) - 100_000
    for i in range(10):
        producer.produce(topic, value=str(i).encode(), timestamp=base + i * 1000)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 10)
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=10)
        assert found[0].offset == 5
        after = consumer.offsets_for_times([TopicPartition(topic, 0, base + 99_000)], timeout=10)
        assert after[0].offset == -1  # no record at or after that time: end
        consumer.assign([TopicPartition(topic, 0, found[0].offset)])
        msg = consumer.poll(10)
        assert msg is not None and msg.value() == b"5"
    finally:
        consumer.close()
    # From latest: only what is produced afterwards arrives.
    latest = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                       "auto.offset.reset": "latest"})
    try:
        latest.assign([TopicPartition(topic, 0, -1)])  # OFFSET_END
        latest.poll(1)
        producer.produce(topic, value=b"new")
        producer.flush(10)
        msg = None
        deadline = time.monotonic() + 10
        while msg is None and time.monotonic() < deadline:
            msg = latest.poll(0.5)
        assert msg is not None and msg.value() == b"new" and msg.offset() == 10
    finally:
        latest.close()


def _fetch(bootstrap: str, topic: str, offset: int, max_wait_ms: int) -> tuple[float, Any]:
    request = FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="",
    )
    with connect(bootstrap, timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(encode_request(request))
        frame = recv_frame(sock)
        elapsed = time.monotonic() - started
    assert frame is not None
    return elapsed, decode_response(frame, 1, 11)[1]


def test_long_poll_returns_when_data_arrives_and_after_max_wait(broker: EmbeddedBroker) -> None:
    topic = "poll"
    create_topic(broker.bootstrap, topic)
    # No data: the fetch is held for max_wait (500 ms), then answered empty, not later
    # than a few timer ticks and scheduling delays after it.
    elapsed, body = _fetch(broker.bootstrap, topic, 0, 500)
    assert 0.45 <= elapsed < 3, f"an empty long poll of 500 ms answered after {elapsed:.3f} s"
    assert body.responses[0].partitions[0].records in (b"", None)
    # Data arrives while the fetch waits (max_wait 20 s): it is answered on the append,
    # well before max_wait, not when the wait runs out.
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    produced_at: list[float] = []

    def produce() -> None:
        produced_at.append(time.monotonic())
        producer.produce(topic, value=b"wake")
        producer.flush(10)

    timer = threading.Timer(0.5, produce)
    timer.start()
    elapsed, body = _fetch(broker.bootstrap, topic, 0, 20_000)
    answered_at = time.monotonic()
    timer.join()
    assert b"wake" in bytes(body.responses[0].partitions[0].records)
    after_produce = answered_at - produced_at[0]
    assert after_produce < 5, (
        f"the waiting fetch was answered {after_produce:.3f} s after the produce "
        f"({elapsed:.3f} s after it was sent, max_wait 20 s)"
    )


def test_offset_out_of_range(broker: EmbeddedBroker) -> None:
    topic = "range"
    create_topic(broker.bootstrap, topic)
    _, body = _fetch(broker.bootstrap, topic, 42, 0)
    assert body.responses[0].partitions[0].error_code.name == "offset_out_of_range"


def test_pipelined_large_produce_requests_land_intact(broker: EmbeddedBroker) -> None:
    """Frames larger than the receive buffer get buffers that are reused once decoded;
    pipelined ones must each keep their own bytes. The short read after a large frame
    may hold small frames whole and the start of the next large one."""
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    from kernel.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records

    create_topic(broker.bootstrap, "big-pipelined")
    sizes = [600_000, 300_000, 10, 900_000, 20, 30, 600_000, 450_000, 40_000, 950_000, 50]
    values = [bytes([65 + i]) * size for i, size in enumerate(sizes)]
    requests = [
        encode_request(ProduceRequest(acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(
            TopicProduceData(name="big-pipelined", partition_data=(PartitionProduceData(
                index=0, records=build_batch([SimpleRecord(value=v)])),)),
        )), correlation_id=i)
        for i, v in enumerate(values)
    ]
    with connect(broker.bootstrap) as sock:
        sock.sendall(b"".join(requests))
        for i in range(len(requests)):
            frame = recv_frame(sock)
            assert frame is not None
            correlation_id, body = decode_response(frame, 0, 9)
            assert correlation_id == i
            (partition,) = body.responses[0].partition_responses
            assert (partition.error_code, partition.base_offset) == (ErrorCode.none, i)
    log = broker.broker.logs.get_log("big-pipelined", 0)
    assert log is not None
    stored = [r.value for _, batch in iter_batches(log.read(0, 1 << 24).records)
              for r in iter_records(batch)]
    assert stored == values


def test_broker_fetch_max_bytes_caps_a_consumer_response(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """fetch.max.bytes bounds a response below the request's max_bytes, in whole batches,
    and still lets the first partition return one batch larger than the cap."""
    from kernel.protocol.records import iter_batches

    b = broker_factory({"fetch.max.bytes": 100_000})
    create_topic(b.bootstrap, "capped", partitions=4)
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0,
                         "batch.num.messages": 1})
    for p in range(4):
        for _ in range(3):
            producer.produce("capped", value=b"x" * 30_000, partition=p)
    producer.produce("capped", value=b"y" * 250_000, partition=3)
    producer.flush(10)

    def fetch(offsets: dict[int, int]) -> dict[int, bytes]:
        request = FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=50 << 20,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=(FetchTopic(topic="capped", partitions=tuple(FetchPartition(
                partition=p, current_leader_epoch=-1, fetch_offset=o, log_start_offset=-1,
                partition_max_bytes=1 << 20) for p, o in offsets.items())),),
            forgotten_topics_data=(), rack_id="",
        )
        with connect(b.bootstrap, timeout=30) as sock:
            sock.sendall(encode_request(request))
            frame = recv_frame(sock)
        assert frame is not None
        body = decode_response(frame, 1, 11)[1]
        return {p.partition_index: bytes(p.records or b"")
                for p in body.responses[0].partitions}

    records = fetch({0: 0, 1: 0, 2: 0, 3: 0})
    sizes = {p: len(r) for p, r in records.items()}
    assert 0 < sum(sizes.values()) <= 100_000
    assert sizes[0] >= 90_000, "the first partition fills the response"
    for r in records.values():  # whole batches only
        assert sum(len(batch) for _, batch in iter_batches(r)) == len(r)
    # Past the cap: the first partition with data still returns its one large batch.
    records = fetch({3: 3, 0: 0})
    assert len(records[3]) > 250_000
    assert records[0] == b""


def test_clients_read_every_partition_through_the_smallest_fetch_cap(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """With fetch.max.bytes at its minimum every response carries one partition's first
    batch; librdkafka and kafka-python still read every partition to the end."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    b = broker_factory({"fetch.max.bytes": 1024})
    create_topic(b.bootstrap, "tiny-cap", partitions=4)
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(400):
        producer.produce("tiny-cap", key=str(i).encode(), value=b"v" * 900, partition=i % 4)
        if i % 50 == 0:
            producer.flush(10)  # several batches per partition
    producer.flush(10)
    messages = consume_all(b.bootstrap, "tiny-cap", 4, 400)
    assert sorted(int(m.key()) for m in messages) == list(range(400))
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10000)
    consumer.assign([KTP("tiny-cap", p) for p in range(4)])
    consumer.seek_to_beginning()
    keys = set()
    for msg in consumer:
        keys.add(int(msg.key))
        if len(keys) == 400:
            break
    consumer.close()
    assert keys == set(range(400))
