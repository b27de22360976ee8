"""Consumer groups through confluent-kafka (librdkafka): members split partitions, a
member that leaves or is killed hands its partitions over, committed offsets survive
consumer and broker restarts, cooperative-sticky rebalances incrementally, and a static
member rejoins without a rebalance."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import generate_latest

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.groups import (
    GROUP_SETTINGS,
    SESSION_MS,
    PolledMember,
    split_then_one_dies_and_one_leaves,
    stable_with,
    wait_for,
)

# A member in its own process, so the test can SIGKILL it (no LeaveGroup is sent).
MEMBER_SCRIPT = """
import sys
from confluent_kafka import Consumer
bootstrap, group, topic, client_id, session_ms = sys.argv[1:6]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "client.id": client_id, "session.timeout.ms": int(session_ms),
                     "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
while True:
    consumer.poll(0.1)
"""


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    return broker_factory(plugin_settings={"coordinator": GROUP_SETTINGS})


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i in range(count):
        producer.produce(topic, f"m{i}".encode(), partition=i % partitions)
    assert producer.flush(10) == 0


class MemberThread(PolledMember):
    """A confluent-kafka consumer that records its assignment callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str,
                 **conf: Any) -> None:
        super().__init__()
        self.revocations: list[set[int]] = []
        self.assignments: list[set[int]] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300,
            "auto.offset.reset": "earliest", **conf,
        })
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.start()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assignments.append({p.partition for p in partitions})

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revocations.append({p.partition for p in partitions})

    def poll_once(self) -> set[int]:
        self.consumer.poll(0.05)
        return {p.partition for p in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()


def described(admin: AdminClient, group: str) -> tuple[bool, dict[str, set[int]]]:
    """(stable?, client id -> assigned partitions) as DescribeConsumerGroups reports them."""
    d = admin.describe_consumer_groups([group])[group].result(10)
    assignment = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions}
                  for m in d.members}
    return d.state.name == "STABLE", assignment


def test_members_split_partitions_then_one_leaves_and_one_dies(
    broker: EmbeddedBroker, members: list[PolledMember]
) -> None:
    topic, group = "orders", "split"
    create_topic(broker.bootstrap, topic, 6)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    split_then_one_dies_and_one_leaves(
        start_member=lambda client_id: MemberThread(broker.bootstrap, group, topic, client_id),
        members=members, member_script=MEMBER_SCRIPT, bootstrap=broker.bootstrap,
        group=group, topic=topic, view=partial(described, admin, group),
        # The session timeout, then one rejoin round driven by heartbeats.
        recovery_bound_s=SESSION_MS / 1000 + 5,
    )


def test_committed_offsets_resume_after_consumer_and_broker_restart(
    broker: EmbeddedBroker,
) -> None:
    topic, group = "resume", "resumers"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 100)

    def consume(bootstrap: str, count: int) -> list[int]:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "session.timeout.ms": SESSION_MS})
        consumer.subscribe([topic])
        offsets: list[int] = []
        last = None
        try:
            deadline = time.monotonic() + 20
            while len(offsets) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                offsets.append(msg.offset())
                last = msg
            assert last is not None
            consumer.commit(message=last, asynchronous=False)
        finally:
            consumer.close()
        return offsets

    assert consume(broker.bootstrap, 40) == list(range(40))
    assert consume(broker.bootstrap, 30) == list(range(40, 70))
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def committed() -> int | None:
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
        try:
            result = admin.list_consumer_group_offsets(request)[group].result(10)
        except Exception:  # the coordinator may still be loading: retry
            return None
        return result.topic_partitions[0].offset

    assert wait_for(committed, 20, "committed offsets after the restart") == 70
    assert consume(broker.bootstrap, 30) == list(range(70, 100))


def test_cooperative_sticky_moves_only_what_it_must(
    broker: EmbeddedBroker, members: list[PolledMember]
) -> None:
    topic, group = "sticky", "cooperative"
    create_topic(broker.bootstrap, topic, 4)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    view = partial(described, admin, group)
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    first = MemberThread(broker.bootstrap, group, topic, "first", **conf)
    members.append(first)
    wait_for(lambda: first.assigned == set(range(4)), what="the first member owning all")
    chosen = admin.describe_consumer_groups([group])[group].result(10).partition_assignor
    assert chosen == "cooperative-sticky"

    second = MemberThread(broker.bootstrap, group, topic, "second", **conf)
    members.append(second)
    wait_for(lambda: stable_with(view, {"first", "second"}, 4), 20,
             "an even split")
    wait_for(lambda: len(first.assigned) == 2 and len(second.assigned) == 2)
    # Incremental: the first member gave up two partitions and kept two throughout.
    assert [r for r in first.revocations if r] == [set(range(4)) - first.assigned]

    second.leave()
    members.remove(second)
    wait_for(lambda: first.assigned == set(range(4)), 15, "the partitions coming back")
    assert len([r for r in first.revocations if r]) == 1  # taking back revokes nothing


def rebalances(broker: EmbeddedBroker) -> float:
    assert broker.broker is not None
    value = broker.broker.metrics.registry.get_sample_value("kafkernel_group_rebalances_total")
    return value or 0.0


def test_static_member_rejoins_without_a_rebalance(
    broker: EmbeddedBroker, members: list[PolledMember]
) -> None:
    topic, group = "static", "statics"
    create_topic(broker.bootstrap, topic, 4)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    view = partial(described, admin, group)
    conf = {"session.timeout.ms": 6000}
    s1 = MemberThread(broker.bootstrap, group, topic, "s1", **{"group.instance.id": "s-1"},
                      **conf)
    s2 = MemberThread(broker.bootstrap, group, topic, "s2", **{"group.instance.id": "s-2"},
                      **conf)
    members.extend([s1, s2])
    wait_for(lambda: stable_with(view, {"s1", "s2"}, 4), 20, "two static members")
    wait_for(lambda: len(s1.assigned) == 2 and len(s2.assigned) == 2)
    before = rebalances(broker)
    s1_partitions = set(s1.assigned)
    revocations_of_s2 = len(s2.revocations)

    # A static member's close sends no LeaveGroup: the group keeps its place.
    s1.leave()
    members.remove(s1)
    restarted = MemberThread(broker.bootstrap, group, topic, "s1",
                             **{"group.instance.id": "s-1"}, **conf)
    members.append(restarted)
    wait_for(lambda: restarted.assigned == s1_partitions, 15, "the same partitions back")
    assert stable_with(view, {"s1", "s2"}, 4)
    assert rebalances(broker) == before
    assert len(s2.revocations) == revocations_of_s2


def test_group_metrics(broker: EmbeddedBroker) -> None:
    topic, group = "metered", "meter"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 20, partitions=2)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": SESSION_MS})
    consumer.subscribe([topic])
    try:
        seen = 0
        deadline = time.monotonic() + 20
        while seen < 6 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and msg.partition() == 0:
                seen += 1
                consumer.commit(message=msg, asynchronous=False)
        assert broker.broker is not None
        text = generate_latest(broker.broker.metrics.registry).decode()
        assert 'kafkernel_groups{state="Stable"} 1.0' in text
        assert f'kafkernel_group_members{{group="{group}"}} 1.0' in text
        # Ten records on partition 0, six consumed and committed; nothing committed on
        # partition 1 yet: no lag is made up for it.
        assert (f'kafkernel_group_consumer_lag{{group="{group}",partition="0",'
                f'topic="{topic}"}} 4.0') in text
        assert f'kafkernel_group_consumer_lag{{group="{group}",partition="1"' not in text
        assert f'kafkernel_group_consumer_lag_sum{{group="{group}"}} 4.0' in text
        assert "kafkernel_group_offset_commits_total 6.0" in text
        assert "kafkernel_group_rebalances_total 1.0" in text

        consumer.commit(offsets=[TopicPartition(topic, 1, 3)], asynchronous=False)
        consumer.close()
        # The lag follows the high watermark with the consumer gone: 20 more records,
        # 10 per partition, and no request reaches the coordinator.
        produce(broker.bootstrap, topic, 20, partitions=2)
        text = generate_latest(broker.broker.metrics.registry).decode()
        assert 'kafkernel_groups{state="Empty"} 1.0' in text
        assert (f'kafkernel_group_consumer_lag{{group="{group}",partition="0",'
                f'topic="{topic}"}} 14.0') in text
        assert (f'kafkernel_group_consumer_lag{{group="{group}",partition="1",'
                f'topic="{topic}"}} 17.0') in text
        assert f'kafkernel_group_consumer_lag_sum{{group="{group}"}} 31.0' in text
    finally:
        consumer.close()


def test_unknown_group_offsets_and_errors_seen_by_the_client(broker: EmbeddedBroker) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "nobody-here"})
    try:
        committed = consumer.committed([TopicPartition("missing-topic", 0)], timeout=10)
        assert committed[0].offset < 0
    finally:
        consumer.close()
    bad = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bad-session",
                    "session.timeout.ms": 500, "heartbeat.interval.ms": 100})
    create_topic(broker.bootstrap, "anything", 1)
    codes: list[int] = []
    bad.subscribe(["anything"])
    try:
        deadline = time.monotonic() + 10
        while KafkaError.INVALID_SESSION_TIMEOUT not in codes and time.monotonic() < deadline:
            msg = bad.poll(0.2)
            if msg is not None and msg.error() is not None:
                codes.append(msg.error().code())
    finally:
        bad.close()
    assert KafkaError.INVALID_SESSION_TIMEOUT in codes
