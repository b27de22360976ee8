"""Issue 16's replication over ZooKeeper, with real clients against three ``kafkernel
serve`` processes: an acks=all idempotent producer writes while the leader is killed
(kill -9) and restarted, or paused past its ZooKeeper session and resumed, or while
ZooKeeper itself restarts; afterwards every acknowledged record is read exactly once.
Consumer groups go on from their committed offsets after the coordinator's broker
dies. Each test starts its own brokers (tests/cluster/harness.py)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.cluster import harness
from tests.cluster.load import LoadProducer, read_all, verify

pytestmark = pytest.mark.slow

BROKERS = [1, 2, 3]
SESSION_S = harness.SESSION_TIMEOUT_MS / 1000
RATE = 200.0  # records/s: enough to be writing at any moment of a failover
ACKED_FIRST = 100
ACKS_WITHIN_S = 20.0
# From the kill: the session timeout, perhaps a new controller, then the election.
NEW_LEADER_WITHIN_S = 30.0
# From the restart: the follower catches up and the leader adds it back to the ISR.
REJOIN_WITHIN_S = 60.0
TOPIC_CONFIG = {"min.insync.replicas": "2"}


def _replicated_topic(cluster: harness.Cluster, name: str, partitions: int = 1) -> None:
    cluster.create_topic(name, partitions, 3, TOPIC_CONFIG)
    for p in range(partitions):
        cluster.wait_isr(name, p, BROKERS)


def _require_acks(producer: LoadProducer, count: int, when: str,
                  timeout: float = ACKS_WITHIN_S) -> None:
    """``count`` more acknowledgements, else a failure that says what the leader did not
    do: an acks=all write is acknowledged once the ISR's followers have fetched it."""
    before = producer.acks.count()
    if producer.wait_acked(before + count, timeout):
        return
    with producer.acks.lock:
        failed = dict(producer.acks.failed)
    raise AssertionError(
        f"{when}: {producer.acks.count() - before} of {count} acks=all records acknowledged "
        f"within {timeout:.0f} s ({producer.sent} sent, {producer.acks.count()} acknowledged "
        f"in all, delivery failures {failed or 'none'}): the leader's high watermark "
        "moves only when the ISR's followers have fetched the records")


def _stop(producer: LoadProducer, failing: bool) -> None:
    """A failing test does not wait a minute for records that will never be
    acknowledged."""
    try:
        producer.stop(flush_timeout=2.0 if failing else 60.0)
    except Exception:
        if not failing:
            raise


def _check_everything_read_once(cluster: harness.Cluster, producer: LoadProducer,
                                topic: str, partitions: int = 1) -> None:
    verdict = verify(producer.acks, read_all(cluster.bootstrap, topic, partitions))
    assert verdict.ok, str(verdict)
    assert producer.unflushed == 0, f"{producer.unflushed} records never acknowledged"


def test_leader_killed_and_restarted(cluster: harness.Cluster) -> None:
    topic = "killed-leader"
    _replicated_topic(cluster, topic)
    producer = LoadProducer(cluster.bootstrap, topic, rate=RATE).start()
    failing = True
    try:
        _require_acks(producer, ACKED_FIRST, "before the kill")
        leader = cluster.leader(topic, 0)
        killed_at = time.monotonic()
        cluster.broker(leader).kill()
        new, seconds = cluster.wait_new_leader(topic, 0, leader, timeout=NEW_LEADER_WITHIN_S)
        assert new in BROKERS and new != leader
        _require_acks(producer, ACKED_FIRST, f"after broker {leader} (the leader) was killed")
        resumed = producer.acks.first_after(killed_at)
        assert resumed is not None and resumed - killed_at < NEW_LEADER_WITHIN_S + 15, (
            f"acks=all writes resumed {resumed and resumed - killed_at:.1f} s after the kill "
            f"(new leader in the znode after {seconds:.1f} s)")

        cluster.restart(leader)
        state = cluster.wait_isr(topic, 0, BROKERS, timeout=REJOIN_WITHIN_S)
        assert state.leader != leader or state.leader_epoch >= 2
        _require_acks(producer, ACKED_FIRST, f"after broker {leader} rejoined the ISR")
        failing = False
    finally:
        _stop(producer, failing)
    _check_everything_read_once(cluster, producer, topic)


def test_leader_paused_past_its_session_loses_no_acknowledged_write(
        cluster: harness.Cluster) -> None:
    """SIGSTOP keeps the old leader's sockets and state; once its session has expired
    another broker leads. Resumed, it must not acknowledge a write the new leader does
    not have (it can no longer grow its high watermark or shrink the ISR in ZooKeeper),
    and it becomes a follower that truncates to the new leader's log."""
    topic = "paused-leader"
    _replicated_topic(cluster, topic)
    producer = LoadProducer(cluster.bootstrap, topic, rate=RATE).start()
    failing = True
    try:
        _require_acks(producer, ACKED_FIRST, "before the pause")
        leader = cluster.leader(topic, 0)
        cluster.broker(leader).pause()
        try:
            cluster.wait_unregistered(leader, SESSION_S * 3 + 10)
            new, _ = cluster.wait_new_leader(topic, 0, leader, timeout=NEW_LEADER_WITHIN_S)
            assert new != leader
            _require_acks(producer, ACKED_FIRST, f"with broker {leader} (the leader) paused")
        finally:
            cluster.broker(leader).resume()
        cluster.wait_registered([leader], timeout=60)
        cluster.wait_isr(topic, 0, BROKERS, timeout=REJOIN_WITHIN_S)
        assert cluster.leader(topic, 0) != leader or cluster.partition_state(
            topic, 0).leader_epoch >= 2  # type: ignore[union-attr]
        _require_acks(producer, ACKED_FIRST, f"after broker {leader} resumed")
        failing = False
    finally:
        _stop(producer, failing)
    _check_everything_read_once(cluster, producer, topic)


def test_zookeeper_restarted_under_load(cluster_own_zookeeper: harness.Cluster) -> None:
    """Brokers serve clients while ZooKeeper is away (as Kafka's do) and keep their
    registrations, leaders and ISRs once it is back within the session timeout; the
    controller goes on working (a new topic gets leaders)."""
    cluster = cluster_own_zookeeper
    topic = "zk-restart"
    _replicated_topic(cluster, topic)
    producer = LoadProducer(cluster.bootstrap, topic, rate=RATE).start()
    failing = True
    try:
        _require_acks(producer, ACKED_FIRST, "before ZooKeeper's restart")
        before = cluster.partition_state(topic, 0)
        cluster.zookeeper.kill()
        down_at = time.monotonic()
        acked_at_kill = producer.acks.count()
        time.sleep(3.0)
        acked_while_down = producer.acks.count() - acked_at_kill
        cluster.zookeeper.restart()
        assert acked_while_down > 0, "no acks=all write acknowledged while ZooKeeper was down"
        cluster.wait_registered(BROKERS, timeout=SESSION_S * 3 + 10)
        _require_acks(producer, ACKED_FIRST, "after ZooKeeper's restart")
        after = cluster.wait_isr(topic, 0, BROKERS, timeout=REJOIN_WITHIN_S)
        assert before is not None and after.leader == before.leader, (before, after)
        assert time.monotonic() - down_at < 120
        cluster.create_topic("after-zk-restart", 3, 3, TOPIC_CONFIG)
        failing = False
    finally:
        _stop(producer, failing)
    _check_everything_read_once(cluster, producer, topic)


def _coordinator(cluster: harness.Cluster, group: str, timeout: float = 30.0) -> int:
    def ask() -> int | None:
        futures = cluster.admin().describe_consumer_groups([group], request_timeout=5)
        try:
            return int(futures[group].result(timeout=10).coordinator.id)
        except KafkaException:
            return None

    return harness.wait_until(ask, f"the coordinator of group {group}", timeout)


def _poll_until(consumer: Consumer, last_offset: int, timeout: float) -> list[int]:
    """Offsets read until ``last_offset`` is among them."""
    offsets: list[int] = []
    deadline = time.monotonic() + timeout
    while not offsets or offsets[-1] < last_offset:
        if time.monotonic() > deadline:
            raise AssertionError(f"read offsets up to {offsets[-1:]} of {last_offset} "
                                 f"within {timeout:.0f} s")
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            offsets.append(msg.offset())
    return offsets


def _commit(consumer: Consumer, tp: TopicPartition, timeout: float) -> None:
    """A synchronous commit, retried while the group's coordinator moves."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(offsets=[tp], asynchronous=False)
            return
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"committing {tp} failed for {timeout:.0f} s: {e}") \
                    from None
            consumer.poll(0.5)  # a rejoin completes only in the application's poll


def test_group_continues_from_committed_offsets_after_its_coordinator_dies(
        cluster: harness.Cluster) -> None:
    topic, group = "group-events", f"survivors-{uuid.uuid4().hex[:6]}"
    _replicated_topic(cluster, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    for i in range(300):
        producer.produce(topic, f"e-{i}".encode(), partition=0)
    undelivered = producer.flush(ACKS_WITHIN_S)
    producer.purge()
    del producer  # not kept reconnecting by a failure's traceback
    assert undelivered == 0, (f"{undelivered} of 300 acks=all records not acknowledged "
                              f"within {ACKS_WITHIN_S:.0f} s: the leader's high watermark "
                              "moves only when the ISR's followers have fetched them")

    # The member's session outlasts the failover (the dead broker's ZooKeeper session,
    # then the election): librdkafka also times a session out on its own side when the
    # coordinator does not answer for that long, and rejoins under a new member id.
    settings = {"bootstrap.servers": cluster.bootstrap, "group.id": group,
                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "session.timeout.ms": 30000, "heartbeat.interval.ms": 500}
    first = Consumer(settings)
    try:
        first.subscribe([topic])
        assert _poll_until(first, 99, 30)[0] == 0
        _commit(first, TopicPartition(topic, 0, 100), 30)
        coordinator = _coordinator(cluster, group)
        for p in cluster.replicas(harness.OFFSETS_TOPIC):
            cluster.wait_isr(harness.OFFSETS_TOPIC, p, BROKERS)

        cluster.broker(coordinator).kill()
        # The member goes on reading and commits on the new coordinator.
        _poll_until(first, 199, 60)
        _commit(first, TopicPartition(topic, 0, 200), 60)
        moved = _coordinator(cluster, group)
        assert moved != coordinator
    finally:
        first.close()

    second = Consumer(settings)
    try:
        committed = second.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed[0].offset == 200
        second.subscribe([topic])
        offsets = _poll_until(second, 299, 60)
        assert offsets[0] == 200, f"the group resumed at {offsets[0]}, not its commit (200)"
        assert offsets == list(range(200, 300))
    finally:
        second.close()
