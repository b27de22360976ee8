"""The log's open transactions hold back a partition's last stable offset: over raw
Produce frames (transactional batches) and markers written in-process the way the
transaction coordinator writes them (``append_records`` with origin COORDINATOR),
READ_COMMITTED fetches and ListOffsets stop at it and list the aborted transactions,
READ_UNCOMMITTED ones read to the high watermark, a waiting READ_COMMITTED fetch is
answered when a marker releases it, and confluent-kafka consumers (read_committed is
librdkafka's default) never see aborted records nor, read_uncommitted, control
records. The producers here have no transaction coordinator behind them, so the broker
does not verify their batches with it (transaction.partition.verification.enable off;
test_txn_verification.py covers the verification)."""

from __future__ import annotations

import datetime
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from kernel.handlers import fetch, list_offsets, produce
from kernel.log import AppendOrigin
from kernel.protocol.build import request_module
from kernel.protocol.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    build_control_batch,
)
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_log_apis_wire import build, topic_id, topic_ref, values_in
from tests.integration.test_observability_and_embedding import sample, scrape
from tests.integration.test_produce_fetch import create_topic
from tests.integration.wire import (
    connect,
    decode_response,
    encode_request,
    recv_frame,
    request,
)

TOPIC = "held"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
FETCH_VERSION = 12  # the last by topic name
BASE_TIMESTAMP = 1_700_000_000_000
ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT
UNVERIFIED = {"transaction.partition.verification.enable": False}


@pytest.fixture
def broker(broker_factory: Any) -> EmbeddedBroker:
    return broker_factory(UNVERIFIED)  # type: ignore[no-any-return]


def fetch_from(broker: EmbeddedBroker, offset: int, isolation_level: int,
               max_wait_ms: int = 0, min_bytes: int = 1) -> Any:
    m = request_module(fetch.API_KEY, FETCH_VERSION)
    body = build(m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(
        milliseconds=max_wait_ms), min_bytes=min_bytes, max_bytes=1 << 20,
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


def produce_batch(broker: EmbeddedBroker, first: int, count: int, producer_id: int = -1,
                  sequence: int = -1, transactional: bool = False,
                  transactional_id: str | None = "tx",
                  expect: ErrorCode = ErrorCode.none) -> int:
    """Produce records ``first..first+count-1`` (values and timestamps from the number)
    in one batch over a raw Produce frame; returns its base offset."""
    m = request_module(produce.API_KEY, 9)
    records = build_batch(
        [SimpleRecord(key=b"k", value=str(i).encode(), timestamp=BASE_TIMESTAMP + i)
         for i in range(first, first + count)],
        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence, is_transactional=transactional)
    body = build(m.ProduceRequest, acks=-1, timeout=datetime.timedelta(seconds=10),
                 transactional_id=transactional_id if transactional else None, topic_data=(
                     topic_ref(m.TopicProduceData, TOPIC, topic_id(broker, TOPIC),
                               partition_data=(build(m.PartitionProduceData, index=0,
                                                     records=records),)),))
    (topic,) = request(broker.bootstrap, body).responses
    (answer,) = topic.partition_responses
    assert answer.error_code == expect
    return int(answer.base_offset)


def write_marker(broker: EmbeddedBroker, producer_id: int, kind: ControlRecordType) -> int:
    """A marker as the transaction coordinator writes it: on the broker's loop, through
    the replica manager with origin COORDINATOR."""
    assert broker.broker is not None
    replicas = broker.broker.replicas

    def append() -> int:
        partition = replicas.get_partition(TOPIC, 0)
        # the records' time: a later one would roll the segment (segment.ms)
        marker = build_control_batch(kind, producer_id=producer_id, producer_epoch=0,
                                     coordinator_epoch=0, timestamp=BASE_TIMESTAMP + 100)
        info = replicas.append_records(partition, marker, -1, int(time.time() * 1000),
                                       origin=AppendOrigin.COORDINATOR)
        return int(info.first_offset)

    return int(on_loop(broker, append))


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


def consumer_of(broker: EmbeddedBroker, isolation: str, offset: int = 0) -> Consumer:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, offset)])
    return consumer


def test_an_open_transaction_holds_back_the_last_stable_offset(broker: EmbeddedBroker) -> None:
    assert broker.broker is not None
    create_topic(broker.bootstrap, TOPIC)
    produce_batch(broker, 0, 2)                                       # 0-1
    assert produce_batch(broker, 2, 3, producer_id=7, sequence=0, transactional=True) == 2

    committed = fetch_from(broker, 0, READ_COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset) == (5, 2)
    assert values_in(committed.records) == [b"0", b"1"]
    assert list(committed.aborted_transactions) == []
    uncommitted = fetch_from(broker, 0, READ_UNCOMMITTED)
    assert values_in(uncommitted.records) == [str(i).encode() for i in range(5)]
    assert uncommitted.aborted_transactions is None
    assert list_offset(broker, list_offsets.LATEST, READ_COMMITTED) == 2
    assert list_offset(broker, list_offsets.LATEST, READ_UNCOMMITTED) == 5
    # A lookup by time answers nothing the reader may not fetch yet.
    assert list_offset(broker, BASE_TIMESTAMP + 3, READ_COMMITTED) == -1
    assert list_offset(broker, BASE_TIMESTAMP + 3, READ_UNCOMMITTED) == 3
    assert list_offset(broker, BASE_TIMESTAMP + 1, READ_COMMITTED) == 1
    # The record with the max timestamp (offset 4) is not readable committed yet, while
    # the earliest offset is answered whatever the isolation, as Kafka does.
    assert list_offset(broker, list_offsets.MAX_TIMESTAMP, READ_COMMITTED) == -1
    assert list_offset(broker, list_offsets.MAX_TIMESTAMP, READ_UNCOMMITTED) == 4
    assert list_offset(broker, list_offsets.EARLIEST, READ_COMMITTED) == 0

    consumer = consumer_of(broker, "read_committed")
    try:
        assert consume(consumer, 2) == [b"0", b"1"]
        assert consume(consumer, 1, timeout=1) == []
    finally:
        consumer.close()

    # A READ_COMMITTED long poll at the held offset is answered when the commit marker
    # releases it, long before its max wait (60 s) would end it.
    purgatory = broker.broker.fetch_purgatory
    while purgatory.num_delayed:  # the consumer's last long poll
        time.sleep(0.01)
    waited: list[Any] = []
    poll = threading.Thread(target=lambda: waited.append(
        fetch_from(broker, 2, READ_COMMITTED, max_wait_ms=60_000)))
    poll.start()
    while not purgatory.num_delayed:
        time.sleep(0.01)
    assert write_marker(broker, 7, COMMIT) == 5
    poll.join(40)
    assert waited and values_in(waited[0].records)[:3] == [b"2", b"3", b"4"]
    assert waited[0].last_stable_offset == 6
    assert list_offset(broker, list_offsets.LATEST, READ_COMMITTED) == 6

    consumer = consumer_of(broker, "read_committed", 2)
    try:
        assert consume(consumer, 3) == [b"2", b"3", b"4"]
    finally:
        consumer.close()


def test_read_committed_consumers_never_see_aborted_records(broker: EmbeddedBroker) -> None:
    create_topic(broker.bootstrap, TOPIC)
    produce_batch(broker, 0, 1)                                                   # 0
    produce_batch(broker, 1, 2, producer_id=7, sequence=0, transactional=True)    # 1-2
    produce_batch(broker, 3, 1, producer_id=8, sequence=0, transactional=True)    # 3
    produce_batch(broker, 4, 1, producer_id=7, sequence=2, transactional=True)    # 4
    assert write_marker(broker, 7, ABORT) == 5
    assert write_marker(broker, 8, COMMIT) == 6
    produce_batch(broker, 7, 1)                                                   # 7

    answer = fetch_from(broker, 0, READ_COMMITTED)
    assert answer.last_stable_offset == answer.high_watermark == 8
    assert [(t.producer_id, t.first_offset) for t in answer.aborted_transactions] == [(7, 1)]
    # Only the aborts overlapping what is returned: none from offset 6 on.
    assert list(fetch_from(broker, 6, READ_COMMITTED).aborted_transactions) == []

    committed = consumer_of(broker, "read_committed")
    uncommitted = consumer_of(broker, "read_uncommitted")
    try:
        assert consume(committed, 3) == [b"0", b"3", b"7"]
        assert consume(committed, 1, timeout=1) == []
        # Every data record, and no control record.
        assert consume(uncommitted, 6) == [str(i).encode() for i in (0, 1, 2, 3, 4, 7)]
        assert consume(uncommitted, 1, timeout=1) == []
    finally:
        committed.close()
        uncommitted.close()


def test_a_waiting_read_committed_fetch_counts_the_bytes_a_marker_releases(
        broker: EmbeddedBroker) -> None:
    assert broker.broker is not None
    create_topic(broker.bootstrap, TOPIC)
    produce_batch(broker, 0, 3, producer_id=7, sequence=0, transactional=True)   # 0-2
    purgatory = broker.broker.fetch_purgatory
    waited: list[Any] = []
    # min_bytes far above what the transaction holds: the release wakes the fetch, but
    # as Kafka's DelayedFetch it measures the bytes now readable and waits on.
    poll = threading.Thread(target=lambda: waited.append(
        fetch_from(broker, 0, READ_COMMITTED, max_wait_ms=2_000, min_bytes=1 << 20)))
    poll.start()
    while not purgatory.num_delayed:
        time.sleep(0.01)
    assert write_marker(broker, 7, COMMIT) == 3
    assert purgatory.num_delayed == 1 and not waited
    poll.join(40)
    assert waited and values_in(waited[0].records)[:3] == [b"0", b"1", b"2"]  # and the marker
    assert waited[0].last_stable_offset == 4


def test_transactional_records_need_a_transactional_id(broker: EmbeddedBroker) -> None:
    create_topic(broker.bootstrap, TOPIC)
    produce_batch(broker, 0, 1, producer_id=7, sequence=0, transactional=True,
                  transactional_id=None,
                  expect=ErrorCode.transactional_id_authorization_failed)
    assert fetch_from(broker, 0, READ_UNCOMMITTED).high_watermark == 0


def test_a_restart_keeps_open_transactions_and_aborted_ones(broker_factory: Any,
                                                            tmp_path: Path) -> None:
    broker = broker_factory(UNVERIFIED, data_dir=tmp_path)
    create_topic(broker.bootstrap, TOPIC)
    produce_batch(broker, 0, 2, producer_id=8, sequence=0, transactional=True)   # 0-1
    assert write_marker(broker, 8, ABORT) == 2
    produce_batch(broker, 3, 2, producer_id=7, sequence=0, transactional=True)   # 3-4, open
    broker.stop()
    again = broker_factory(UNVERIFIED, data_dir=tmp_path)
    deadline = time.monotonic() + 20
    answer = fetch_from(again, 0, READ_COMMITTED)
    while answer.error_code != ErrorCode.none and time.monotonic() < deadline:
        time.sleep(0.1)  # the restarted broker leads its partitions again
        answer = fetch_from(again, 0, READ_COMMITTED)
    assert (answer.high_watermark, answer.last_stable_offset) == (5, 3)
    assert [(t.producer_id, t.first_offset) for t in answer.aborted_transactions] == [(8, 0)]
    committed = consumer_of(again, "read_committed")
    try:
        assert consume(committed, 1, timeout=2) == []
        write_marker(again, 7, COMMIT)
        assert consume(committed, 2) == [b"3", b"4"]
    finally:
        committed.close()


def test_the_last_stable_offset_lag_is_a_partition_metric(broker_factory: Any) -> None:
    """Kafka's LastStableOffsetLag, read at scrape time: what an open transaction holds
    back from READ_COMMITTED readers, back to 0 once its marker is replicated."""
    b = broker_factory({"metrics.port": 0, **UNVERIFIED})
    assert b.broker is not None and b.broker.metrics_port
    create_topic(b.bootstrap, TOPIC)
    partition = {"topic": TOPIC, "partition": "0"}
    produce_batch(b, 0, 2)
    assert produce_batch(b, 2, 3, producer_id=7, sequence=0, transactional=True) == 2
    samples = scrape(b.broker.metrics_port)
    assert sample(samples, "kafkernel_high_watermark", **partition) == 5
    assert sample(samples, "kafkernel_last_stable_offset_lag", **partition) == 3
    write_marker(b, 7, COMMIT)
    assert sample(scrape(b.broker.metrics_port), "kafkernel_last_stable_offset_lag",
                  **partition) == 0
