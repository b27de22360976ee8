"""Clients that ask for records and never read the answers (issue 30, item 1).

A topic holds 30 MB. A thousand connections with a 4 KB receive buffer each send a
Fetch for 8 MB from offset 0 (some pipeline 50 of them) and read nothing. Before fetch
answers were sent from the segment files, each such connection held its 8 MB answer in
the broker: 40 of them took the broker past 300 MB, and 400 to 3.2 GB. Now a
connection holds its answer's headers; the broker stays under 300 MB, a well-behaved
consumer reads the whole topic meanwhile, and every descriptor of the answers comes
back when the attackers go.
"""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic

from tests.broker_process import BrokerProcess
from tests.integration.wire import encode_request

MIB = 1024 * 1024
TOPIC = "unread"
RECORDS = 30_000  # of 1 KB: 30 MB
RSS_BOUND = 300 * MIB
ATTACKERS = 1000
PIPELINING = 20  # of the attackers, these send 50 fetches each
PIPELINED = 50


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path) as b:
        producer = confluent_kafka.Producer({
            "bootstrap.servers": b.bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
        for i in range(RECORDS):
            producer.produce(TOPIC, b"%09d" % i + b"v" * 1015, partition=0)
            if i % 5000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        yield b


def _fetch(correlation_id: int) -> bytes:
    return encode_request(FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=8 * MIB,
        isolation_level=0,
        topics=(FetchTopic(topic=TOPIC, partitions=(
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=8 * MIB),)),),
    ), correlation_id=correlation_id)


def _attacker(bootstrap: str, fetches: int) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    sock.settimeout(10)
    sock.connect((host, int(port)))
    sock.sendall(b"".join(_fetch(c) for c in range(fetches)))
    return sock


def _consume_all(bootstrap: str) -> int:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
        "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        seen, deadline = 0, time.monotonic() + 120
        while seen < RECORDS:
            assert time.monotonic() < deadline, f"{seen} records in 120 s, then stuck"
            for m in consumer.consume(1000, 1.0):
                assert m.error() is None, m.error()
                assert m.value()[:9] == b"%09d" % m.offset()
                seen += 1
        return seen
    finally:
        consumer.close()


def test_answers_nobody_reads_cost_the_broker_no_records(broker: BrokerProcess) -> None:
    time.sleep(1.0)
    idle_rss, idle_files = broker.rss_bytes(), broker.open_files()
    attackers: list[socket.socket] = []
    peak = idle_rss
    try:
        for i in range(ATTACKERS):
            attackers.append(_attacker(broker.bootstrap, PIPELINED if i < PIPELINING else 1))
            if i % 20 == 19:
                peak = max(peak, broker.rss_bytes())
                # Checked as the attack grows: the old broker would reach gigabytes.
                assert peak < RSS_BOUND, (
                    f"{i + 1} unread fetches: broker RSS {peak / MIB:.0f} MB "
                    f"(idle {idle_rss / MIB:.0f} MB)")
        time.sleep(2.0)  # every fetch answered as far as its socket takes
        peak = max(peak, broker.rss_bytes())
        assert peak < RSS_BOUND, f"broker RSS {peak / MIB:.0f} MB under the attack"
        # Everyone else is still served while the attack holds.
        assert _consume_all(broker.bootstrap) == RECORDS
        assert broker.rss_bytes() < RSS_BOUND
    finally:
        for sock in attackers:
            sock.close()
    # The answers' slices let go of their segment files with their connections.
    deadline = time.monotonic() + 20
    while broker.open_files() > idle_files + 10:
        assert time.monotonic() < deadline, (
            f"{broker.open_files()} descriptors open after the attackers left "
            f"(idle {idle_files})")
        time.sleep(0.2)
    assert broker.answers()
    assert broker.problems() == []
