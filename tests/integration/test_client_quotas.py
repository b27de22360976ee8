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
from kio.schema.metadata.v9.request import MetadataRequest
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


def test_a_request_quota_throttles_on_handler_time(broker: EmbeddedBroker) -> None:
    """request_percentage: the handlers' time on the event loop (Kafka: its request
    threads' time) over the quota throttles any API with a throttle_time_ms, at most
    one window (1 s)."""
    alter(broker.bootstrap, [([(CLIENT, "busy")], [("request_percentage", 0.01)])])
    # 0.01 % of 10 s is 1 ms of handler time: a few hundred Metadata requests pass it.
    request = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                              include_cluster_authorized_operations=False,
                              include_topic_authorized_operations=False)
    throttles = []
    with connect(broker.bootstrap) as sock:
        sock.settimeout(30)
        for correlation_id in range(2000):
            sock.sendall(encode_request(request, correlation_id=correlation_id,
                                        client_id="busy"))
            frame = recv_frame(sock)
            assert frame is not None
            throttle = decode_response(frame, 3, 9)[1].throttle_time.total_seconds()
            if throttle:
                throttles.append(throttle)
                break
    assert throttles and 0 < throttles[0] <= 1.0, throttles
    assert broker.broker is not None
    assert broker.broker.metrics.registry.get_sample_value(
        "kafkernel_client_quota_throttled_total",
        {"quota": "request", "user": "", "client_id": "busy"}) == 1.0


def test_awaiting_handlers_are_timed_and_answered(broker: EmbeddedBroker) -> None:
    """Under a request quota, handlers that wait (acks=all Produce, long-poll Fetch) are
    measured step by step and answer as before."""
    alter(broker.bootstrap, [([(CLIENT, None)], [("request_percentage", 1000.0)])])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "client.id": "timed"})
    for i in range(50):
        producer.produce("timed-topic", f"v{i}".encode())
    assert producer.flush(30) == 0
    assert broker.broker is not None
    assert broker.broker.metrics.registry.get_sample_value(
        "kafkernel_client_quota_throttled_total",
        {"quota": "request", "user": "", "client_id": "timed"}) is None
