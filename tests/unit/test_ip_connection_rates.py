"""KIP-612's per-IP connection rates from the client quotas: which entity rates an
address, a host name entity resolved, an alteration seen by the next connection, and a
throttled connection taken back from every rate it was counted in (Kafka's
ConnectionQuotas.recordIpConnectionMaybeThrottle), on a clock the test moves."""

from __future__ import annotations

from kernel.client_quotas import QuotaEntity, QuotaValues
from kernel.config import INT_MAX
from kernel.network.quotas import DEFAULT_IP, ConnectionQuotas, IpConnectionRates

RATE = "connection_creation_rate"


def test_the_address_entity_wins_over_the_default_and_host_names_resolve() -> None:
    quotas: dict[QuotaEntity, QuotaValues] = {
        (("ip", "localhost"),): {RATE: 3.0},
        (("ip", None),): {RATE: 7.0},
        (("client-id", "c"),): {"producer_byte_rate": 9.0},
    }
    rates = IpConnectionRates(lambda: quotas)
    assert rates.quota_for("127.0.0.1") == (3, "127.0.0.1")
    assert rates.quota_for("10.1.2.3") == (7, DEFAULT_IP)
    quotas = {}  # altered: the mapping is replaced
    assert rates.quota_for("127.0.0.1") is None


def test_a_throttled_connection_is_counted_nowhere() -> None:
    now = [1_000_000]
    current: dict[QuotaEntity, QuotaValues] = {(("ip", "10.0.0.1"),): {RATE: 1.0}}
    quotas = ConnectionQuotas(INT_MAX, INT_MAX, {}, max_creation_rate=2,
                              ip_quotas=lambda: current, time_ms=lambda: now[0])
    # A fresh rate is measured over 10 s: 10 connections fit in 1/s, the 11th does not.
    for _ in range(10):
        assert quotas.record_connection() == 0
        assert quotas.record_ip_connection("", "10.0.0.1") == (0, "10.0.0.1")
    assert quotas.record_connection() == 0
    throttle_ms, entity = quotas.record_ip_connection("", "10.0.0.1")
    assert entity == "10.0.0.1" and 0 < throttle_ms <= 1000
    # Taken back from the broker-wide rate too: 20 connections fit in its 2/s, counted
    # 10 so far (the throttled one not), so 10 more pass from other addresses.
    for _ in range(10):
        assert quotas.record_connection() == 0
        assert quotas.record_ip_connection("", "10.0.0.2") == (0, "")
    assert quotas.record_connection() > 0
