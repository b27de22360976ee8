"""KIP-612's per-IP connection_creation_rate on Apache Kafka and on Kafkernel side by
side: the same ip quota (2 connections a second for 127.0.0.2), the same 30 connections
opened one after another from 127.0.0.2; both brokers answer about 10 s worth of the
quota at once (Kafka's rate is never measured over less than 10 s) and close the rest
unanswered after their throttle time."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.integration.test_ip_connection_rate import ATTEMPTS, RATE, _burst, _set_rates

SOURCE = "127.0.0.2"


def test_an_ip_quota_throttles_alike_on_both_brokers(reference_kafka: ReferenceKafka) -> None:
    with EmbeddedBroker() as kafkernel:
        brokers = {"kafkernel": kafkernel.bootstrap, "kafka": reference_kafka.bootstrap}
        for bootstrap in brokers.values():
            _set_rates(bootstrap, {SOURCE: float(RATE)})
        try:
            with ThreadPoolExecutor(2) as pool:
                futures = {name: pool.submit(_burst, b, SOURCE) for name, b in brokers.items()}
                bursts = {name: f.result() for name, f in futures.items()}
        finally:
            # The reference Kafka is shared by later tests.
            _set_rates(reference_kafka.bootstrap, {SOURCE: None})
    answered = {name: count for name, (count, _) in bursts.items()}
    for count, seconds in bursts.values():
        assert RATE * 10 - 1 <= count < ATTEMPTS, bursts
        assert count <= RATE * max(seconds, 10.0) + 1, bursts
    assert abs(answered["kafkernel"] - answered["kafka"]) <= 2, bursts
