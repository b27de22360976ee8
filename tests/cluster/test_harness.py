"""The cluster harness itself, on what metadata_zk does without replication: three
brokers register, a client's Metadata lists them, a replication factor 3 topic has its
replicas and leaders spread over all three, and the faults the replication tests use
(kill -9, restart on the same port and data, SIGSTOP past the session timeout) do to
the registrations and leadership what they do on Kafka."""

from __future__ import annotations

import time

from tests.cluster import harness
from tests.cluster.load import Acks, LoadProducer, read_all, verify

SESSION_S = harness.SESSION_TIMEOUT_MS / 1000
# A dead broker's session expires after SESSION_S; the controller (perhaps elected
# anew, if the dead broker held the role) then moves leadership. Generous for a
# loaded 2-core machine.
NEW_LEADER_WITHIN_S = 30.0


def test_three_brokers_register_and_spread_a_replicated_topic(
        cluster: harness.Cluster) -> None:
    assert cluster.registered() == {1, 2, 3}
    assert cluster.controller() in {1, 2, 3}
    assert cluster.metadata_brokers() == {1, 2, 3}

    cluster.create_topic("spread", partitions=3, replication_factor=3,
                         config={"min.insync.replicas": "2"})
    replicas = cluster.replicas("spread")
    assert sorted(replicas) == [0, 1, 2]
    assert all(sorted(r) == [1, 2, 3] for r in replicas.values()), replicas
    leaders = {cluster.leader("spread", p) for p in range(3)}
    assert leaders == {1, 2, 3}, "leaders are the replicas' first brokers, one each"
    metadata = cluster.metadata("spread")
    for p, m in metadata.items():
        state = cluster.partition_state("spread", p)
        assert state is not None
        assert (m.leader, set(m.replicas)) == (state.leader, {1, 2, 3})
        assert set(m.isr) == set(state.isr) == {1, 2, 3}
    # The harness wrote __consumer_offsets before the brokers started: replicated 3 ways.
    assert all(len(r) == 3 for r in cluster.replicas(harness.OFFSETS_TOPIC).values())


def test_kill_restart_and_pause(cluster: harness.Cluster) -> None:
    cluster.create_topic("faults", partitions=1, replication_factor=3)
    old = cluster.leader("faults", 0)
    began = time.monotonic()
    cluster.broker(old).kill()
    new, seconds = cluster.wait_new_leader("faults", 0, old, timeout=NEW_LEADER_WITHIN_S)
    assert new != old and seconds < NEW_LEADER_WITHIN_S
    # The session expired: the registration went no sooner than the session timeout
    # allows (ZooKeeper may expire it up to a tick early).
    assert old not in cluster.registered()
    assert time.monotonic() - began >= SESSION_S - 1.0
    state = cluster.partition_state("faults", 0)
    assert state is not None and old not in state.isr and state.leader_epoch >= 1

    port, data = cluster.broker(old).port, cluster.broker(old).data_dir
    cluster.restart(old)
    assert cluster.broker(old).port == port and (data / "meta.properties").exists()
    assert old in cluster.metadata_brokers()

    # SIGSTOP past the session timeout: the broker loses its registration; SIGCONT: it
    # registers again with a new session.
    paused = cluster.leader("faults", 0)
    cluster.broker(paused).pause()
    try:
        cluster.wait_unregistered(paused, SESSION_S * 3 + 10)
        other, _ = cluster.wait_new_leader("faults", 0, paused, timeout=NEW_LEADER_WITHIN_S)
        assert other != paused
    finally:
        cluster.broker(paused).resume()
    cluster.wait_registered([paused], timeout=60)
    assert cluster.broker(paused).alive


def test_load_and_its_check(cluster: harness.Cluster) -> None:
    """The load producer and the read-back check on a topic of one replica (whose high
    watermark needs no follower), and the check's verdict on a made-up loss and
    duplicate."""
    cluster.create_topic("load", partitions=2, replication_factor=1)
    producer = LoadProducer(cluster.bootstrap, "load", partitions=2, rate=500).start()
    assert producer.wait_acked(300, 30), producer.acks.failed
    acks = producer.stop(flush_timeout=30)
    verdict = verify(acks, read_all(cluster.bootstrap, "load", 2))
    assert verdict.ok and verdict.consumed == verdict.acked >= 300, str(verdict)

    made_up = Acks(acked=[(0.0, b"a"), (0.0, b"b"), (0.0, b"c")])
    verdict = verify(made_up, [b"a", b"c", b"c", b"x"])
    assert (verdict.lost, verdict.duplicates, verdict.unacked_present) == (
        [b"b"], {b"c": 2}, 1)
    assert not verdict.ok
