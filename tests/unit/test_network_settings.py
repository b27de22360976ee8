"""The network settings of issue 11 (queued.max.request.bytes, max.connections,
max.connections.per.ip and its overrides): Kafka's defaults and checks, and one
departure, a bounded queued.max.request.bytes."""

from __future__ import annotations

import re

import pytest

from kernel.config import ConfigError, load_config
from kernel.network.memory_pool import preauth_share
from kernel.network.quotas import ConnectionQuotas, normalize_address, parse_overrides
from kernel.server import connection_quotas, memory_pool

INT_MAX = 2**31 - 1


def test_defaults() -> None:
    b = load_config(None).broker
    assert b.max_connections == INT_MAX
    assert b.max_connections_per_ip == INT_MAX
    assert b.max_connections_per_ip_overrides == []
    # Kafka's default is -1 (unbounded); the issue asks for a bound by default.
    assert b.queued_max_request_bytes == 256 * 1024 * 1024
    assert memory_pool(b).size == 256 * 1024 * 1024


def test_minus_one_is_an_unbounded_pool() -> None:
    b = load_config(None, ["queued.max.request.bytes=-1"]).broker
    pool = memory_pool(b)
    assert pool.size is None
    pool.allocate(10**12)
    assert not pool.exhausted


@pytest.mark.parametrize(("override", "message"), [
    ("queued.max.request.bytes=-2", "-1 (unbounded) or a value >= 1"),
    ("max.connections=-1", "a value >= 0"),
    ("max.connections.per.ip.overrides=host", "a list of host:count items"),
    ("max.connections.per.ip.overrides=host:x", "a list of host:count items"),
])
def test_values_are_checked(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])


def test_the_pool_holds_at_least_one_largest_request() -> None:
    b = load_config(None, ["queued.max.request.bytes=1000",
                           "socket.request.max.bytes=2000"]).broker
    with pytest.raises(ConfigError, match="at least socket.request.max.bytes"):
        memory_pool(b)


def test_zero_per_ip_needs_overrides() -> None:
    b = load_config(None, ["max.connections.per.ip=0"]).broker
    with pytest.raises(ConfigError, match="only if max.connections.per.ip.overrides"):
        connection_quotas(b)
    b = load_config(None, ["max.connections.per.ip=0",
                           "max.connections.per.ip.overrides=127.0.0.1:5"]).broker
    quotas = connection_quotas(b)
    assert quotas.limit_for("127.0.0.1") == 5
    assert quotas.limit_for("10.0.0.1") == 0


def test_overrides_in_kafka_format() -> None:
    assert parse_overrides(["hostName:100", "127.0.0.1:200", "[::1]:3"]) == {
        "hostName": 100, "127.0.0.1": 200, "::1": 3}
    quotas = ConnectionQuotas(INT_MAX, 1, {"127.0.0.1": 2})
    assert quotas.admit("127.0.0.1") and quotas.admit("127.0.0.1")
    assert not quotas.admit("127.0.0.1")
    assert quotas.admit("10.0.0.1") and not quotas.admit("10.0.0.1")
    quotas.closed("127.0.0.1")
    assert quotas.count("127.0.0.1") == 1
    assert normalize_address("::ffff:127.0.0.1") == "127.0.0.1"


def test_sasl_server_max_receive_size_is_kafkas() -> None:
    """Kafka's INT with no range: 524288 by default, -1 unbounded (NetworkReceive's
    UNLIMITED); a value that is not a 32-bit int is refused."""
    assert load_config(None).broker.sasl_server_max_receive_size == 524288
    assert load_config(None, ["sasl.server.max.receive.size=-1"]).broker \
        .sasl_server_max_receive_size == -1
    with pytest.raises(ConfigError, match=re.escape("a value <= 2147483647")):
        load_config(None, ["sasl.server.max.receive.size=2147483648"])


def test_the_pre_authentication_share() -> None:
    """1/16 of queued.max.request.bytes (16 MiB when unbounded), at least two frames of
    sasl.server.max.receive.size."""
    mib = 1024 * 1024
    assert preauth_share(256 * mib, 524288) == 16 * mib
    assert preauth_share(-1, 524288) == 16 * mib
    assert preauth_share(100 * mib, 10 * mib) == 20 * mib
    assert preauth_share(100 * mib, -1) == 100 * mib // 16
