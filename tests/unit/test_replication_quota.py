"""Kafka's replication quota pieces: the throttled-replicas lists a broker reads its
partitions from, SimpleRate's window, and the quota check of one side."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernel.config import LONG_MAX, ConfigError, check_throttled_replicas
from kernel.replica.replication_quota import (
    ALL_REPLICAS,
    LEADER_REPLICATION,
    ReplicationQuotaManager,
    SimpleRate,
    throttled_partitions,
)

KEY = "leader.replication.throttled.replicas"


@pytest.mark.parametrize(("value", "broker", "expected"), [
    ("0:1,1:2,2:1", 1, frozenset({0, 2})),
    (" 0:1 , 3:1 ", 1, frozenset({0, 3})),
    ("0:1,1:2", 3, frozenset()),
    ("*", 7, ALL_REPLICAS),
    ("*,", 7, ALL_REPLICAS),
    ("0:1,,2:1", 1, frozenset({0, 2})),
])
def test_a_broker_throttles_the_partitions_its_entries_name(
        value: str, broker: int, expected: frozenset[int] | None) -> None:
    assert throttled_partitions(value, broker) == expected


@pytest.mark.parametrize("value", ["", "*", "0:1,1:2", "0:1,", "0:1,,1:2", " 0:1 , 1:2 "])
def test_kafka_4_3_accepts(value: str) -> None:
    check_throttled_replicas(KEY, value)


@pytest.mark.parametrize("value", ["*,0:1", "0:x", "1", "0:1;1:2", "-1:1"])
def test_kafka_4_3_refuses_in_its_words(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^Invalid value \[.*\] for configuration "
                       rf"{KEY}: {KEY} must be the literal '\*' or a list of replicas"):
        check_throttled_replicas(KEY, value)


def test_simple_rate_spans_at_least_one_window_and_forgets_old_ones() -> None:
    rate = SimpleRate(samples=3, window_ms=1000)
    rate.record(0, 1000)
    assert rate.measure(0) == 1000  # one window, not an instant
    rate.record(1500, 1000)
    assert rate.measure(2000) == 1000  # 2000 bytes over 2 s
    assert rate.measure(3500) == pytest.approx(1000 / 2)  # the window at 0 expired at 3 s
    assert rate.measure(5000) == 0


def test_quota_exceeded_only_above_the_bound_and_never_unbounded() -> None:
    now = [100.0]
    quota = ReplicationQuotaManager(LEADER_REPLICATION, 1, clock=lambda: now[0])
    quota.record(5_000_000)
    assert not quota.is_quota_exceeded()  # Long.MAX_VALUE: no bound
    quota.configure(1_000_000, 11, 1)
    assert quota.is_quota_exceeded()
    now[0] += 5
    assert not quota.is_quota_exceeded()  # 5 MB over 5 s is the bound, not above it
    quota.configure(LONG_MAX, 11, 1)
    assert not quota.is_quota_exceeded()


def test_throttled_partitions_follow_the_topic_configs() -> None:
    quota = ReplicationQuotaManager(LEADER_REPLICATION, 2)
    topic = SimpleNamespace(configs={KEY: "0:1,1:2"})
    quota.follow_topics({"t": topic})
    assert (quota.is_throttled("t", 0), quota.is_throttled("t", 1)) == (False, True)
    quota.follow_topics({"t": SimpleNamespace(configs={KEY: "*"})})
    assert quota.is_throttled("t", 0) and not quota.is_throttled("other", 0)
    quota.follow_topics({"t": SimpleNamespace(configs={})})
    assert not quota.is_throttled("t", 1)
