"""Issue 16's replication over ZooKeeper, with real clients against three ``kafkernel
serve`` processes: an acks=all idempotent producer writes while the leader is killed
(kill -9) and restarted, or paused past its ZooKeeper session and resumed, or while
ZooKeeper itself restarts; afterwards every acknowledged record is read exactly once.
Consumer groups go on from their committed offsets after the coordinator's broker
dies, and a transactional producer commits across the death of its transaction
coordinator's broker. Each test starts its own brokers (tests/cluster/harness.py)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

from tests.cluster import harness
from tests.cluster.load import PRODUCER_SETTINGS, LoadProducer, read_all, verify
from tests.integration.wire import request

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


# -- transactions across the death of the transaction coordinator's broker -------------

TXN_RECORDS = 60
# One partition led by each broker: a transaction's markers go to partitions the
# coordinator leads and to partitions other brokers lead, before and after the failover.
TXN_PARTITIONS = 3
# From the kill: the ZooKeeper session, an election of __transaction_state's partition,
# the new leader loading it, and librdkafka finding the new coordinator.
TXN_FAILOVER_S = 90.0


def _txn_coordinator(cluster: harness.Cluster, transactional_id: str,
                     timeout: float = 30.0) -> int:
    """FindCoordinator key type 1 (confluent-kafka's AdminClient has no
    describe_transactions), asked of each live broker until one answers."""
    def ask() -> int | None:
        for b in cluster.brokers.values():
            if not b.alive:
                continue
            try:
                answer = request(b.bootstrap, FindCoordinatorRequest(
                    key_type=1, coordinator_keys=(transactional_id,)))
            except OSError:
                continue
            (found,) = answer.coordinators
            if found.error_code == ErrorCode.none:
                return int(found.node_id)
        return None

    return harness.wait_until(ask, f"the transaction coordinator of {transactional_id}",
                              timeout, interval=0.5)


def _retrying(what: str, call: Callable[[float], None], deadline: float) -> None:
    """``call(timeout)`` again on a retriable error, as confluent-kafka documents for
    commit_transaction and abort_transaction; an abortable or fatal error is raised."""
    seen: list[str] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"{what} did not succeed in time; retriable errors: "
                                 f"{seen[-3:]}")
        try:
            call(remaining)
            return
        except KafkaException as e:
            error: KafkaError = e.args[0]
            if not error.retriable() or error.fatal() or error.txn_requires_abort():
                raise
            seen.append(f"{error.name()}: {error.str()}")


def _transaction(producer: Producer, topic: str, values: Callable[[int], list[bytes]],
                 timeout: float, aborted: list[bytes]) -> list[bytes]:
    """Begin, produce ``values(attempt)``, commit; an abortable error aborts the attempt
    (its values go to ``aborted``) and redoes it with the next attempt's values, so a
    read_committed consumer can tell them apart. Returns the committed values."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        batch = values(attempt)
        try:
            producer.begin_transaction()
            for i, v in enumerate(batch):
                producer.produce(topic, v, partition=i % TXN_PARTITIONS)
            _retrying("commit_transaction", producer.commit_transaction, deadline)
            return batch
        except KafkaException as e:
            error: KafkaError = e.args[0]
            if error.fatal() or not error.txn_requires_abort():
                raise
            aborted += batch
            _retrying("abort_transaction", producer.abort_transaction, deadline)
            attempt += 1


def _read_committed(bootstrap: str, topic: str, timeout: float = 60.0) -> list[bytes]:
    """The topic's records as read_committed reads them, up to each partition's high
    watermark: a partition's end is reached once its last stable offset is there, every
    transaction ended and its marker written."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-verify",
                         "isolation.level": "read_committed",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 100})
    deadline = time.monotonic() + timeout
    values: list[bytes] = []
    ended: set[int] = set()
    stable_at: dict[int, int] = {}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                         for p in range(TXN_PARTITIONS)])
        while len(ended) < TXN_PARTITIONS:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"read_committed did not reach the high watermark of {topic}'s "
                    f"partitions {sorted(set(range(TXN_PARTITIONS)) - ended)} within "
                    f"{timeout:.0f} s (last stable offsets {stable_at}, {len(values)} "
                    "records read): a transaction's marker is missing there")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is None:
                values.append(msg.value() or b"")
            elif error.code() == KafkaError._PARTITION_EOF:
                p = msg.partition()
                stable_at[p] = msg.offset()
                high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                if msg.offset() >= high:
                    ended.add(p)
            elif not error.retriable():
                raise KafkaException(error)
    finally:
        consumer.close()
    return values


def test_transaction_commits_after_its_coordinator_dies(cluster: harness.Cluster) -> None:
    topic, txn_id = "txn-events", "txn-survivor"
    _replicated_topic(cluster, topic, TXN_PARTITIONS)
    settings = {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                "linger.ms": 5, "transaction.timeout.ms": 120_000,
                **{k: v for k, v in PRODUCER_SETTINGS.items()
                   if k not in ("acks", "enable.idempotence")}}
    aborted: list[bytes] = []
    committed: list[bytes] = []

    def batch(name: str) -> Callable[[int], list[bytes]]:
        return lambda attempt: [f"{name}-a{attempt}-{i}".encode() for i in range(TXN_RECORDS)]

    producer = Producer(settings)
    producer.init_transactions(30)
    committed += _transaction(producer, topic, batch("first"), 30, aborted)
    # Its markers are written (to every partition, whichever broker leads it).
    assert sorted(_read_committed(cluster.bootstrap, topic, 30)) == sorted(committed)
    coordinator = _txn_coordinator(cluster, txn_id)
    for p in cluster.replicas(harness.TXN_STATE_TOPIC):
        cluster.wait_isr(harness.TXN_STATE_TOPIC, p, BROKERS)

    # The second transaction's records are written (acks=all) and its partition added
    # on the coordinator; then the coordinator's broker dies before the commit.
    producer.begin_transaction()
    second = batch("second")(0)
    for i, v in enumerate(second):
        producer.produce(topic, v, partition=i % TXN_PARTITIONS)
    assert producer.flush(ACKS_WITHIN_S) == 0, "the second transaction's records unacked"
    cluster.broker(coordinator).kill()
    try:
        _retrying("commit_transaction", producer.commit_transaction,
                  time.monotonic() + TXN_FAILOVER_S)
        committed += second
    except KafkaException as e:
        error: KafkaError = e.args[0]
        if error.fatal() or not error.txn_requires_abort():
            raise
        aborted += second
        _retrying("abort_transaction", producer.abort_transaction,
                  time.monotonic() + TXN_FAILOVER_S)
        committed += _transaction(producer, topic, lambda a: batch("second")(a + 1),
                                  TXN_FAILOVER_S, aborted)
    moved = _txn_coordinator(cluster, txn_id)
    assert moved != coordinator

    # The transactional id works again: the same producer, and a new one that fences it.
    committed += _transaction(producer, topic, batch("third"), 30, aborted)
    producer.flush(5)
    del producer
    successor = Producer(settings)
    successor.init_transactions(30)
    committed += _transaction(successor, topic, batch("fourth"), 30, aborted)
    del successor

    got = _read_committed(cluster.bootstrap, topic)
    read_aborted = sorted(set(got) & set(aborted))
    assert not read_aborted, f"read_committed read aborted records: {read_aborted[:5]}"
    assert sorted(got) == sorted(committed), (
        f"read_committed read {len(got)} records, {len(committed)} committed "
        f"({len(aborted)} aborted); missing {sorted(set(committed) - set(got))[:5]}, "
        f"unexpected {sorted(set(got) - set(committed))[:5]}")


def test_consume_transform_produce_is_exactly_once_across_brokers(
        cluster: harness.Cluster) -> None:
    """A read-process-write loop with its offsets in the transaction: the output
    partitions, the group's __consumer_offsets partition and the transaction coordinator
    are led by different brokers, so the partition leaders verify with the coordinator's
    broker and the markers (the offsets' one through the group coordinator) are written
    on each leader."""
    source, sink, group = "ctp-in", "ctp-out", "ctp-group"
    for topic in (source, sink):
        _replicated_topic(cluster, topic, TXN_PARTITIONS)
    inputs = [f"record-{i}".encode() for i in range(3 * TXN_RECORDS // 2)]
    loader = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i, v in enumerate(inputs):
        loader.produce(source, v, partition=i % TXN_PARTITIONS)
    assert loader.flush(ACKS_WITHIN_S) == 0
    assert {cluster.leader(sink, p) for p in range(TXN_PARTITIONS)} == set(BROKERS)

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "ctp",
                         "linger.ms": 5})
    producer.init_transactions(30)
    deadline = time.monotonic() + 120
    processed = 0
    try:
        consumer.subscribe([source])
        while processed < len(inputs):
            assert time.monotonic() < deadline, f"{processed} of {len(inputs)} processed"
            messages = [m for m in consumer.consume(40, 1.0) if m.error() is None]
            if not messages:
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, (m.value() or b"").upper(), partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(), 30)
            _retrying("commit_transaction", producer.commit_transaction, deadline)
            processed += len(messages)
    finally:
        consumer.close()
    assert sorted(_read_committed(cluster.bootstrap, sink)) == sorted(v.upper() for v in inputs)

    # The group's offsets were committed with the records: the input's end, each partition.
    checker = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                        "isolation.level": "read_committed"})
    try:
        committed = checker.committed(
            [TopicPartition(source, p) for p in range(TXN_PARTITIONS)], timeout=30)
    finally:
        checker.close()
    assert [tp.offset for tp in committed] == [
        len(inputs[p::TXN_PARTITIONS]) for p in range(TXN_PARTITIONS)]
