"""ClientQuotaManager: Kafka's order of precedence, who shares one rate, and Kafka's
throttle time, on a clock the test moves."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kernel.client_quotas import QuotaEntity, QuotaValues
from kernel.metrics import BrokerMetrics
from kernel.network.client_quota_manager import ClientQuotaManager
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import UNBOUNDED_MUTATION_QUOTA

P = "producer_byte_rate"
MB = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def manager(quotas: Mapping[QuotaEntity, QuotaValues]) -> tuple[ClientQuotaManager, Clock]:
    clock = Clock()
    return ClientQuotaManager(lambda: quotas, BrokerMetrics(1), clock), clock


def test_no_quota_never_throttles() -> None:
    m, _ = manager({})
    assert m.record(P, "User:alice", "c", 10**9) == 0
    assert m.max_bytes_in_window("consumer_byte_rate", "User:alice", "c") is None


def test_throttle_time_is_kafkas() -> None:
    # 11 MB at once against 1 MB/s: measured over the 10 s floor, 1.1 MB/s; the excess
    # (0.1 of the quota) times the 10 s window is 1000 ms.
    m, _ = manager({(("client-id", "c"),): {P: MB}})
    assert m.record(P, None, "c", int(10 * MB)) == 0
    assert m.record(P, None, "c", int(MB)) == 1000


def test_the_most_specific_entity_with_the_key_wins() -> None:
    quotas: dict[QuotaEntity, QuotaValues] = {
        (("client-id", "c"), ("user", "alice")): {P: 1 * MB},
        (("user", "alice"),): {P: 2 * MB, "consumer_byte_rate": 5 * MB},
        (("user", None),): {P: 3 * MB},
        (("client-id", None),): {P: 4 * MB},
    }
    m, _ = manager(quotas)
    window = 10  # seconds of quota one answer may carry
    assert m.max_bytes_in_window(P, "User:alice", "c") == 1 * MB * window
    assert m.max_bytes_in_window(P, "User:alice", "other") == 2 * MB * window
    assert m.max_bytes_in_window("consumer_byte_rate", "User:alice", "c") == 5 * MB * window
    assert m.max_bytes_in_window(P, "User:bob", "c") == 3 * MB * window
    del quotas[(("user", None),)]
    m, _ = manager(quotas)
    assert m.max_bytes_in_window(P, "User:bob", "c") == 4 * MB * window


def test_a_user_quota_is_shared_by_its_clients_a_client_quota_per_client() -> None:
    m, _ = manager({(("user", "alice"),): {P: MB}, (("client-id", None),): {P: MB}})
    assert m.record(P, "User:alice", "a", int(10 * MB)) == 0
    assert m.record(P, "User:alice", "b", int(MB)) == 1000  # one rate for alice
    assert m.record(P, "User:bob", "a", int(10 * MB)) == 0  # clients/<default>: per client
    assert m.record(P, "User:bob", "b", int(10 * MB)) == 0


def test_an_altered_quota_applies_to_the_rate_so_far_and_old_bytes_expire() -> None:
    current: list[Mapping[QuotaEntity, QuotaValues]] = [{(("client-id", "c"),): {P: MB}}]
    clock = Clock()
    m = ClientQuotaManager(lambda: current[0], BrokerMetrics(1), clock)
    assert m.record(P, None, "c", int(10 * MB)) == 0
    current[0] = {(("client-id", "c"),): {P: 2 * MB}}  # a change replaces the mapping
    assert m.record(P, None, "c", int(MB)) == 0  # 1.1 MB/s is under 2 MB/s
    clock.now += 12  # every window of those bytes has expired
    assert m.record(P, None, "c", int(19 * MB)) == 0


def test_a_request_quota_throttles_at_most_one_window() -> None:
    # request_percentage 10: 1 s of handler time per 10 s; 100 % for 20 s is far over.
    m, _ = manager({(("client-id", "c"),): {"request_percentage": 10.0}})
    assert m.applies("request_percentage") and not m.applies(P)
    assert m.record("request_percentage", None, "c", 2000.0) == 1000


M = "controller_mutation_rate"


def test_a_strict_mutation_quota_refuses_once_in_debt_and_throttles_until_paid() -> None:
    """Kafka's StrictControllerMutationQuota over its TokenBucket: a full bucket of 11
    windows of the rate; a topic is taken while the bucket is not in debt, even into
    debt; the next is refused, and the throttle is the debt over the rate."""
    m, clock = manager({(("client-id", "c"),): {M: 2.0}})
    quota = m.mutation_quota(None, "c", strict=True)
    quota.record(20)  # 22 -> 2
    quota.record(10)  # 2 -> -8: taken
    with pytest.raises(KafkaError) as refused:
        quota.record(1)
    assert refused.value.error_code == ErrorCode.throttling_quota_exceeded
    assert m.mutations_recorded(quota) == 4000  # 8 tokens at 2 a second
    clock.now += 4.5  # paid back, and 1 to spare
    again = m.mutation_quota(None, "c", strict=True)
    again.record(3)  # 1 -> -2: taken, and not throttled (nothing refused)
    assert m.mutations_recorded(again) == 0


def test_a_permissive_mutation_quota_takes_everything_and_throttles_in_debt() -> None:
    m, clock = manager({(("user", "alice"),): {M: 1.0}})
    quota = m.mutation_quota("User:alice", "any", strict=False)
    quota.record(11)  # 11 -> 0
    assert quota.throttle_ms() == 0
    quota.record(3)  # -> -3
    clock.now += 1.0  # the throttle left shrinks while the request is answered
    assert m.mutations_recorded(quota) == 2000
    assert m.mutation_quota("User:bob", "any", strict=True) is UNBOUNDED_MUTATION_QUOTA
