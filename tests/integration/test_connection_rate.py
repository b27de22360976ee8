"""KIP-612's max.connection.creation.rate and a listener's own max.connections
(Kafka's ConnectionQuotas): over the rate the acceptor holds new connections rather
than refusing them; at a listener's limit its new clients wait in the backlog."""

from __future__ import annotations

from collections.abc import Callable

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import (
    api_versions_answered,
    connect,
    decode_response,
    recv_frame,
)


def test_over_the_creation_rate_connections_are_held_not_refused(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    b = broker_factory({"max.connection.creation.rate": 2})
    assert b.broker is not None
    registry = b.broker.metrics.registry
    socks = []
    try:
        # A fresh rate is measured over 10 s: 20 connections are within 2/s, each one
        # after that is held 500 ms, then a whole window (1 s).
        for i in range(24):
            sock = connect(b.bootstrap)
            socks.append(sock)
            assert api_versions_answered(sock, i, timeout=10.0)
        throttled = registry.get_sample_value("kafkernel_connections_throttled_total",
                                              {"listener": "PLAINTEXT"})
        held = registry.get_sample_value("kafkernel_connection_throttle_seconds_total",
                                         {"listener": "PLAINTEXT"})
        assert throttled is not None and throttled >= 3
        assert held is not None and held >= 2.5
        assert registry.get_sample_value("kafkernel_connections_rejected_total", {
            "listener": "PLAINTEXT", "reason": "file_descriptors"}) is None
    finally:
        for sock in socks:
            sock.close()


def test_a_listener_s_max_connections_holds_its_new_clients_in_the_backlog(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    b = broker_factory({"listener.name.plaintext.max.connections": 1})
    assert b.broker is not None
    quotas = b.broker.connection_quotas
    first = connect(b.bootstrap)
    try:
        assert api_versions_answered(first, 1, timeout=10.0)
        with connect(b.bootstrap) as second:
            assert not api_versions_answered(second, 2, timeout=0.5)
            first.close()
            frame = recv_frame(second)
            assert frame is not None and decode_response(frame, 18, 0)[0] == 2
        assert quotas.total <= 1
    finally:
        first.close()
