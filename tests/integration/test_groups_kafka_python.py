"""Consumer groups through kafka-python: members split partitions, a member that leaves
or is killed hands its partitions over, committed offsets survive consumer and broker
restarts, and the admin client's group APIs (list with a state filter, describe,
offsets, alter, OffsetDelete, remove members, delete)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from kernel.testing.embedded import EmbeddedBroker

GROUP_SETTINGS = {
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
SESSION_MS = 3000

MEMBER_SCRIPT = """
import sys
from kafka import KafkaConsumer
bootstrap, group, topic, client_id, session_ms = sys.argv[1:6]
consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                         client_id=client_id, session_timeout_ms=int(session_ms),
                         heartbeat_interval_ms=300, auto_offset_reset="earliest")
while True:
    consumer.poll(1000)
"""


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    return broker_factory(plugin_settings={"coordinator": GROUP_SETTINGS})


@pytest.fixture
def admin(broker: EmbeddedBroker) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def produce(bootstrap: str, topic: str, count: int) -> None:
    # confluent-kafka's producer: kafka-python's defaults to idempotence, which needs
    # the transaction plugin.
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i in range(count):
        producer.produce(topic, f"m{i}".encode(), partition=0)
    assert producer.flush(10) == 0


class MemberThread:
    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str) -> None:
        self.assigned: set[int] = set()
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
            auto_offset_reset="earliest",
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            # Long enough for a whole rebalance: kafka-python 3.0 can drop a SyncGroup
            # response that arrives just as a short poll gives up on the rebalance.
            self._consumer.poll(1000)
            self.assigned = {tp.partition for tp in self._consumer.assignment()}
        self._consumer.close()

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(15)


@pytest.fixture
def members() -> Iterator[list[MemberThread]]:
    started: list[MemberThread] = []
    yield started
    for m in started:
        m.leave()


def group_view(admin: KafkaAdminClient, group: str) -> tuple[str, dict[str, set[int]]]:
    d = admin.describe_groups([group])[group]
    assignment: dict[str, set[int]] = {}
    for m in d["members"]:
        owned = m["member_assignment"]["assigned_partitions"] if m["member_assignment"] else []
        assignment[m["client_id"]] = {p for t in owned for p in t["partitions"]}
    return d["group_state"], assignment


def stable_with(admin: KafkaAdminClient, group: str, clients: set[str], partitions: int) -> bool:
    state, assignment = group_view(admin, group)
    owned = sorted(p for ps in assignment.values() for p in ps)
    return state == "Stable" and set(assignment) == clients and owned == list(range(partitions))


def test_members_split_partitions_then_one_leaves_and_one_dies(
    broker: EmbeddedBroker, admin: KafkaAdminClient, members: list[MemberThread]
) -> None:
    topic, group = "kp-orders", "kp-split"
    admin.create_topics([NewTopic(topic, 6, 1)])
    members.append(MemberThread(broker.bootstrap, group, topic, "a"))
    members.append(MemberThread(broker.bootstrap, group, topic, "b"))
    doomed = subprocess.Popen(
        [sys.executable, "-c", MEMBER_SCRIPT, broker.bootstrap, group, topic, "c",
         str(SESSION_MS)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: stable_with(admin, group, {"a", "b", "c"}, 6), 30,
                 "three members sharing six partitions")
        assert sorted(len(ps) for ps in group_view(admin, group)[1].values()) == [2, 2, 2]
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(5)
        wait_for(lambda: stable_with(admin, group, {"a", "b"}, 6), SESSION_MS / 1000 + 10,
                 "the survivors taking the killed member's partitions")
        wait_for(lambda: members[0].assigned | members[1].assigned == set(range(6)))
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(5)
    members.pop(0).leave()
    wait_for(lambda: stable_with(admin, group, {"b"}, 6), 15, "one member owning everything")
    wait_for(lambda: members[0].assigned == set(range(6)))


def test_committed_offsets_resume_after_consumer_and_broker_restart(
    broker: EmbeddedBroker, admin: KafkaAdminClient
) -> None:
    topic, group = "kp-resume", "kp-resumers"
    admin.create_topics([NewTopic(topic, 1, 1)])
    produce(broker.bootstrap, topic, 60)

    def consume(count: int) -> list[int]:
        consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                                 max_poll_records=1)
        offsets: list[int] = []
        try:
            deadline = time.monotonic() + 20
            while len(offsets) < count and time.monotonic() < deadline:
                for records in consumer.poll(200).values():
                    offsets.extend(r.offset for r in records)
            tp = TopicPartition(topic, 0)
            consumer.commit({tp: OffsetAndMetadata(offsets[-1] + 1, "kp", -1)})
            assert consumer.committed(tp) == offsets[-1] + 1
        finally:
            consumer.close()
        return offsets

    assert consume(20) == list(range(20))
    assert consume(20) == list(range(20, 40))
    broker.restart()
    assert consume(20) == list(range(40, 60))
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as fresh:
        offsets = fresh.list_group_offsets(group)[group]
        assert offsets[TopicPartition(topic, 0)].offset == 60
        assert offsets[TopicPartition(topic, 0)].metadata == "kp"


def test_admin_group_apis(
    broker: EmbeddedBroker, admin: KafkaAdminClient, members: list[MemberThread]
) -> None:
    topic, other = "kp-admin", "kp-other"
    admin.create_topics([NewTopic(topic, 2, 1), NewTopic(other, 1, 1)])
    members.append(MemberThread(broker.bootstrap, "kp-live", topic, "live"))
    wait_for(lambda: stable_with(admin, "kp-live", {"live"}, 2), what="a stable group")
    # Offsets of a group without members (generation -1, as tools commit them).
    admin.alter_group_offsets("kp-idle", {TopicPartition(topic, 0): OffsetAndMetadata(5, "", -1),
                                          TopicPartition(other, 0): OffsetAndMetadata(7, "", -1)})

    listed = {g["group_id"]: g["group_state"] for g in admin.list_groups()}
    assert listed == {"kp-live": "Stable", "kp-idle": "Empty"}
    stable = [g["group_id"] for g in admin.list_groups(states_filter=["Stable"])]
    assert stable == ["kp-live"]

    # A live consumer group keeps the offsets of topics it subscribes to.
    refused = admin.delete_group_offsets("kp-live", [TopicPartition(topic, 0)])
    assert refused[TopicPartition(topic, 0)] is kafka_errors.GroupSubscribedToTopicError
    deleted = admin.delete_group_offsets("kp-idle", [TopicPartition(other, 0)])
    assert deleted[TopicPartition(other, 0)] is kafka_errors.NoError
    assert set(admin.list_group_offsets("kp-idle")["kp-idle"]) == {TopicPartition(topic, 0)}

    assert admin.delete_groups(["kp-live", "kp-idle", "kp-never"]) == {
        "kp-live": "NonEmptyGroupError", "kp-idle": "OK", "kp-never": "GroupIdNotFoundError",
    }
    assert {g["group_id"] for g in admin.list_groups()} == {"kp-live"}
    assert admin.list_group_offsets("kp-idle") == {"kp-idle": {}}
