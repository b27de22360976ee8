"""Consumer groups through kafka-python: members split partitions, a member that leaves
or is killed hands its partitions over, committed offsets survive consumer and broker
restarts, and the admin client's group APIs (list with a state filter, describe,
offsets, alter, OffsetDelete, remove members, delete)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.groups import (
    GROUP_SETTINGS,
    SESSION_MS,
    PolledMember,
    split_then_one_dies_and_one_leaves,
    stable_with,
    wait_for,
)

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


def produce(bootstrap: str, topic: str, count: int) -> None:
    # confluent-kafka's producer: kafka-python's defaults to idempotence, which needs
    # the transaction plugin.
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i in range(count):
        producer.produce(topic, f"m{i}".encode(), partition=0)
    assert producer.flush(10) == 0


class MemberThread(PolledMember):
    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str) -> None:
        super().__init__()
        self._consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
            auto_offset_reset="earliest",
        )
        self.start()

    def poll_once(self) -> set[int]:
        # Long enough for a whole rebalance: kafka-python 3.0 can drop a SyncGroup
        # response that arrives just as a short poll gives up on the rebalance.
        self._consumer.poll(1000)
        return {tp.partition for tp in self._consumer.assignment()}

    def close(self) -> None:
        self._consumer.close()


def group_view(admin: KafkaAdminClient, group: str) -> tuple[bool, dict[str, set[int]]]:
    """(stable?, client id -> assigned partitions) as DescribeGroups reports them."""
    d = admin.describe_groups([group])[group]
    assignment: dict[str, set[int]] = {}
    for m in d["members"]:
        owned = m["member_assignment"]["assigned_partitions"] if m["member_assignment"] else []
        assignment[m["client_id"]] = {p for t in owned for p in t["partitions"]}
    return d["group_state"] == "Stable", assignment


def test_members_split_partitions_then_one_leaves_and_one_dies(
    broker: EmbeddedBroker, admin: KafkaAdminClient, members: list[PolledMember]
) -> None:
    topic, group = "kp-orders", "kp-split"
    admin.create_topics([NewTopic(topic, 6, 1)])

    split_then_one_dies_and_one_leaves(
        start_member=lambda client_id: MemberThread(broker.bootstrap, group, topic, client_id),
        members=members, member_script=MEMBER_SCRIPT, bootstrap=broker.bootstrap,
        group=group, topic=topic, view=partial(group_view, admin, group),
        # The session timeout, then a rejoin round paced by kafka-python's 1 s polls.
        recovery_bound_s=SESSION_MS / 1000 + 10,
    )


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
    broker: EmbeddedBroker, admin: KafkaAdminClient, members: list[PolledMember]
) -> None:
    topic, other = "kp-admin", "kp-other"
    admin.create_topics([NewTopic(topic, 2, 1), NewTopic(other, 1, 1)])
    members.append(MemberThread(broker.bootstrap, "kp-live", topic, "live"))
    wait_for(lambda: stable_with(partial(group_view, admin, "kp-live"), {"live"}, 2),
             what="a stable group")
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
