"""Issue 32's operations items on metadata_zk, with a real ZooKeeper: the controller's
preferred-leader rebalance (auto.leader.rebalance.enable, leader.imbalance.*), the
controller metrics, ``kafkernel cluster elect-leaders``, and a lost ZooKeeper
connection made visible (a gauge, counters)
without a CreateTopics answered with an error creating its topic later."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError as ClientKafkaError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.cluster import NewTopic as NewTopicSpec
from kernel.testing.embedded import EmbeddedBroker
from tests import zookeeper as zookeeper_launcher
from tests.integration.admin_cli import kafkernel
from tests.zk import wait_until as _wait
from tests.zk.conftest import ZK_PLUGINS

Factory = Callable[..., EmbeddedBroker]
REPLICATION = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100}
# Broker 1 prefers partition 0, 2 prefers 1, 3 prefers 2.
ASSIGNMENT = {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}


def _backend(b: EmbeddedBroker) -> Any:
    assert b.broker is not None
    return b.broker.metadata


def _metric(b: EmbeddedBroker, name: str) -> float | None:
    assert b.broker is not None
    value: float | None = b.broker.metrics.registry.get_sample_value(name)
    return value


def _cluster(factory: Factory, **settings: Any) -> list[EmbeddedBroker]:
    brokers = [factory({"broker.id": i, **REPLICATION, **settings}) for i in (1, 2, 3)]
    _wait(lambda: set(_backend(brokers[0]).image.brokers) == {1, 2, 3},
          "every broker to register")
    return brokers


def _leaders_after_restart_of_broker_1(brokers: list[EmbeddedBroker], topic: str) -> int:
    """Create the topic, restart broker 1 (its partition 0 moves to broker 2), wait for
    it to be back in partition 0's ISR; the leader of partition 0 then."""
    first = brokers[0]
    first.call(_backend(first).create_topics([NewTopicSpec(topic, 0, 0, {},
                                                           assignments=ASSIGNMENT)]))
    observer = brokers[2]

    def state() -> Any:
        return _backend(observer).image.partition(topic, 0)

    _wait(lambda: (s := state()) is not None and s.leader == 1 and len(s.isr) == 3,
          "partition 0 led by broker 1 with a full ISR")
    first.stop(remove_data=False)
    _wait(lambda: state().leader == 2, "broker 2 to take partition 0 over")
    first.start()
    _wait(lambda: 1 in state().isr, "broker 1 back in partition 0's ISR")
    return int(state().leader)


def test_a_restarted_broker_leads_its_preferred_partitions_again(
        zk_broker_factory: Factory) -> None:
    # Percentage 0: partition 0 alone is a small share of broker 1's preferred
    # partitions (__consumer_offsets has the most), which Kafka's default 10% lets be.
    brokers = _cluster(zk_broker_factory, **{"leader.imbalance.check.interval.seconds": 1,
                                             "leader.imbalance.per.broker.percentage": 0})
    _leaders_after_restart_of_broker_1(brokers, "balanced")
    observer = brokers[2]
    _wait(lambda: _backend(observer).image.partition("balanced", 0).leader == 1,
          "the controller to give partition 0 back to broker 1", timeout=20)
    # The controller metrics: one active controller in the cluster, every broker
    # connected, no imbalance left.
    assert sum(_metric(b, "kafkernel_active_controller_count") or 0 for b in brokers) == 1
    for b in brokers:
        assert _metric(b, "kafkernel_metadata_connected") == 1
        assert _metric(b, "kafkernel_fenced_brokers") == 0
    _wait(lambda: _metric(observer, "kafkernel_preferred_replica_imbalance") == 0,
          "the imbalance gauge to read 0")


def test_no_rebalance_without_auto_leader_rebalance(zk_broker_factory: Factory) -> None:
    brokers = _cluster(zk_broker_factory, **{"auto.leader.rebalance.enable": False,
                                             "leader.imbalance.check.interval.seconds": 1})
    assert _leaders_after_restart_of_broker_1(brokers, "kept") == 2
    observer = brokers[2]
    assert _metric(observer, "kafkernel_preferred_replica_imbalance") == 1
    # Three check intervals (the first check comes one interval after a controller's
    # election, the restart may have moved it): nothing moves back.
    time.sleep(3)
    assert _backend(observer).image.partition("kept", 0).leader == 2
    # The operator's way back: kafkernel cluster elect-leaders, as kafka-leader-election.
    argv = ["cluster", "elect-leaders", "--election-type", "preferred", "--topic", "kept",
            "--partition", "0"]
    ran = kafkernel(observer.bootstrap, *argv)
    assert (ran.code, ran.out) == (
        0, "Successfully completed leader election (PREFERRED) for partitions kept-0\n")
    assert _backend(observer).image.partition("kept", 0).leader == 1
    ran = kafkernel(observer.bootstrap, *argv)
    assert (ran.code, ran.out) == (0, "Valid replica already elected for partitions kept-0\n")


# -- a lost ZooKeeper connection ------------------------------------------------------

SESSION_MS = 4000  # kazoo notices a silent server after 2/3 of it


@pytest.fixture(scope="module")
def own_zookeeper() -> Iterator[zookeeper_launcher.ZooKeeper]:
    """A ZooKeeper of this module alone: the test freezes it."""
    try:
        zk = zookeeper_launcher.start()
    except zookeeper_launcher.ZooKeeperNotInstalled as e:
        pytest.fail(str(e), pytrace=False)
    yield zk
    zk.stop()


def _create_error(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=30,
                                 operation_timeout=30)[topic]
    try:
        future.result(40)
    except KafkaException as e:
        error: ClientKafkaError = e.args[0]
        return int(error.code())
    return 0


def test_a_frozen_zookeeper_is_visible_and_a_timed_out_create_stays_undone(
        broker_factory: Factory, own_zookeeper: zookeeper_launcher.ZooKeeper) -> None:
    b = broker_factory(plugins=ZK_PLUGINS, plugin_settings={"metadata_zk": {
        "zookeeper.connect": own_zookeeper.connect + "/frozen",
        "zookeeper.session.timeout.ms": SESSION_MS}})
    assert _metric(b, "kafkernel_metadata_connected") == 1
    pid = own_zookeeper.process.pid
    admin = AdminClient({"bootstrap.servers": b.bootstrap})

    # Frozen shorter than the session: a create sent before the broker notices is
    # answered REQUEST_TIMED_OUT once it does, and ZooKeeper runs it when it thaws.
    os.kill(pid, signal.SIGSTOP)
    try:
        sent = _create_error(b.bootstrap, "sent-while-frozen")
        assert _metric(b, "kafkernel_metadata_connected") == 0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert sent == ClientKafkaError.REQUEST_TIMED_OUT
    _wait(lambda: _metric(b, "kafkernel_metadata_connected") == 1,
          "the connection to come back", timeout=30)
    # The broker deletes the topic its failed create made after all.
    admin.create_topics([NewTopic("after-thaw", 1, 1)])["after-thaw"].result(30)
    _wait(lambda: "sent-while-frozen" not in admin.list_topics(timeout=10).topics,
          "no topic of the failed create")

    # Frozen longer than the session: a create asked while the connection is known lost
    # is answered at once and never sent; the broker registers again after.
    os.kill(pid, signal.SIGSTOP)
    try:
        _wait(lambda: _metric(b, "kafkernel_metadata_connected") == 0,
              "the gauge to show the lost connection", timeout=SESSION_MS / 1000 + 5)
        started = time.monotonic()
        lost = _create_error(b.bootstrap, "asked-while-lost")
        answered_in = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    assert lost == ClientKafkaError.REQUEST_TIMED_OUT
    assert answered_in < 15
    assert _metric(b, "kafkernel_metadata_disconnects_total") == 2
    _wait(lambda: _metric(b, "kafkernel_metadata_connected") == 1,
          "the connection to come back", timeout=30)
    _wait(lambda: _metric(b, "kafkernel_metadata_session_expirations_total") == 1,
          "the expired session counted")
    _wait(lambda: 1 in _backend(b).image.brokers, "the broker registered again")
    admin.create_topics([NewTopic("after-expiry", 1, 1)])["after-expiry"].result(30)
    assert "asked-while-lost" not in admin.list_topics(timeout=10).topics
