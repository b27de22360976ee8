"""Hostile input at the network layer: memory follows the bytes that arrive, request
bytes in flight are bounded (queued.max.request.bytes), connection limits behave as
Kafka's (max.connections, max.connections.per.ip and its overrides), and a TLS client
on a plaintext port is named once and closed."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3

from bench.procfs import sample
from kernel.config import ConfigError
from kernel.testing.embedded import EmbeddedBroker
from tests.broker_process import free_port, served
from tests.integration.wire import (
    api_versions_answered,
    closed_by_broker,
    connect,
    decode_response,
    encode_request,
    recv_frame,
)

MIB = 1024 * 1024


def _eventually(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def _rss_mib(pid: int) -> float:
    s = sample(pid)
    assert s is not None
    return s.rss_kb / 1024


def _settled_rss_mib(pid: int, seconds: float = 1.5) -> float:
    time.sleep(seconds)
    return _rss_mib(pid)


@pytest.fixture
def served_broker(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """``kafkernel serve`` as a subprocess: its RSS is its own, not the test's."""
    port = free_port()
    with served(tmp_path / "data", port) as proc:
        bootstrap = f"127.0.0.1:{port}"
        with connect(bootstrap) as sock:
            assert api_versions_answered(sock, 1)
        yield proc.pid, bootstrap


def test_a_length_prefix_reserves_only_the_bytes_that_arrive(
    served_broker: tuple[int, str],
) -> None:
    pid, bootstrap = served_broker
    before = _settled_rss_mib(pid)
    claims = [connect(bootstrap) for _ in range(8)]
    try:
        for sock in claims:
            sock.sendall(struct.pack(">i", 100_000_000) + b"\x00\x00\x00\x00")
        # Each claim is 100 MB; before the fix the broker reserved all of it.
        assert _settled_rss_mib(pid) - before < 30
        for sock in claims:
            sock.sendall(b"\x00" * MIB)
        assert _settled_rss_mib(pid) - before < 8 + 30
        with connect(bootstrap) as sock:
            assert api_versions_answered(sock, 2)
    finally:
        for sock in claims:
            sock.close()


def test_idle_memory_comes_back_after_2000_connections(
    served_broker: tuple[int, str],
) -> None:
    pid, bootstrap = served_broker
    before = _settled_rss_mib(pid)
    opened = []
    try:
        for i in range(2000):
            sock = connect(bootstrap)
            opened.append(sock)
            assert api_versions_answered(sock, i)
        # Before the fix each connection held a 256 KiB receive buffer (~500 MB).
        assert _settled_rss_mib(pid) - before < 100
    finally:
        for sock in opened:
            sock.close()
    assert _settled_rss_mib(pid, 3.0) - before < 50
    with connect(bootstrap) as sock:
        assert api_versions_answered(sock, 3)


def test_a_partial_frame_is_the_connections_own_while_others_read(
    broker: EmbeddedBroker,
) -> None:
    """Connections read into their listener's shared buffer: what is left of a frame
    after a read must be moved out before another connection's read lands there."""
    first, second = (
        encode_request(ApiVersionsV3(client_software_name="partial",
                                     client_software_version="1"), correlation_id=c)
        for c in (7, 8)
    )
    for cut in (3, len(second) // 2):  # inside the size prefix; inside the frame
        with connect(broker.bootstrap) as partial, connect(broker.bootstrap) as other:
            # Behind a whole frame, so the rest sits mid-buffer, where others' bytes land.
            partial.sendall(first + second[:cut])
            answer = recv_frame(partial)
            assert answer is not None and decode_response(answer, 18, 3)[0] == 7
            # Longer than what the partial connection sent: it covers those bytes.
            other.sendall(encode_request(ApiVersionsV3(
                client_software_name="o" * 200, client_software_version="1"), correlation_id=9))
            answer = recv_frame(other)
            assert answer is not None and decode_response(answer, 18, 3)[0] == 9
            partial.sendall(second[cut:])
            answer = recv_frame(partial)
            assert answer is not None and decode_response(answer, 18, 3)[0] == 8


def test_queued_max_request_bytes_stops_reading_and_resumes(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    b = broker_factory({"socket.request.max.bytes": MIB, "queued.max.request.bytes": MIB})
    assert b.broker is not None
    pool = b.broker.memory_pool
    with connect(b.bootstrap) as waiting:
        # Two clients hold 600 KB each of frames that are not whole: the pool is full.
        partial = [connect(b.bootstrap) for _ in range(2)]
        for sock in partial:
            sock.sendall(struct.pack(">i", 900_000) + b"\x00" * 600_000)
        _eventually(lambda: pool.used >= 1_200_000)
        registry = b.broker.metrics.registry
        assert registry.get_sample_value("kafkernel_request_pool_used_bytes") == pool.used
        # A connection that reads while the pool is exhausted is muted after that read.
        assert api_versions_answered(waiting, 10)
        assert not api_versions_answered(waiting, 11, timeout=0.5), "read while the pool was full"
        for sock in partial:
            sock.close()
        # The bytes of the closed connections come back, and reading resumes.
        sock_frame = recv_frame(waiting)
        assert sock_frame is not None and decode_response(sock_frame, 18, 0)[0] == 11
        assert api_versions_answered(waiting, 12)
    _eventually(lambda: pool.used == 0)


def test_an_exhausted_pool_lets_one_muted_frame_finish(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    """Partial frames are not reservations: if every connection holding one were muted,
    none could finish and free the pool. One of them is always let through."""
    b = broker_factory({"socket.request.max.bytes": MIB, "queued.max.request.bytes": MIB})
    assert b.broker is not None
    pool = b.broker.memory_pool

    def big_request(correlation_id: int) -> bytes:
        body = ApiVersionsV3(client_software_name="a" * 900_000, client_software_version="1")
        return encode_request(body, correlation_id=correlation_id)

    frames = {21: big_request(21), 22: big_request(22)}
    a, b_sock = connect(b.bootstrap), connect(b.bootstrap)
    try:
        a.sendall(frames[21][:600_000])
        _eventually(lambda: pool.used >= 600_000 - 4)
        b_sock.sendall(frames[22][:600_000])  # the pool is now exhausted
        _eventually(lambda: pool.used >= 1_200_000 - 8)
        a.sendall(frames[21][600_000:700_000])  # a reads once more, and is muted
        _eventually(lambda: pool.used >= 1_300_000 - 8)
        b_sock.sendall(frames[22][600_000:])
        a.sendall(frames[21][700_000:])
        for sock, correlation_id in ((b_sock, 22), (a, 21)):
            sock.settimeout(10)
            frame = recv_frame(sock)
            assert frame is not None
            assert decode_response(frame, 18, 3)[0] == correlation_id
    finally:
        a.close()
        b_sock.close()
    _eventually(lambda: pool.used == 0)


def test_max_connections_per_ip_closes_the_extra_connection(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    b = broker_factory({"max.connections.per.ip": 2})
    first, second = connect(b.bootstrap), connect(b.bootstrap)
    try:
        assert api_versions_answered(first, 1) and api_versions_answered(second, 2)
        with connect(b.bootstrap) as third:
            assert closed_by_broker(third)
        assert api_versions_answered(first, 3) and api_versions_answered(second, 4)
        assert b.broker is not None
        assert b.broker.metrics.registry.get_sample_value(
            "kafkernel_connections_rejected_total",
            {"listener": "PLAINTEXT", "reason": "max_connections_per_ip"}) == 1
        first.close()
        # The count follows closes: a new connection gets the free place.
        _eventually(lambda: b.broker is not None
                    and b.broker.connection_quotas.count("127.0.0.1") == 1)
        with connect(b.bootstrap) as again:
            assert api_versions_answered(again, 5)
    finally:
        first.close()
        second.close()


def test_max_connections_per_ip_overrides_name_addresses_and_hosts(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    b = broker_factory({"max.connections.per.ip": 1,
                        "max.connections.per.ip.overrides": "localhost:3,10.9.9.9:0"})
    socks = [connect(b.bootstrap) for _ in range(3)]
    try:
        for i, sock in enumerate(socks):
            assert api_versions_answered(sock, i)
        with connect(b.bootstrap) as fourth:
            assert closed_by_broker(fourth)
    finally:
        for sock in socks:
            sock.close()


def test_max_connections_blocks_accepting_until_one_closes(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    b = broker_factory({"max.connections": 2})
    first, second = connect(b.bootstrap), connect(b.bootstrap)
    try:
        assert api_versions_answered(first, 1) and api_versions_answered(second, 2)
        # The third waits in the backlog: connected, neither served nor closed.
        with connect(b.bootstrap) as third:
            assert not api_versions_answered(third, 3, timeout=0.5)
            first.close()
            frame = recv_frame(third)
            assert frame is not None and decode_response(frame, 18, 0)[0] == 3
            assert api_versions_answered(second, 4)
    finally:
        first.close()
        second.close()


def test_a_tls_client_on_a_plaintext_port_is_logged_once_and_closed(
    broker_factory: Callable[..., EmbeddedBroker], capsys: pytest.CaptureFixture[str],
) -> None:
    b = broker_factory()
    host, port = b.bootstrap.rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    for _ in range(5):
        with (socket.create_connection((host, int(port)), timeout=5) as raw,
              pytest.raises((ssl.SSLError, OSError))):
            context.wrap_socket(raw, server_hostname=host).close()
    with connect(b.bootstrap) as sock:
        assert api_versions_answered(sock, 1)
    logged = capsys.readouterr().err.splitlines()
    tls = [line for line in logged if "TLS" in line]
    assert len(tls) == 1, logged
    assert b.broker is not None
    assert b.broker.metrics.registry.get_sample_value(
        "kafkernel_connections_rejected_total",
        {"listener": "PLAINTEXT", "reason": "tls_on_plaintext"}) == 5
    assert "127.0.0.1" in tls[0]
    assert not [line for line in logged if "request size" in line], logged


def test_a_listener_on_all_interfaces_serves_and_a_busy_port_is_named(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    port = free_port()
    broker_factory({"listeners": [f"PLAINTEXT://:{port}"]})
    with connect(f"127.0.0.1:{port}") as sock:
        assert api_versions_answered(sock, 1)
    second = EmbeddedBroker({"listeners": [f"PLAINTEXT://127.0.0.1:{port}"]}, data_dir=tmp_path)
    with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port} \\(PLAINTEXT\\)"):
        second.start()


def _alter_broker_configs(client: Any, broker_id: str, **changes: str | None) -> None:
    """Kafka's dynamic broker configs through the AdminClient, for one broker: a value
    sets, None deletes."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(name.replace("_", "."), value, incremental_operation=(
        AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET))
        for name, value in changes.items()]
    resource = ConfigResource(ResourceType.BROKER, broker_id, incremental_configs=entries)
    client.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)


def test_connection_limits_change_at_runtime(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    """max.connections.per.ip (and the other broker-wide limits) are dynamic, as in
    Kafka: set for the broker, the next connection over it is closed while the open ones
    stay; deleted, the next is served. Before, they were read once, at start."""
    from confluent_kafka.admin import AdminClient

    b = broker_factory()
    assert b.broker is not None
    broker_id = str(b.broker.config.broker_id)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # its connections open first
    admin.list_topics(timeout=15)
    first, second = connect(b.bootstrap), connect(b.bootstrap)
    try:
        assert api_versions_answered(first, 1) and api_versions_answered(second, 2)
        _alter_broker_configs(admin, broker_id, max_connections_per_ip="2")
        _eventually(lambda: b.broker is not None
                    and b.broker.connection_quotas.max_per_ip == 2)
        with connect(b.bootstrap) as third:
            assert closed_by_broker(third)
        assert api_versions_answered(first, 3)
        _alter_broker_configs(admin, broker_id, max_connections_per_ip=None)
        _eventually(lambda: b.broker is not None
                    and b.broker.connection_quotas.max_per_ip > 2)
        with connect(b.bootstrap) as again:
            assert api_versions_answered(again, 4)
    finally:
        first.close()
        second.close()
