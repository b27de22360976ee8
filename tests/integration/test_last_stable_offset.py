"""A plugin holds back a partition's last stable offset (tests/plugins/
stable_offset_plugin.py, as the transactions plugin will): READ_COMMITTED fetches and
ListOffsets stop at it, READ_UNCOMMITTED ones at the high watermark, a waiting
READ_COMMITTED fetch is answered when it is released, and a confluent-kafka consumer
(read_committed is librdkafka's default) reads on from there."""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from kernel.handlers import fetch, list_offsets
from kernel.protocol.build import request_module
from kernel.testing.embedded import DEFAULT_PLUGINS, EmbeddedBroker
from tests.integration.test_log_apis_wire import build, values_in
from tests.integration.test_produce_fetch import create_topic
from tests.integration.wire import connect, decode_response, encode_request, recv_frame
from tests.plugins.stable_offset_plugin import NAME, HoldStableOffset

TOPIC = "held"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
FETCH_VERSION = 12  # the last by topic name
BASE_TIMESTAMP = 1_700_000_000_000


def fetch_from(broker: EmbeddedBroker, offset: int, isolation_level: int,
               max_wait_ms: int = 0) -> Any:
    m = request_module(fetch.API_KEY, FETCH_VERSION)
    body = build(m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(
        milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
        isolation_level=isolation_level, session_epoch=-1, topics=(build(
            m.FetchTopic, topic=TOPIC, partitions=(build(
                m.FetchPartition, partition=0, fetch_offset=offset, current_leader_epoch=-1,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),))
    # A long poll that nobody wakes would outlast the socket's timeout and fail here.
    with connect(broker.bootstrap, timeout=max_wait_ms / 2000 + 5) as sock:
        sock.sendall(encode_request(body))
        frame = recv_frame(sock)
    assert frame is not None
    ((answer,),) = (t.partitions for t in decode_response(frame, fetch.API_KEY,
                                                          FETCH_VERSION)[1].responses)
    return answer


def list_offset(broker: EmbeddedBroker, timestamp: int, isolation_level: int) -> int:
    m = request_module(list_offsets.API_KEY, 9)
    body = build(m.ListOffsetsRequest, replica_id=-1, isolation_level=isolation_level,
                 topics=(build(m.ListOffsetsTopic, name=TOPIC, partitions=(build(
                     m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                     timestamp=timestamp),)),))
    with connect(broker.bootstrap) as sock:
        sock.sendall(encode_request(body))
        frame = recv_frame(sock)
    assert frame is not None
    ((answer,),) = (t.partitions for t in decode_response(frame, list_offsets.API_KEY,
                                                          9)[1].topics)
    return int(answer.offset)


def produce(broker: EmbeddedBroker, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(first, first + count):
        producer.produce(TOPIC, value=str(i).encode(), timestamp=BASE_TIMESTAMP + i)
    assert producer.flush(10) == 0


def on_loop(broker: EmbeddedBroker, fn: Any) -> Any:
    async def run() -> Any:
        return fn()

    return broker.call(run())


def consume(consumer: Consumer, expected: int, timeout: float = 10) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(10, 0.2) if m.error() is None]
    return got


def test_a_plugin_holds_back_the_last_stable_offset(broker_factory: Any) -> None:
    broker: EmbeddedBroker = broker_factory(plugins=(*DEFAULT_PLUGINS, NAME))
    assert broker.broker is not None
    plugin: HoldStableOffset = broker.broker.plugins.pm.get_plugin(NAME)
    create_topic(broker.bootstrap, TOPIC)
    produce(broker, 0, 2)
    on_loop(broker, lambda: plugin.begin(TOPIC, 0))
    produce(broker, 2, 3)
    assert plugin.open == {(TOPIC, 0): 2}

    committed = fetch_from(broker, 0, READ_COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset) == (5, 2)
    assert values_in(committed.records) == [b"0", b"1"]
    uncommitted = fetch_from(broker, 0, READ_UNCOMMITTED)
    assert values_in(uncommitted.records) == [str(i).encode() for i in range(5)]
    assert list_offset(broker, list_offsets.LATEST, READ_COMMITTED) == 2
    assert list_offset(broker, list_offsets.LATEST, READ_UNCOMMITTED) == 5
    # A lookup by time answers nothing the reader may not fetch yet.
    assert list_offset(broker, BASE_TIMESTAMP + 3, READ_COMMITTED) == -1
    assert list_offset(broker, BASE_TIMESTAMP + 3, READ_UNCOMMITTED) == 3
    assert list_offset(broker, BASE_TIMESTAMP + 1, READ_COMMITTED) == 1

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        assert consume(consumer, 2) == [b"0", b"1"]
        assert consume(consumer, 1, timeout=1) == []
    finally:
        consumer.close()

    # A READ_COMMITTED long poll at the held offset is answered on the release, long
    # before its max wait (60 s) would end it.
    purgatory = broker.broker.fetch_purgatory
    while purgatory.num_delayed:  # the consumer's last long poll
        time.sleep(0.01)
    waited: list[Any] = []
    poll = threading.Thread(target=lambda: waited.append(
        fetch_from(broker, 2, READ_COMMITTED, max_wait_ms=60_000)))
    poll.start()
    while not purgatory.num_delayed:
        time.sleep(0.01)
    on_loop(broker, lambda: plugin.end(TOPIC, 0))
    poll.join(40)
    assert waited and values_in(waited[0].records) == [b"2", b"3", b"4"]
    assert waited[0].last_stable_offset == 5
    assert list_offset(broker, list_offsets.LATEST, READ_COMMITTED) == 5

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 2)])
        assert consume(consumer, 3) == [b"2", b"3", b"4"]
    finally:
        consumer.close()
