"""Consumer groups through aiokafka: members split partitions, a member that leaves or
is killed hands its partitions over, committed offsets survive consumer and broker
restarts, and a static member rejoins without a rebalance."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.groups import GROUP_SETTINGS, SESSION_MS

MEMBER_SCRIPT = """
import asyncio, sys
from aiokafka import AIOKafkaConsumer
bootstrap, group, topic, client_id, session_ms = sys.argv[1:6]
async def main():
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                client_id=client_id, session_timeout_ms=int(session_ms),
                                heartbeat_interval_ms=300)
    await consumer.start()
    while True:
        await consumer.getmany(timeout_ms=200)
asyncio.run(main())
"""


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    return broker_factory(plugin_settings={"coordinator": GROUP_SETTINGS})


async def wait_for(predicate: Callable[[], Awaitable[Any] | Any], timeout: float = 20.0,
                   what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def member(bootstrap: str, group: str, topic: str, client_id: str,
           **conf: Any) -> AIOKafkaConsumer:
    settings: dict[str, Any] = {"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": 300,
                                "auto_offset_reset": "earliest", **conf}
    return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                            client_id=client_id, **settings)


def owned(*consumers: AIOKafkaConsumer) -> list[int]:
    return sorted(tp.partition for c in consumers for tp in c.assignment())


async def group_state(admin: AIOKafkaAdminClient, group: str) -> tuple[str, list[str]]:
    (response,) = await admin.describe_consumer_groups([group])
    described = response.groups[0]
    return described[2], sorted(m[1] for m in described[5])


def test_members_split_partitions_then_one_leaves_and_one_dies(broker: EmbeddedBroker) -> None:
    topic, group = "aio-orders", "aio-split"

    async def body() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 6, 1)])
        a = member(broker.bootstrap, group, topic, "a")
        b = member(broker.bootstrap, group, topic, "b")
        doomed = await asyncio.create_subprocess_exec(
            sys.executable, "-c", MEMBER_SCRIPT, broker.bootstrap, group, topic, "c",
            str(SESSION_MS), stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            await a.start()
            await b.start()

            async def three_way() -> bool:
                state, clients = await group_state(admin, group)
                return (state == "Stable" and clients == ["a", "b", "c"]
                        and len(a.assignment()) == 2 and len(b.assignment()) == 2)

            await wait_for(three_way, 30, "three members with two partitions each")
            os.kill(doomed.pid, signal.SIGKILL)
            await doomed.wait()
            await wait_for(lambda: owned(a, b) == list(range(6)), SESSION_MS / 1000 + 10,
                           "the survivors taking the killed member's partitions")
            assert await group_state(admin, group) == ("Stable", ["a", "b"])

            await a.stop()
            await wait_for(lambda: owned(b) == list(range(6)), 15, "one member owning all")
            assert await group_state(admin, group) == ("Stable", ["b"])
        finally:
            if doomed.returncode is None:
                doomed.kill()
                await doomed.wait()
            await a.stop()
            await b.stop()
            await admin.close()

    asyncio.run(body())


def test_committed_offsets_resume_after_consumer_and_broker_restart(
    broker: EmbeddedBroker,
) -> None:
    topic, group = "aio-resume", "aio-resumers"
    tp = TopicPartition(topic, 0)

    async def setup() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            await admin.close()
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
        for i in range(60):
            producer.produce(topic, f"m{i}".encode())
        assert producer.flush(10) == 0

    async def consume(count: int) -> list[int]:
        consumer = member(broker.bootstrap, group, topic, "resumer", enable_auto_commit=False)
        await consumer.start()
        offsets: list[int] = []
        try:
            deadline = time.monotonic() + 20
            while len(offsets) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=200, max_records=count - len(offsets))
                for records in batches.values():
                    offsets.extend(r.offset for r in records)
            await consumer.commit({tp: OffsetAndMetadata(offsets[-1] + 1, "aio")})
            assert await consumer.committed(tp) == offsets[-1] + 1
        finally:
            await consumer.stop()
        return offsets

    asyncio.run(setup())
    assert asyncio.run(consume(20)) == list(range(20))
    assert asyncio.run(consume(20)) == list(range(20, 40))
    broker.restart()
    assert asyncio.run(consume(20)) == list(range(40, 60))


def test_static_member_rejoins_without_a_rebalance(broker: EmbeddedBroker) -> None:
    topic, group = "aio-static", "aio-statics"

    def rebalances() -> float:
        assert broker.broker is not None
        registry = broker.broker.metrics.registry
        return registry.get_sample_value("kafkernel_group_rebalances_total") or 0.0

    async def body() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 4, 1)])
        conf = {"session_timeout_ms": 6000}
        s1 = member(broker.bootstrap, group, topic, "s1", group_instance_id="s-1", **conf)
        s2 = member(broker.bootstrap, group, topic, "s2", group_instance_id="s-2", **conf)
        await s1.start()
        await s2.start()
        restarted = None
        try:
            await wait_for(lambda: owned(s1, s2) == [0, 1, 2, 3] and len(s1.assignment()) == 2,
                           20, "two static members splitting four partitions")
            before = rebalances()
            first = owned(s1)
            await s1.stop()  # a static member leaves no LeaveGroup behind
            restarted = member(broker.bootstrap, group, topic, "s1", group_instance_id="s-1",
                               **conf)
            await restarted.start()
            await wait_for(lambda: owned(restarted) == first, 15, "the same partitions back")
            assert owned(s2) == sorted(set(range(4)) - set(first))
            assert rebalances() == before
            assert await group_state(admin, group) == ("Stable", ["s1", "s2"])
        finally:
            for c in (s1, s2, restarted):
                if c is not None:
                    await c.stop()
            await admin.close()

    asyncio.run(body())
