"""The per-request metrics, counted in plain numbers, read as Prometheus families."""

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kernel.metrics import BrokerMetrics

PRODUCE, FETCH = 0, 1


def samples(metrics: BrokerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_requests_latency_and_bytes_by_api() -> None:
    metrics = BrokerMetrics(1)
    metrics.request_done(PRODUCE, 0.0001, 100, 50)  # on a bound: counted in its bucket
    metrics.request_done(PRODUCE, 0.003, 200, 0)    # acks=0: nothing sent back
    metrics.request_done(FETCH, 31.0, 10, 1000)     # above every bound: +Inf only
    s = samples(metrics)
    assert s[("kafkernel_requests_total", (("api", "produce"),))] == 2
    assert s[("kafkernel_requests_total", (("api", "fetch"),))] == 1
    bucket = "kafkernel_request_latency_seconds_bucket"
    assert s[(bucket, (("api", "produce"), ("le", "0.0001")))] == 1
    assert s[(bucket, (("api", "produce"), ("le", "0.0025")))] == 1
    assert s[(bucket, (("api", "produce"), ("le", "0.005")))] == 2
    assert s[(bucket, (("api", "produce"), ("le", "+Inf")))] == 2
    assert s[(bucket, (("api", "fetch"), ("le", "30.0")))] == 0
    assert s[(bucket, (("api", "fetch"), ("le", "+Inf")))] == 1
    assert s[("kafkernel_request_latency_seconds_count", (("api", "produce"),))] == 2
    assert abs(s[("kafkernel_request_latency_seconds_sum", (("api", "produce"),))]
               - 0.0031) < 1e-12
    # Size prefixes count as received bytes.
    assert s[("kafkernel_network_bytes_in_total", ())] == 100 + 200 + 10 + 3 * 4
    assert s[("kafkernel_network_bytes_out_total", ())] == 1050


def test_two_brokers_count_apart() -> None:
    one, other = BrokerMetrics(1), BrokerMetrics(2)
    one.request_done(PRODUCE, 0.001, 10, 10)
    assert ("kafkernel_requests_total", (("api", "produce"),)) not in samples(other)
