"""Clients that never log in, on a SASL_PLAINTEXT listener of a broker process of its own
(its RSS is its own): frames over sasl.server.max.receive.size are refused from their
size prefix and the connection closed (SaslAuthenticate and raw v0 tokens alike), 50
connections claiming 100 MB frames leave an authenticated producer and new SCRAM logins
alone, unauthenticated connections share a small pool of their own, and a connection that
has not authenticated within connections.max.idle.ms of opening is closed even while it
trickles bytes."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as HandshakeV1

from kernel.testing.embedded import EmbeddedBroker
from tests.broker_process import BrokerProcess
from tests.integration.wire import connect, decode_response, encode_request, recv_frame

MIB = 1024 * 1024
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
SCRAM_USER, SCRAM_PASSWORD = "scram-user", "scram-secret"


def _sasl_broker(workdir: Path, *overrides: str) -> BrokerProcess:
    broker = BrokerProcess(workdir, plugins=("metadata_kraft", "coordinator", "txn",
                                             "auth_sasl"))
    broker.args += [
        "--override", f'listeners=["SASL_PLAINTEXT://127.0.0.1:{broker.port}"]',
        "--override", "inter.broker.listener.name=SASL_PLAINTEXT",
        "--override", f'plugins.auth_sasl.plain.users=["{ADMIN}:{ADMIN_PASSWORD}"]',
        "--override", "plugins.auth_sasl.connection.failed.authentication.delay.ms=0",
    ]
    for o in overrides:
        broker.args += ["--override", o]
    return broker


@pytest.fixture
def sasl_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def start(*overrides: str) -> BrokerProcess:
        broker = _sasl_broker(tmp_path, *overrides).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        problems = broker.problems()
        broker.stop()
        assert not problems, problems


def _conf(broker: BrokerProcess, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def _add_scram_user(broker: BrokerProcess) -> None:
    admin = AdminClient(_conf(broker, "PLAIN", ADMIN, ADMIN_PASSWORD))
    upsert = UserScramCredentialUpsertion(
        SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
        SCRAM_PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)


def _scram_login(broker: BrokerProcess, timeout: float = 10.0) -> bool:
    """A new SCRAM-SHA-256 client logs in and gets metadata within ``timeout``."""
    producer = Producer({**_conf(broker, "SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
                         "socket.timeout.ms": int(timeout * 1000)})
    try:
        producer.list_topics(timeout=timeout)
        return True
    except Exception:
        return False


def _rss_mib(broker: BrokerProcess) -> float:
    return broker.rss_bytes() / MIB


def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """The broker closed the connection within ``timeout`` (sending nothing first)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _ask(sock: socket.socket, body: Any) -> Any:
    sock.sendall(encode_request(body, correlation_id=5))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    return decode_response(frame, body.__api_key__, body.__version__)[1]


def _handshake(broker: BrokerProcess, mechanism: str = "PLAIN", version: int = 1
               ) -> socket.socket:
    sock = connect(broker.bootstrap)
    request = (HandshakeV1 if version == 1 else HandshakeV0)(mechanism=mechanism)
    assert _ask(sock, request).error_code == 0
    return sock


def _authenticate_head(size: int) -> bytes:
    """The size prefix and request header of a SaslAuthenticate v2 frame claiming
    ``size`` bytes (an empty one's last two bytes are its body)."""
    whole = encode_request(SaslAuthenticateRequest(auth_bytes=b""), correlation_id=6)
    return struct.pack(">i", size) + whole[4:-2]


def _send_some(sock: socket.socket, data: bytes) -> None:
    """Sends what the broker takes; a broker that closed the connection takes nothing."""
    with contextlib.suppress(OSError):
        sock.sendall(data)


# -- sasl.server.max.receive.size ----------------------------------------------------


@pytest.mark.parametrize("size", [10 * MIB, 90 * MIB])
def test_a_plain_token_over_the_limit_is_refused_from_its_size_prefix(
    sasl_broker: Callable[..., BrokerProcess], size: int,
) -> None:
    """Before the fix the broker waited for (and read) the whole token."""
    broker = sasl_broker()
    with _handshake(broker) as sock:
        # The header and the start of the token; the rest never comes.
        token = b"\0admin\0" + b"x" * (64 * 1024)
        _send_some(sock, _authenticate_head(size) + token)
        assert _closed(sock)
    with _handshake(broker, version=0) as sock:  # KIP-43's raw token, after v0
        _send_some(sock, struct.pack(">i", size) + token)
        assert _closed(sock)
    assert broker.answers()
    assert any("sasl.server.max.receive.size" in str(e.get("event"))
               for e in broker.events())


def test_a_scram_client_first_with_a_10_mb_nonce_is_refused_unanswered(
    sasl_broker: Callable[..., BrokerProcess],
) -> None:
    """Before the fix the broker read it and answered with a 10 MB server-first."""
    broker = sasl_broker()
    before = _rss_mib(broker)
    client_first = b"n,,n=" + SCRAM_USER.encode() + b",r=" + b"A" * (10 * MIB)
    frame = encode_request(SaslAuthenticateRequest(auth_bytes=client_first), correlation_id=6)
    with _handshake(broker, "SCRAM-SHA-256") as sock:
        _send_some(sock, frame)
        sock.settimeout(5)
        try:
            answer = sock.recv(4)
        except ConnectionResetError:
            answer = b""
        assert answer == b"", "the broker answered the 10 MB client-first message"
    assert broker.answers()
    assert _rss_mib(broker) - before < 8


def test_frames_under_the_limit_and_after_login_are_served(
    sasl_broker: Callable[..., BrokerProcess],
) -> None:
    """The limit is the setting's, and ends with authentication: an
    authenticated client's 600 KB record goes through under a 64 KiB pre-authentication
    limit."""
    broker = sasl_broker("sasl.server.max.receive.size=65536")
    producer = Producer(_conf(broker, "PLAIN", ADMIN, ADMIN_PASSWORD))
    delivered: list[Any] = []
    producer.produce("big-" + uuid.uuid4().hex[:6], b"v" * 600_000,
                     on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(20)
    assert delivered == [None]
    with _handshake(broker) as sock:
        _send_some(sock, _authenticate_head(65537))
        assert _closed(sock)


# -- the attack: 50 connections claiming 100 MB frames ---------------------------------


def _flood(socks: list[socket.socket], per_socket: int, seconds: float) -> None:
    """Sends up to ``per_socket`` zeros on each socket for at most ``seconds``, as fast
    as the broker reads them (non-blocking: a muted connection just stops taking)."""
    chunk = bytes(MIB)
    left = {s: per_socket for s in socks}
    for s in socks:
        s.setblocking(False)
    deadline = time.monotonic() + seconds
    while left and time.monotonic() < deadline:
        progressed = False
        for s in list(left):
            try:
                n = s.send(chunk[:min(len(chunk), left[s])])
            except BlockingIOError:
                continue
            except OSError:
                del left[s]  # closed by the broker
                continue
            progressed = True
            left[s] -= n
            if left[s] <= 0:
                del left[s]
        if not progressed:
            time.sleep(0.05)


def test_fifty_100_mb_claims_leave_producers_and_logins_alone(
    sasl_broker: Callable[..., BrokerProcess],
) -> None:
    """Before the fix the broker read the claims' zeros into memory (hundreds of MB)
    until its request pool was exhausted; then authenticated produce requests and new
    logins waited behind them."""
    broker = sasl_broker()
    _add_scram_user(broker)
    producer = Producer({**_conf(broker, "SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
                         "linger.ms": 0})
    topic = "attacked-" + uuid.uuid4().hex[:6]
    producer.produce(topic, b"warm-up")
    assert producer.flush(20) == 0
    time.sleep(1)
    before = _rss_mib(broker)
    attackers = [_handshake(broker) for _ in range(50)]
    try:
        for sock in attackers:
            _send_some(sock, _authenticate_head(100_000_000))
        flood = threading.Thread(target=_flood, args=(attackers, 95 * MIB, 8.0), daemon=True)
        flood.start()
        time.sleep(2)
        # While the attack holds: an authenticated producer produces, new SCRAM clients
        # log in, and the broker holds little more than it did.
        delivered: list[Any] = []
        for i in range(20):
            producer.produce(topic, f"m{i}".encode(),
                             on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(15) == 0
        assert delivered == [None] * 20
        assert all(_scram_login(broker) for _ in range(3))
        flood.join(10)
        assert _rss_mib(broker) - before < 60
    finally:
        for sock in attackers:
            sock.close()
    assert broker.answers()


# -- the unauthenticated share of request memory ----------------------------------------


def test_unauthenticated_connections_holding_more_than_their_share_are_closed(
    sasl_broker: Callable[..., BrokerProcess],
) -> None:
    """queued.max.request.bytes of 100 MiB leaves unauthenticated connections 6.25 MiB:
    30 that each send 480 KiB of a 500 KiB frame and stall get no more than that, the
    largest holders closed; logins still complete. Before the fix they held it all."""
    broker = sasl_broker("queued.max.request.bytes=104857600")
    _add_scram_user(broker)
    frame = 500 * 1024
    holders = [_handshake(broker) for _ in range(30)]
    try:
        for sock in holders:
            _send_some(sock, _authenticate_head(frame) + bytes(480 * 1024))
        time.sleep(1)
        closed = sum(_closed(sock, 0.2) for sock in holders)
        # At most 6.25 MiB / 480 KiB = 13 may hold their bytes.
        assert closed >= 30 - 13
        assert _scram_login(broker)
    finally:
        for sock in holders:
            sock.close()
    assert any("share of request memory" in str(e.get("event")) for e in broker.events())


# -- authentication within connections.max.idle.ms --------------------------------------


def test_a_connection_that_trickles_a_frame_without_logging_in_is_closed(
    sasl_broker: Callable[..., BrokerProcess],
) -> None:
    """Kafka's idle clock restarts with every byte; before the fix a client sending one
    byte a second kept its connection (and slot) for good."""
    broker = sasl_broker("connections.max.idle.ms=3000")
    with _handshake(broker) as sock:
        sock.sendall(_authenticate_head(400 * 1024))
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 12:
            try:
                sock.sendall(b"\0")
            except OSError:
                closed = True
                break
            if _closed(sock, 0.5):
                closed = True
                break
        assert closed
        assert time.monotonic() - started < 8
    # An authenticated client idle for less than connections.max.idle.ms stays.
    assert _plain_client_stays(broker)
    assert any("did not authenticate" in str(e.get("event")) for e in broker.events())


def _plain_client_stays(broker: BrokerProcess) -> bool:
    """A PLAIN login that then sends a request every second is served past the
    pre-authentication deadline."""
    producer = Producer(_conf(broker, "PLAIN", ADMIN, ADMIN_PASSWORD))
    topic = "stays-" + uuid.uuid4().hex[:6]
    for i in range(5):
        producer.produce(topic, f"m{i}".encode())
        if producer.flush(10) != 0:
            return False
        time.sleep(1)
    return True


def test_unauthenticated_bytes_stay_out_of_the_request_pool_and_come_back(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    """Partial frames of connections that have not logged in count against their own
    share, not queued.max.request.bytes, and every byte comes back when they close.
    Before the fix they took the broker's request pool."""
    b = broker_factory({"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"],
                        "inter.broker.listener.name": "SASL_PLAINTEXT"},
                       plugins=["metadata_kraft", "coordinator", "txn", "auth_sasl"],
                       plugin_settings={"auth_sasl": {
                           "plain.users": [f"{ADMIN}:{ADMIN_PASSWORD}"]}})
    assert b.broker is not None
    pool = b.broker.memory_pool
    socks = [connect(b.bootstrap) for _ in range(10)]
    try:
        for sock in socks:
            assert _ask(sock, HandshakeV1(mechanism="PLAIN")).error_code == 0
            sock.sendall(_authenticate_head(400 * 1024) + bytes(100 * 1024))
        time.sleep(1)  # the broker reads what was sent
        assert pool.used == 0
        assert b.broker.preauth_pool.used >= 10 * 100 * 1024
    finally:
        for sock in socks:
            sock.close()
    deadline = time.monotonic() + 10
    while b.broker.preauth_pool.used and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.broker.preauth_pool.used == 0
    # After a login requests are served, and neither pool keeps a byte.
    with connect(b.bootstrap) as sock:
        assert _ask(sock, HandshakeV1(mechanism="PLAIN")).error_code == 0
        answer = _ask(sock, SaslAuthenticateRequest(
            auth_bytes=f"\0{ADMIN}\0{ADMIN_PASSWORD}".encode()))
        assert answer.error_code == 0
        assert _ask(sock, HandshakeV1(mechanism="PLAIN")).error_code != 0  # served
    assert b.broker.preauth_pool.used == 0 and pool.used == 0
