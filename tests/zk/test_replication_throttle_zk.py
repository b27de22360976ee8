"""Replication throttling (KIP-73) as Kafka's kafka-reassign-partitions drives it, on
brokers on metadata_zk: ``--throttle`` bounds a new replica's catch-up to the rate it
sets, ``--verify`` removes the throttle once the move completes, and an unthrottled move
then catches up many times faster."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from kernel.config import LONG_MAX
from kernel.testing.embedded import EmbeddedBroker
from reference import tools
from tests.zk.test_controller_zk import REPLICATION, _alter, _create, _wait, backend, partition
from tests.zk.test_replication_zk import _replica

THROTTLE = 1_000_000  # bytes/s, as --throttle takes it
# Fetches of at most 128 KB (batches of at most 64 KB): the quota lets bytes through a
# fetch at a time, so smaller steps make a rate measured over a few seconds steadier.
FETCH_MAX_BYTES = 131072
VALUE = 10_000
RECORDS = 2_000  # 20 MB
MEASURE_S = 8.0
THROTTLED_KEYS = ("leader.replication.throttled.replicas",
                  "follower.replication.throttled.replicas")
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def ok(result: tools.ToolResult) -> str:
    assert result.returncode == 0, result.describe()
    return result.stdout


def _cluster(factory: Callable[..., EmbeddedBroker], *ids: int) -> list[EmbeddedBroker]:
    brokers = [factory({"broker.id": i, **REPLICATION, "replica.fetch.max.bytes": FETCH_MAX_BYTES})
               for i in ids]
    _wait(lambda: set(backend(brokers[0]).image.brokers) == set(ids), "every broker")
    return brokers


def _size(b: EmbeddedBroker, topic: str) -> int:
    replica = _replica(b, topic)
    return 0 if replica is None else int(replica.log.size)


def _fill(bootstrap: str, topic: str, records: int = RECORDS) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                         "batch.size": 65536,
                         "compression.type": "none", "message.timeout.ms": 60000})
    errors: list[object] = []
    value = bytes(range(256)) * (VALUE // 256) + bytes(VALUE % 256)
    for _ in range(records):
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda err, _m: err is None or errors.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors


def _reassign(b: EmbeddedBroker, tmp_path: Path, replicas: list[int], *args: str) -> str:
    plan = tmp_path / f"plan-{'-'.join(map(str, replicas))}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "big", "partition": 0, "replicas": replicas}]}))
    return ok(tools.run(tools.REASSIGN_PARTITIONS_COMMAND, "--bootstrap-server", b.bootstrap,
                        "--reassignment-json-file", str(plan), *args))


def _catch_up_rate(b: EmbeddedBroker, target: int, seconds: float) -> float:
    """Bytes/s the new replica on ``b`` grows at, from a second after its first bytes
    (the quota's first window lets a window's worth through at once, as Kafka's
    SimpleRate does), over ``seconds`` or until it holds ``target`` bytes."""
    _wait(lambda: _size(b, "big") > 0, "the new replica's first bytes", timeout=30)
    time.sleep(1.0)
    assert _size(b, "big") < target, "caught up within a second of its first bytes"
    start, started = _size(b, "big"), time.monotonic()
    while time.monotonic() - started < seconds and _size(b, "big") < target:
        time.sleep(0.05)
    return (_size(b, "big") - start) / (time.monotonic() - started)


class Sampler(threading.Thread):
    """Samples the size of the replica on ``b`` every 10 ms, from before its move starts
    (an unthrottled one may be over before the tool returns)."""

    def __init__(self, b: EmbeddedBroker, target: int) -> None:
        super().__init__(daemon=True)
        self.b, self.target = b, target
        self.samples: list[tuple[float, int]] = []

    def run(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            size = _size(self.b, "big")
            self.samples.append((time.monotonic(), size))
            if size >= self.target:
                return
            time.sleep(0.01)

    def rate(self) -> float:
        """Bytes/s from the first bytes to the last."""
        self.join(35)
        first = next((t, size) for t, size in self.samples if size > 0)
        last = self.samples[-1]
        assert last[1] >= self.target, "the new replica did not catch up"
        return (last[1] - first[1]) / max(last[0] - first[0], 0.01)


def test_reassignment_throttle_bounds_catch_up_until_verify_removes_it(
        zk_broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path) -> None:
    b1, b2, b3 = _cluster(zk_broker_factory, 1, 2, 3)
    _create(b1, "big", {0: (1,)})
    _wait(lambda: partition(b1, "big").leader == 1 and _replica(b1, "big") is not None,
          "the topic on broker 1")
    _fill(b1.bootstrap, "big")
    total = _size(b1, "big")
    assert total >= RECORDS * VALUE

    out = _reassign(b1, tmp_path, [1, 2], "--execute", "--throttle", str(THROTTLE))
    assert f"The inter-broker throttle limit was set to {THROTTLE} B/s" in out, out
    configs = backend(b2).image.topics["big"].configs
    assert (configs.get(THROTTLED_KEYS[0]), configs.get(THROTTLED_KEYS[1])) == ("0:1", "0:2")
    rate = _catch_up_rate(b2, total, MEASURE_S)
    # Within 30% of the throttle (measured at 0.99-1.01 MB/s; unthrottled, the replica
    # holds all 20 MB within the first second, which _catch_up_rate refuses).
    assert 0.7 * THROTTLE <= rate <= 1.3 * THROTTLE, f"{rate:.0f} B/s"
    assert b1.broker is not None and b2.broker is not None
    leader = b1.broker.metrics.registry.get_sample_value
    follower = b2.broker.metrics.registry.get_sample_value
    held = [(leader("kafkernel_replication_quota_throttled_total",
                    {"type": "LeaderReplication"}) or 0),
            (follower("kafkernel_replication_quota_throttled_total",
                      {"type": "FollowerReplication"}) or 0)]
    assert sum(held) > 0, held
    assert (leader("kafkernel_replication_byte_rate", {"type": "LeaderReplication"}) or 0) \
        <= 1.5 * THROTTLE

    _wait(lambda: not partition(b1, "big").reassigning, "the throttled move to complete",
          timeout=40)
    out = _reassign(b1, tmp_path, [1, 2], "--verify")
    assert "Reassignment of partition big-0 is completed." in out, out
    for b in (b1, b2, b3):  # --verify cleared the topic's and the brokers' throttles
        _wait(lambda b=b: not (set(THROTTLED_KEYS) & set(backend(b).image.topics["big"].configs)
                               or any(set(RATE_KEYS) & set(c) for c in
                                      backend(b).image.broker_configs.values())),
              "the throttles to be removed")
    assert b1.broker.replicas.replication_quotas.leader.quota == LONG_MAX

    sampler = Sampler(b3, total)
    sampler.start()
    _reassign(b1, tmp_path, [1, 2, 3], "--execute")
    fast = sampler.rate()
    assert fast >= 3 * THROTTLE, f"{fast:.0f} B/s"
    _wait(lambda: partition(b1, "big").replicas == (1, 2, 3)
          and not partition(b1, "big").reassigning, "the unthrottled move to complete")


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_each_side_alone_bounds_catch_up(
        zk_broker_factory: Callable[..., EmbeddedBroker], side: str) -> None:
    """Only the leader's rate (its answers to followers out of the ISR), or only the
    follower's (its fetches of partitions not caught up), each bounds the move alone."""
    b1, b2 = _cluster(zk_broker_factory, 1, 2)
    _create(b1, "big", {0: (1,)}, {f"{side}.replication.throttled.replicas": "*"})
    _wait(lambda: partition(b1, "big").leader == 1 and _replica(b1, "big") is not None,
          "the topic on broker 1")
    _fill(b1.bootstrap, "big", records=700)  # 7 MB
    total = _size(b1, "big")
    throttled = b1 if side == "leader" else b2
    assert throttled.broker is not None
    throttled.call(backend(throttled).set_broker_configs(
        throttled.broker.config.broker_id, {f"{side}.replication.throttled.rate": str(THROTTLE)}))
    quotas = throttled.broker.replicas.replication_quotas
    _wait(lambda: getattr(quotas, side).quota == THROTTLE, "the rate applied")
    assert _alter(b1, {("big", 0): [1, 2]}) == {("big", 0): ErrorCode.none}
    rate = _catch_up_rate(b2, total, 4.0)
    assert 0.7 * THROTTLE <= rate <= 1.3 * THROTTLE, f"{rate:.0f} B/s"
    held = throttled.broker.metrics.registry.get_sample_value(
        "kafkernel_replication_quota_throttled_total",
        {"type": f"{side.capitalize()}Replication"})
    assert held and held > 0
    _wait(lambda: not partition(b1, "big").reassigning, "the move to complete")
