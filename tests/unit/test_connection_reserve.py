"""Issue 30, descriptors: the reserve kept out of the open files limit for the broker's
own work, and Kafka's connection limits by listener and by creation rate (KIP-612's
ConnectionQuotas arithmetic)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kernel.config import ConfigError, load_config
from kernel.network.descriptors import (
    FILES_PER_CLEANER_THREAD,
    FILES_PER_LOG_DIR,
    FILES_PER_LOG_WORKER,
    FILES_PER_PARTITION,
    FILES_PER_SEGMENT,
    LINKS_PER_BROKER,
    PROCESS_FILES,
    DescriptorReserve,
    describe_room,
    partitions_on_disk,
)
from kernel.network.quotas import ConnectionQuotas, ConnectionRate
from kernel.server import connection_quotas

INT_MAX = 2**31 - 1


def test_the_reserve_adds_the_broker_s_own_needs() -> None:
    reserve = DescriptorReserve.at_start(limit=3000, listening_sockets=2, log_dirs=1,
                                         log_workers=2, cleaner_threads=1)
    fixed = (PROCESS_FILES + 2 + FILES_PER_LOG_DIR + 2 * FILES_PER_LOG_WORKER
             + FILES_PER_CLEANER_THREAD)
    assert reserve.fixed == fixed
    assert reserve.reserved(0, 0) == fixed
    # Open segment files get half of what the fixed needs leave: the log manager
    # keeps that many segments open at most, whatever it hosts.
    assert reserve.segment_files == (3000 - fixed) // 2
    assert reserve.open_segments == reserve.segment_files // FILES_PER_SEGMENT
    # A few partitions cannot hold the budget: what they can hold is kept (an active
    # segment and a few read ones each); each other broker is a fetcher link and a pool
    # of channel connections.
    assert reserve.reserved(50, 2) == fixed + 50 * FILES_PER_PARTITION + 2 * LINKS_PER_BROKER
    assert reserve.client_room(50, 2) == 3000 - reserve.reserved(50, 2)
    # Beyond that, partitions cost nothing more: clients keep the other half.
    assert reserve.reserved(10_000, 0) == reserve.reserved(1_000, 0) == (
        fixed + reserve.segment_files)
    assert reserve.client_room(10_000, 0) == 3000 - fixed - (3000 - fixed) // 2
    big = DescriptorReserve.at_start(limit=20_000, listening_sockets=2, log_dirs=1,
                                     log_workers=2, cleaner_threads=1)
    assert (big.client_room(40_000, 2) or 0) > 9_000
    unlimited = DescriptorReserve(None, fixed)
    assert unlimited.client_room(50, 2) is None and unlimited.open_segments is None
    # A limit below the fixed needs leaves neither files nor clients anything.
    assert DescriptorReserve(100, fixed).client_room(10, 0) == 0


def test_the_room_is_said_in_one_line() -> None:
    reserve = DescriptorReserve(3000, 200)
    line = describe_room(reserve, 10, 0)
    assert f"leaves room for {3000 - reserve.reserved(10, 0)} client connections" in line
    assert "RLIMIT_NOFILE 3000" in line
    assert f"keep at most {reserve.open_segments} segments open" in line
    assert "not bounded" in describe_room(DescriptorReserve(None, 200), 10, 0)


def test_partitions_on_disk_counts_partition_directories(tmp_path: Path) -> None:
    for name in ("a-0", "a-1", "my-topic-12", "gone-0.abc-delete", "__consumer_offsets-3"):
        (tmp_path / name).mkdir()
    (tmp_path / "meta.properties").write_text("")
    (tmp_path / "not-a-partition").mkdir()
    assert partitions_on_disk([str(tmp_path), str(tmp_path / "missing")]) == 4


def test_a_connection_beyond_the_room_is_refused() -> None:
    room = [2]
    quotas = ConnectionQuotas(INT_MAX, INT_MAX, {}, client_room=lambda: room[0])

    async def run() -> list[bool]:
        seen = []
        for _ in range(3):
            await quotas.acquire_slot("PLAINTEXT")
            seen.append(quotas.room_for_client())
        return seen

    assert asyncio.run(run()) == [True, True, False]
    room[0] = 3  # fewer partitions: more room
    assert quotas.room_for_client()
    assert ConnectionQuotas(INT_MAX, INT_MAX, {}).room_for_client()


def test_a_fresh_rate_counts_over_ten_windows() -> None:
    """Kafka's Rate never measures over less than samples - 1 windows: with a quota of
    10/s, a fresh broker takes 100 connections at once before throttling; the 101st
    is 1% over, throttled 1% of the 10 s window."""
    rate = ConnectionRate(10)
    assert [rate.record(0) for _ in range(100)] == [0] * 100
    assert rate.record(0) == 100
    # Far over the quota: one window at most.
    assert ConnectionRate(1).record(0) == 0
    burst = ConnectionRate(1)
    assert max(burst.record(0) for _ in range(50)) == 1000


def test_a_steady_rate_under_the_quota_is_not_throttled() -> None:
    # As Kafka's, a new window counts its first event over the ten full ones before
    # it: a stream at exactly the quota is throttled a little at each boundary.
    rate = ConnectionRate(5)
    throttles = [rate.record(t) for t in range(0, 30_000, 250)]  # 4 per second
    assert max(throttles) == 0
    assert rate.rate(30_000) == pytest.approx(4, rel=0.1)
    # Twice the quota, steadily: throttled, and the old samples expire.
    fast = ConnectionRate(5)
    throttles = [fast.record(t) for t in range(0, 30_000, 100)]
    assert throttles[-1] > 0
    assert fast.rate(30_000) == pytest.approx(10, rel=0.1)
    assert fast.rate(100_000) == 0


def test_the_listener_rate_throttles_at_least_as_the_broker_s() -> None:
    now = [0]
    quotas = ConnectionQuotas(INT_MAX, INT_MAX, {}, max_creation_rate=INT_MAX,
                              listener_limits={"EXTERNAL": (INT_MAX, 1)},
                              time_ms=lambda: now[0])
    external = [quotas.record_connection("EXTERNAL") for _ in range(11)]
    internal = [quotas.record_connection("INTERNAL") for _ in range(11)]
    assert external[:10] == [0] * 10 and external[10] == 1000
    assert internal == [0] * 11
    broker_wide = ConnectionQuotas(INT_MAX, INT_MAX, {}, max_creation_rate=1,
                                   time_ms=lambda: now[0])
    assert [broker_wide.record_connection("X") for _ in range(11)][10] == 1000


def test_a_listener_s_max_connections_holds_only_its_own_accepts() -> None:
    quotas = ConnectionQuotas(INT_MAX, INT_MAX, {}, listener_limits={"A": (1, INT_MAX)})

    async def run() -> None:
        await quotas.acquire_slot("A")
        waiting = asyncio.ensure_future(quotas.acquire_slot("A"))
        await asyncio.wait_for(quotas.acquire_slot("B"), 1)  # B is not held back
        await asyncio.sleep(0.01)
        assert not waiting.done()
        quotas.release_slot("B")
        await asyncio.sleep(0.01)
        assert not waiting.done()
        quotas.release_slot("A")
        await asyncio.wait_for(waiting, 1)

    asyncio.run(run())
    assert quotas.total == 1


def test_per_listener_limits_are_read_with_kafka_s_names() -> None:
    cfg = load_config(None, [
        'listeners=["PLAINTEXT://127.0.0.1:0", "OTHER://127.0.0.1:0"]',
        'listener.security.protocol.map=["PLAINTEXT:PLAINTEXT", "OTHER:PLAINTEXT"]',
        "max.connection.creation.rate=50",
        "listener.name.other.max.connections=7",
        "listener.name.other.max.connection.creation.rate=3",
    ]).broker
    assert cfg.max_connection_creation_rate == 50
    assert cfg.listener_overrides["OTHER"] == {"max.connections": 7,
                                               "max.connection.creation.rate": 3}
    quotas = connection_quotas(cfg, lambda: 0, ["PLAINTEXT", "OTHER"])
    assert quotas._listeners["OTHER"].max_connections == 7
    assert quotas._listeners["OTHER"].creation_rate.quota == 3
    # The inter-broker listener (PLAINTEXT, from security.inter.broker.protocol) is
    # protected: other brokers get in whatever the clients hold.
    asyncio.run(quotas.acquire_slot("OTHER"))  # one accepted, and no room for it
    assert quotas.room_for_client("PLAINTEXT") and not quotas.room_for_client("OTHER")
    alone = connection_quotas(cfg, lambda: 0, ["PLAINTEXT"])
    asyncio.run(alone.acquire_slot("PLAINTEXT"))
    assert not alone.room_for_client("PLAINTEXT")
    assert load_config(None).broker.max_connection_creation_rate == INT_MAX


def test_the_inter_broker_listener_is_not_held_by_the_broker_wide_limits() -> None:
    now = [0]
    quotas = ConnectionQuotas(1, INT_MAX, {}, max_creation_rate=1,
                              protected_listener="INTERNAL", time_ms=lambda: now[0])

    async def run() -> None:
        await quotas.acquire_slot("EXTERNAL")
        # max.connections is reached; the inter-broker listener still gets its slots.
        await asyncio.wait_for(quotas.acquire_slot("INTERNAL"), 1)
        await asyncio.wait_for(quotas.acquire_slot("INTERNAL"), 1)
        held = asyncio.ensure_future(quotas.acquire_slot("EXTERNAL"))
        await asyncio.sleep(0.01)
        assert not held.done()
        held.cancel()

    asyncio.run(run())
    # Nor by the broker-wide creation rate.
    assert max(quotas.record_connection("INTERNAL") for _ in range(20)) == 0
    assert max(quotas.record_connection("EXTERNAL") for _ in range(20)) == 1000


@pytest.mark.parametrize("override", [
    "max.connection.creation.rate=-1",
    "listener.name.plaintext.max.connections=-1",
    "listener.name.plaintext.max.connection.creation.rate=x",
    "listener.name.plaintext.max.connections.per.ip=3",
])
def test_bad_limits_are_refused(override: str) -> None:
    with pytest.raises(ConfigError):
        load_config(None, [override])
