"""Client byte-rate quotas on a real broker, over the wire: a consumer's fetch is bounded
by what its quota allows in the windows, the fetch that goes over the quota is answered
at once with throttle_time_ms and no records, the connection then reads nothing for
that long (KIP-219), and the throttle shows in the per-entity Prometheus counters."""

from __future__ import annotations

import datetime
import time

from confluent_kafka import Producer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from prometheus_client import generate_latest

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import connect, decode_response, encode_request, recv_frame
from tests.reference.test_conformance_quotas import CLIENT, alter

TOPIC = "quota-fetched"
RATE = 10_000.0  # bytes/s: the answer may carry 10 windows of it, 100 kB
VALUE = b"f" * 2000


def _fetch(offset: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=8 << 20,
        isolation_level=0, topics=(FetchTopic(topic=TOPIC, partitions=(
            FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=8 << 20),
        )),))


def test_a_consumer_over_its_quota_is_throttled_and_muted(broker: EmbeddedBroker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.size": 8192,
                         "linger.ms": 0})
    for _ in range(200):  # 400 kB in batches of a few kB
        producer.produce(TOPIC, VALUE, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
    alter(broker.bootstrap, [([(CLIENT, "slow")], [("consumer_byte_rate", RATE)])])

    with connect(broker.bootstrap) as sock:
        sock.settimeout(30)
        sock.sendall(encode_request(_fetch(0), correlation_id=1, client_id="slow"))
        frame = recv_frame(sock)
        assert frame is not None
        first = decode_response(frame, 1, 4)[1]
        records = len(first.responses[0].partitions[0].records)
        # max_bytes cut to 10 windows of the quota (a larger first batch would come whole).
        assert 0 < records <= RATE * 10 + 8192, records

        sock.sendall(encode_request(_fetch(0), correlation_id=2, client_id="slow"))
        frame = recv_frame(sock)
        assert frame is not None
        second = decode_response(frame, 1, 4)[1]
        throttle_ms = second.throttle_time.total_seconds() * 1000
        assert throttle_ms > 500 and second.responses == (), second

        # Muted: the next request on this connection is read once the throttle is over.
        sent = time.monotonic()
        sock.sendall(encode_request(ApiVersionsRequest(
            client_software_name="t", client_software_version="1"), correlation_id=3,
            client_id="slow"))
        assert recv_frame(sock) is not None
        assert time.monotonic() - sent >= throttle_ms / 1000 * 0.9

    assert broker.broker is not None
    text = generate_latest(broker.broker.metrics.registry).decode()
    assert ('kafkernel_client_quota_throttled_total{client_id="slow",quota="fetch",user=""} '
            '1.0') in text, text
    assert 'kafkernel_client_quota_bytes_total{client_id="slow",quota="fetch",user=""}' in text
