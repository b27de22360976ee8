"""A produce byte-rate quota on Apache Kafka and on Kafkernel side by side: the same
client-id quota (producer_byte_rate = 1 MiB/s), the same confluent-kafka producer
sending as fast as it may on each (both at once, on two threads); the rates both
brokers let through are within 10% of each other and of the quota (issue 30's quota
comparison).

Kafka measures a rate over 11 one-second windows and never over less than 10 s, so a
client flat out sends about 10 s worth of its quota at once each time the windows have
moved past its last burst (every 11 s), and waits out its throttle in between. The rate
is taken over one such period, after the cold start: from 10 s to 21 s."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Producer

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.reference.test_conformance_quotas import CLIENT, alter, remove_every_quota

QUOTA = 1024 * 1024
WARM_S = 10.0
RUN_S = 21.0
VALUE = b"q" * 4096
CLIENT_ID = "quota-throttled"


def _produced_rate(bootstrap: str, topic: str) -> float:
    """Bytes per second the broker acknowledged from WARM_S to RUN_S of producing flat
    out."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": CLIENT_ID, "linger.ms": 5,
        # Small requests: each is a small step of the rate, so the quota is met finely.
        "batch.size": 65536, "acks": 1, "enable.idempotence": False,
        "queue.buffering.max.kbytes": 4096, "max.in.flight.requests.per.connection": 1,
    })
    delivered = 0
    started = time.monotonic()

    def on_delivery(err: object, msg: object) -> None:
        nonlocal delivered
        if err is None and WARM_S <= time.monotonic() - started <= RUN_S:
            delivered += len(VALUE)

    while time.monotonic() - started < RUN_S:
        try:
            producer.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    return delivered / (RUN_S - WARM_S)


def test_a_produce_quota_holds_on_both_brokers(reference_kafka: ReferenceKafka) -> None:
    with EmbeddedBroker() as kafkernel:
        brokers = {"kafkernel": kafkernel.bootstrap, "kafka": reference_kafka.bootstrap}
        for bootstrap in brokers.values():
            answer = alter(bootstrap, [([(CLIENT, CLIENT_ID)],
                                        [("producer_byte_rate", float(QUOTA))])])
            assert answer[0][1] == 0, answer
        try:
            with ThreadPoolExecutor(2) as pool:
                futures = {name: pool.submit(_produced_rate, b,
                                             f"throttled-{time.monotonic_ns()}")
                           for name, b in brokers.items()}
                rates = {name: f.result() for name, f in futures.items()}
        finally:
            remove_every_quota(reference_kafka.bootstrap)  # shared by later tests
    assert abs(rates["kafkernel"] - QUOTA) <= 0.1 * QUOTA, rates
    assert abs(rates["kafka"] - QUOTA) <= 0.1 * QUOTA, rates
    assert abs(rates["kafkernel"] - rates["kafka"]) <= 0.1 * rates["kafka"], rates
