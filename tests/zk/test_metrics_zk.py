"""The broker's replication and consumer-lag gauges in a cluster of three brokers on
metadata_zk: a group's coordinator reports the lag of partitions it only follows, the
leaders count the partitions a stopped broker left under-replicated, and every broker
counts a partition whose only replica stopped as offline."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kernel.testing.embedded import EmbeddedBroker
from tests.zk import wait_until

Factory = Callable[..., EmbeddedBroker]
FAST = {"replica.lag.time.max.ms": 2000, "replica.fetch.wait.max.ms": 100,
        "replica.fetch.backoff.ms": 100}


def _samples(b: EmbeddedBroker, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of one metric on a broker, by labels."""
    assert b.broker is not None
    text = generate_latest(b.broker.metrics.registry).decode()
    return {frozenset(s.labels.items()): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


def _gauge(b: EmbeddedBroker, name: str) -> float:
    return _samples(b, name).get(frozenset(), 0.0)


def _id(b: EmbeddedBroker) -> int:
    assert b.broker is not None
    return b.broker.config.broker_id


def test_lag_of_followed_partitions_under_replicated_and_offline_partitions(
        zk_broker_factory: Factory) -> None:
    brokers = [zk_broker_factory({"broker.id": i, **FAST},
                                 zk={"zookeeper.session.timeout.ms": 6000})
               for i in (1, 2, 3)]
    bootstrap = ",".join(b.bootstrap for b in brokers)
    topic, group = "spread", f"lagging-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 3, 3, config={
            "min.insync.replicas": "2"})]).values():
        future.result(30)
    wait_until(lambda: all(b.broker is not None and b.broker.replicas.get_partition(topic, p)
                           for b in brokers for p in range(3)), "every replica hosted")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce(topic, b"x", partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, p, p) for p in range(3)],
                    asynchronous=False)
    consumer.close()

    # One broker coordinates the group; it leads one partition of the topic and follows
    # the others, and reports the lag of all three (its followers' high watermarks
    # reach 10 one fetch after the leaders').
    coordinator = next(b for b in brokers if _samples(b, "kafkernel_group_consumer_lag_sum"))
    lag = {p: frozenset({"group": group, "topic": topic, "partition": str(p)}.items())
           for p in range(3)}
    expected = {lag[p]: 10.0 - p for p in range(3)}
    wait_until(lambda: _samples(coordinator, "kafkernel_group_consumer_lag") == expected,
               "the lag of every partition on the coordinator")
    assert _samples(coordinator, "kafkernel_group_consumer_lag_sum") == {
        frozenset({"group": group}.items()): 27.0}
    assert coordinator.broker is not None
    replicas = [coordinator.broker.replicas.get_partition(topic, p) for p in range(3)]
    assert any(r is not None and not r.is_leader for r in replicas)
    assert all(_gauge(b, "kafkernel_under_replicated_partitions") == 0 for b in brokers)

    # A topic whose only replica is on the broker about to stop (not the coordinator).
    stopped = next(b for b in brokers if b is not coordinator)
    admin.create_topics([NewTopic("alone", 1,
                                 replica_assignment=[[_id(stopped)]])])[
        "alone"].result(30)
    wait_until(lambda: all(_samples(b, "kafkernel_offline_partitions")
                           == {frozenset(): 0.0} for b in brokers), "no offline partition")
    stopped.stop(remove_data=False)
    live = [b for b in brokers if b is not stopped]
    # Each of the topic's partitions had a replica there: its leader (the old one, or
    # the one elected in its place) counts it under-replicated; none is under its min
    # ISR, two replicas being left.
    wait_until(lambda: sum(_gauge(b, "kafkernel_under_replicated_partitions")
                           for b in live) == 3, "three under-replicated partitions")
    assert all(_gauge(b, "kafkernel_under_min_isr_partitions") == 0 for b in live)
    wait_until(lambda: all(_gauge(b, "kafkernel_offline_partitions") == 1 for b in live),
               "the partition of the stopped broker offline")

    stopped.start()
    wait_until(lambda: sum(_gauge(b, "kafkernel_under_replicated_partitions")
                           for b in brokers) == 0, "the stopped broker back in every ISR")
    wait_until(lambda: all(_gauge(b, "kafkernel_offline_partitions") == 0 for b in brokers),
               "its partition back online")
