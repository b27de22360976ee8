"""Replication between brokers on metadata_zk, in one process: followers fetch from
their leader, the high watermark waits for the ISR, the ISR shrinks and grows through
the controller, a new leader takes over with every acknowledged record, and a returning
replica truncates the tail it alone had. The brokers are real (in-process, each on its
own loop and port) and talk over loopback sockets; ZooKeeper is Debian's."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from kernel.protocol.build import request_module
from kernel.protocol.errors import ErrorCode
from kernel.protocol.records import SimpleRecord, build_batch, iter_batches
from kernel.testing.embedded import EmbeddedBroker
from plugins.metadata_zk.znodes import LeaderAndIsr, encode_partition_state, partition_state_path
from tests.integration.roundtrip import consume_values
from tests.integration.wire import connect, decode_response, encode_request, recv_frame
from tests.zk import wait_until

Factory = Callable[..., EmbeddedBroker]
FAST = {"replica.lag.time.max.ms": 2000, "replica.fetch.wait.max.ms": 100,
        "replica.fetch.backoff.ms": 100}


def _cluster(zk_broker_factory: Factory, n: int = 3,
             settings: dict[str, Any] | None = None) -> list[EmbeddedBroker]:
    return [zk_broker_factory({"broker.id": i, **FAST, **(settings or {})},
                              zk={"zookeeper.session.timeout.ms": 6000})
            for i in range(1, n + 1)]


def _wait(what: str, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
    return wait_until(predicate, what, timeout)


def _bootstrap(brokers: list[EmbeddedBroker]) -> str:
    return ",".join(b.bootstrap for b in brokers if b.broker is not None
                    and b._loop is not None)


def _create_topic(brokers: list[EmbeddedBroker], name: str, partitions: int = 1,
                  min_isr: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic(name, partitions, 3, config={
        "min.insync.replicas": str(min_isr)})])[name].result(30)
    _wait("every replica hosted", lambda: all(
        b.broker.replicas.get_partition(name, p) is not None
        for b in brokers for p in range(partitions)))


def _state(broker: EmbeddedBroker, topic: str, partition: int = 0) -> Any:
    assert broker.broker is not None
    return broker.broker.metadata.image.partition(topic, partition)


def _replica(broker: EmbeddedBroker, topic: str, partition: int = 0) -> Any:
    assert broker.broker is not None
    return broker.broker.replicas.get_partition(topic, partition)


def _by_id(brokers: list[EmbeddedBroker], broker_id: int) -> EmbeddedBroker:
    return next(b for b in brokers if b.broker is not None
                and b.broker.config.broker_id == broker_id)


def _produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all",
             ) -> list[tuple[int, int]]:
    """Produce ``values``; (partition, offset) of each acknowledged one."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks,
                         "enable.idempotence": acks == "all", "linger.ms": 5,
                         "message.timeout.ms": 30000})
    acked: list[tuple[int, int]] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((msg.partition(), msg.offset()))
        else:
            errors.append(err)

    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=report)
    producer.flush(60)
    assert not errors, errors
    return acked


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    return consume_values({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                           "enable.auto.commit": False}, topic, expected, 60)


def _log_bytes(broker: EmbeddedBroker, topic: str) -> list[tuple[int, int, bytes]]:
    """(base offset, leader epoch, bytes) of every batch in the local log."""
    log = _replica(broker, topic).log

    async def read() -> list[tuple[int, int, bytes]]:
        data = log.read(log.log_start_offset, 1 << 30, log.log_end_offset).records
        return [(h.base_offset, h.partition_leader_epoch, bytes(b))
                for h, b in iter_batches(data)]

    return broker.call(read())


def test_followers_replicate_and_the_high_watermark_waits_for_the_isr(
        zk_broker_factory: Factory) -> None:
    brokers = _cluster(zk_broker_factory)
    topic = "replicated"
    _create_topic(brokers, topic)
    state = _state(brokers[0], topic)
    assert sorted(state.replicas) == [1, 2, 3] and sorted(state.isr) == [1, 2, 3]
    acked = _produce(_bootstrap(brokers), topic, [f"v{i}".encode() for i in range(200)])
    assert len(acked) == 200
    end = max(o for _, o in acked) + 1
    leader = _by_id(brokers, state.leader)
    # acks=all was answered once the high watermark passed the records: every
    # follower had them.
    assert _replica(leader, topic).high_watermark == end
    for b in brokers:
        _wait(f"broker {b.broker.config.broker_id} to reach {end}",
              lambda b=b: _replica(b, topic).log.log_end_offset == end
              and _replica(b, topic).high_watermark == end)
    assert len({tuple(_log_bytes(b, topic)) for b in brokers}) == 1
    assert sorted(_consume_all(_bootstrap(brokers), topic, 200)) == sorted(
        f"v{i}".encode() for i in range(200))


def _follower_sessions(leader: EmbeddedBroker) -> list[tuple[int, int, int]]:
    """(id, epoch, partitions) of the privileged (followers') fetch sessions at
    ``leader``, read on its loop."""
    cache = leader.broker.fetch_sessions

    async def read() -> list[tuple[int, int, int]]:
        return [(s.id, s.epoch, len(s.partitions)) for s in cache.sessions() if s.privileged]

    return leader.call(read())


def test_followers_fetch_in_sessions_and_start_over_when_theirs_is_gone(
        zk_broker_factory: Factory) -> None:
    """Each follower keeps one incremental fetch session at the leader (KIP-227); when the
    leader no longer has it (FETCH_SESSION_ID_NOT_FOUND), the follower opens another
    with a full fetch and replication goes on."""
    brokers = _cluster(zk_broker_factory)
    topic = "sessions"
    _create_topic(brokers, topic, partitions=2)
    leader = _by_id(brokers, _state(brokers[0], topic, 0).leader)
    # Partition 1 may be led elsewhere: one session per (follower, leader) pair holds
    # what that follower fetches there.
    _wait("two follower sessions past their first incremental fetch", lambda: len(
        [s for s in _follower_sessions(leader) if s[1] > 1]) == 2)
    before = {s[0] for s in _follower_sessions(leader)}

    async def forget_all() -> None:
        cache = leader.broker.fetch_sessions
        for s in cache.sessions():
            cache.remove(s.id)

    leader.call(forget_all())
    acked = _produce(_bootstrap(brokers), topic, [b"after"] * 20)
    end = max(o for _, o in acked) + 1
    for b in brokers:
        _wait(f"broker {b.broker.config.broker_id} to reach {end}",
              lambda b=b: _replica(b, topic).log.log_end_offset == end)
    _wait("two new follower sessions", lambda: len(
        [s for s in _follower_sessions(leader) if s[0] not in before and s[1] > 1]) == 2)


def test_a_stopped_follower_leaves_the_isr_and_rejoins_it(
        zk_broker_factory: Factory) -> None:
    brokers = _cluster(zk_broker_factory)
    topic = "isr"
    _create_topic(brokers, topic)
    leader_id = _state(brokers[0], topic).leader
    follower = next(b for b in brokers if b.broker.config.broker_id != leader_id)
    follower_id = follower.broker.config.broker_id
    # Cut the follower off from the leader without ending its ZooKeeper session: the
    # controller keeps it in the ISR, only the leader's lag check can drop it.
    follower.call(follower.broker.fetchers.shutdown())
    leader = _by_id(brokers, leader_id)
    _produce(leader.bootstrap, topic, [b"x"] * 10, acks="1")
    _wait("the leader to drop the lagging follower",
          lambda: follower_id not in _state(leader, topic).isr, timeout=20)
    # Writes go on with the other two (min.insync.replicas=2).
    _produce(_bootstrap(brokers), topic, [b"y"] * 10)
    follower.restart()
    _wait("the follower to rejoin the ISR",
          lambda: follower_id in _state(leader, topic).isr, timeout=30)
    assert _replica(follower, topic).log.log_end_offset == \
        _replica(leader, topic).log.log_end_offset


def test_acks_all_is_refused_below_min_insync_replicas(zk_broker_factory: Factory) -> None:
    brokers = _cluster(zk_broker_factory)
    topic = "min-isr"
    _create_topic(brokers, topic, min_isr=3)
    leader_id = _state(brokers[0], topic).leader
    stopped = next(b for b in brokers if b.broker.config.broker_id != leader_id)
    stopped.stop(remove_data=False)
    leader = _by_id(brokers, leader_id)
    _wait("the ISR to lose the stopped broker", lambda: len(_state(leader, topic).isr) == 2)
    producer = Producer({"bootstrap.servers": leader.bootstrap, "acks": "all",
                         "message.timeout.ms": 3000, "retries": 0})
    errors: list[Any] = []
    producer.produce(topic, b"refused", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].name() == "NOT_ENOUGH_REPLICAS"


def test_a_new_leader_keeps_every_acknowledged_record_and_the_old_one_truncates(
        zk_broker_factory: Factory) -> None:
    brokers = _cluster(zk_broker_factory, settings={"replica.lag.time.max.ms": 60000})
    topic = "failover"
    _create_topic(brokers, topic)
    acked = _produce(_bootstrap(brokers), topic, [f"a{i}".encode() for i in range(50)])
    end = max(o for _, o in acked) + 1
    state = _state(brokers[0], topic)
    old_leader = _by_id(brokers, state.leader)
    others = [b for b in brokers if b is not old_leader]
    for b in others:
        _wait("followers caught up", lambda b=b: _replica(b, topic).log.log_end_offset == end)
    # The followers stop fetching (a network cut), then the leader takes writes with
    # acks=1 that nobody else has, and dies.
    for b in others:
        b.call(b.broker.fetchers.shutdown())
    _produce(old_leader.bootstrap, topic, [b"lost-1", b"lost-2"], acks="1")
    assert _replica(old_leader, topic).log.log_end_offset == end + 2
    old_id = old_leader.broker.config.broker_id
    old_leader.stop(remove_data=False)
    new = _wait("a new leader", lambda: (s := _state(others[0], topic)) is not None
                and s.leader not in (old_id, -1) and s.leader_epoch > state.leader_epoch
                and s)
    new_leader = _by_id(others, new.leader)
    _produce(_bootstrap(others), topic, [f"b{i}".encode() for i in range(20)])
    assert _replica(new_leader, topic).log.log_end_offset == end + 20
    old_leader.start()
    _wait("the old leader to follow and catch up", lambda: _replica(
        old_leader, topic).log.log_end_offset == end + 20, timeout=30)
    _wait("the old leader back in the ISR",
          lambda: old_id in _state(new_leader, topic).isr, timeout=30)
    # Its divergent tail (the acks=1 records) is gone: its log is the new leader's.
    assert _log_bytes(old_leader, topic) == _log_bytes(new_leader, topic)
    values = _consume_all(_bootstrap(brokers), topic, 70)
    assert sorted(values) == sorted([f"a{i}".encode() for i in range(50)]
                                    + [f"b{i}".encode() for i in range(20)])
    assert b"lost-1" not in values


def test_a_leader_that_becomes_follower_answers_waiting_produces(
        zk_broker_factory: Factory, kazoo: KazooClient) -> None:
    """An acks=all produce parked on a leader whose followers stopped fetching is
    answered NOT_LEADER_OR_FOLLOWER as soon as the broker is no longer leader, not at
    its timeout (Kafka's makeFollowers). Raw frames: a client would retry on the new
    leader and hide the answer."""
    brokers = _cluster(zk_broker_factory, settings={"replica.lag.time.max.ms": 60000})
    topic = "resign"
    _create_topic(brokers, topic)
    state = _state(brokers[0], topic)
    leader = _by_id(brokers, state.leader)
    others = [b for b in brokers if b is not leader]
    for b in others:
        _wait("following", lambda b=b: b.broker.fetchers.fetch_offset((topic, 0)) is not None)
        b.call(b.broker.fetchers.shutdown())
    m = request_module(0, 9)
    body = m.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=60),
        topic_data=(m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(
            index=0, records=build_batch([SimpleRecord(value=b"parked")])),)),))
    with connect(leader.bootstrap, timeout=60) as sock:
        sock.sendall(encode_request(body))
        time.sleep(1.0)
        assert _replica(leader, topic).log.log_end_offset == 1  # appended, waiting
        # Leadership moves to another ISR member, written at the state's version as
        # the controller writes it.
        path = partition_state_path(topic, 0)
        _, stat = kazoo.get(path)
        kazoo.set(path, encode_partition_state(LeaderAndIsr(
            others[0].broker.config.broker_id, state.leader_epoch + 1, state.isr, 1)),
            version=stat.version)
        started = time.monotonic()
        frame = recv_frame(sock)
    assert frame is not None
    _, response = decode_response(frame, 0, 9)
    (answer,) = response.responses[0].partition_responses
    assert answer.error_code == ErrorCode.not_leader_or_follower
    assert time.monotonic() - started < 10


def test_a_deleted_topic_stops_its_followers_quietly(zk_broker_factory: Factory) -> None:
    """Followers fetching a topic that is deleted stop without an error logged (the
    broker_factory fails the test on one) and the brokers go on replicating others."""
    brokers = _cluster(zk_broker_factory)
    _create_topic(brokers, "deleted")
    _create_topic(brokers, "kept")
    _produce(_bootstrap(brokers), "deleted", [b"z"] * 20)
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.delete_topics(["deleted"])["deleted"].result(30)
    _wait("the replicas gone", lambda: all(_replica(b, "deleted") is None for b in brokers))
    assert len(_produce(_bootstrap(brokers), "kept", [b"ok"] * 5)) == 5
