"""KIP-612's per-IP connection_creation_rate (an ``ip`` client quota entity, or the ip
default), on a real broker over real sockets: connections from an address over its
quota are accepted and closed after the throttle time, unanswered, so the rate of
connections that get an answer stays within the quota; another address (127.0.0.2 as
the source) is unaffected; an alteration applies to the next connection, and the
quota holds after a restart (it is kept in the metadata)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from kio.schema.api_versions.v0.request import ApiVersionsRequest

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import decode_response, encode_request, recv_frame
from tests.reference.conformance import body, part

RATE = 2  # connections/s: measured over at least 10 s, so 20 come at once, then throttled
ATTEMPTS = 30


def _answered(bootstrap: str, source: str) -> bool:
    """A new connection from ``source`` sends ApiVersions: True when answered, False
    when the broker closes it unanswered (a throttled connection)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10,
                                  source_address=(source, 0)) as sock:
        sock.sendall(encode_request(ApiVersionsRequest(), correlation_id=5))
        try:
            frame = recv_frame(sock)
        except ConnectionResetError:
            return False
        if frame is None:
            return False
        assert decode_response(frame, 18, 0)[0] == 5
        return True


def _set_rates(bootstrap: str, rates: dict[str | None, float | None],
               source: str = "127.0.0.1") -> None:
    """AlterClientQuotas of ip entities (None: the default; a None rate removes it),
    sent from ``source`` (an address whose connections are not throttled)."""
    request = body(49, 1, validate_only=False, entries=tuple(
        part(49, 1, "EntryData",
             entity=(part(49, 1, "EntityData", entity_type="ip", entity_name=ip),),
             ops=(part(49, 1, "OpData", key="connection_creation_rate",
                       value=rate or 0.0, remove=rate is None),))
        for ip, rate in rates.items()))
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10,
                                  source_address=(source, 0)) as sock:
        sock.sendall(encode_request(request, correlation_id=6))
        frame = recv_frame(sock)
    assert frame is not None
    answer = decode_response(frame, 49, 1)[1]
    assert all(e.error_code == 0 for e in answer.entries), answer


def _burst(bootstrap: str, source: str, attempts: int = ATTEMPTS) -> tuple[int, float]:
    """Connections opened one after another as fast as each is answered or closed: how
    many were answered, and the seconds the burst took."""
    started = time.monotonic()
    answered = sum(_answered(bootstrap, source) for _ in range(attempts))
    return answered, time.monotonic() - started


def _within_quota(answered: int, seconds: float) -> bool:
    # Kafka's rate is never measured over less than 10 s; one connection of slack.
    return answered <= RATE * max(seconds, 10.0) + 1


def test_an_ip_quota_throttles_that_address_only(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    b = broker_factory()
    assert b.broker is not None
    registry = b.broker.metrics.registry
    idle = b.broker.connection_quotas.total  # the acceptor's slot for its next client
    _set_rates(b.bootstrap, {"127.0.0.1": float(RATE)})

    answered, seconds = _burst(b.bootstrap, "127.0.0.1")
    assert answered >= RATE * 10 - 1, (answered, seconds)  # a fresh rate takes 10 s worth
    assert answered < ATTEMPTS and _within_quota(answered, seconds), (answered, seconds)
    throttled = registry.get_sample_value("kafkernel_ip_connections_throttled_total",
                                          {"listener": "PLAINTEXT", "ip": "127.0.0.1"})
    assert throttled == ATTEMPTS - answered, throttled
    held = registry.get_sample_value("kafkernel_ip_connection_throttle_seconds_total",
                                     {"listener": "PLAINTEXT", "ip": "127.0.0.1"})
    assert held is not None and held > 0
    # Another address has no quota: every connection is answered at once.
    assert _burst(b.bootstrap, "127.0.0.2")[0] == ATTEMPTS
    # Every slot comes back, the throttled connections' too.
    deadline = time.monotonic() + 10
    while b.broker.connection_quotas.total > idle and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.broker.connection_quotas.total == idle

    # Removed: the next connections are answered again.
    _set_rates(b.bootstrap, {"127.0.0.1": None}, source="127.0.0.2")
    assert _burst(b.bootstrap, "127.0.0.1", 10)[0] == 10


def test_the_ip_default_applies_to_every_address_and_survives_a_restart(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    b = broker_factory()
    _set_rates(b.bootstrap, {None: float(RATE), "127.0.0.2": 1000.0})
    b.restart()
    answered, seconds = _burst(b.bootstrap, "127.0.0.1")
    assert answered < ATTEMPTS and _within_quota(answered, seconds), (answered, seconds)
    # The address's own entity wins over the default.
    assert _burst(b.bootstrap, "127.0.0.2")[0] == ATTEMPTS
