"""Sessions and the plugin hooks around them: plugins see connections open and close,
a SASL_* connection serves only ApiVersions and the SASL exchange until the plugin that
owns the exchange authenticates it, SASL mechanisms are kept per listener, and the
kernel drives plugins in pluggy's order (tryfirst moves one ahead)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kernel.config import ConfigError
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import (
    closed_by_broker,
    connect,
    decode_response,
    encode_request,
    recv_frame,
)
from tests.plugin_fixtures.session_plugins import (
    MECHANISM,
    PRINCIPAL,
    SECRET,
    AlsoInOrder,
    FailsOnConnect,
    SameMechanism,
    SecretGate,
    StartsFirst,
    StartsInOrder,
)

TWO_LISTENERS = {"listeners": ["PLAINTEXT://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0"]}


def _gated(broker_factory: Callable[..., EmbeddedBroker]) -> tuple[EmbeddedBroker, SecretGate]:
    b = broker_factory(TWO_LISTENERS, plugins=["metadata_kraft", SecretGate.NAME])
    assert b.broker is not None
    gate = b.broker.plugins.pm.get_plugin(SecretGate.NAME)
    return b, gate


def _sasl_address(b: EmbeddedBroker) -> str:
    assert b.broker is not None
    return f"127.0.0.1:{b.broker.listeners[1].port}"


def _ask(sock: socket.socket, body: Any) -> Any:
    sock.sendall(encode_request(body, correlation_id=7))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    return decode_response(frame, body.__api_key__, body.__version__)[1]


def _peer(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def _eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


METADATA = MetadataRequest(topics=())


def test_plugins_see_connections_open_and_close(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b, gate = _gated(broker_factory)
    with connect(b.bootstrap) as plain, connect(_sasl_address(b)) as sasl:
        # PLAINTEXT: authenticated (as ANONYMOUS) before any plugin hears of it.
        assert _ask(plain, METADATA).brokers
        _ask(sasl, ApiVersionsRequest())
        peers = _peer(plain), _peer(sasl)
        assert gate.opened[peers[0]] == ("PLAINTEXT", True)
        assert gate.opened[peers[1]] == ("SASL_PLAINTEXT", False)
        assert not set(peers) & set(gate.closed)
    _eventually(lambda: set(peers) <= set(gate.closed))


@pytest.mark.broker_errors
def test_a_plugin_failing_on_a_new_connection_closes_that_connection(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory(plugins=["metadata_kraft", FailsOnConnect.NAME])
    for _ in range(2):  # the broker goes on accepting
        with connect(b.bootstrap) as sock:
            assert closed_by_broker(sock)
    assert b.broker is not None
    assert any("no room for" in e for e in b.broker.recent_errors)


def test_sasl_connection_is_served_the_exchange_only_until_authenticated(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b, gate = _gated(broker_factory)
    with connect(_sasl_address(b)) as sock:
        _ask(sock, ApiVersionsRequest())
        sock.sendall(encode_request(METADATA))
        assert closed_by_broker(sock)  # as Kafka: only the SASL exchange comes first
    with connect(_sasl_address(b)) as sock:
        handshake = _ask(sock, SaslHandshakeRequest(mechanism=MECHANISM))
        assert (handshake.error_code, handshake.mechanisms) == (ErrorCode.none, (MECHANISM,))
        refused = _ask(sock, SaslAuthenticateRequest(auth_bytes=b"guess"))
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        sock.sendall(encode_request(METADATA))
        assert closed_by_broker(sock)
    with connect(_sasl_address(b)) as sock:
        _ask(sock, SaslHandshakeRequest(mechanism=MECHANISM))
        session = gate.sessions[_peer(sock)]
        assert (session.authenticated, session.principal) == (False, None)
        assert _ask(sock, SaslAuthenticateRequest(auth_bytes=SECRET)).error_code == ErrorCode.none
        assert _ask(sock, METADATA).brokers
        assert (session.authenticated, session.principal) == (True, PRINCIPAL)


def test_sasl_mechanisms_are_kept_per_listener(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b, _ = _gated(broker_factory)
    assert b.broker is not None
    mechanisms = b.broker.sasl_mechanisms
    offered = mechanisms.for_listener("SASL_PLAINTEXT")
    assert list(offered) == [MECHANISM] and offered[MECHANISM].owner == SecretGate.NAME
    assert not mechanisms.for_listener("PLAINTEXT")


def test_one_mechanism_from_two_plugins_stops_startup() -> None:
    with pytest.raises(ConfigError, match=(
        rf"SASL mechanism {MECHANISM} is registered by both plugin '{SecretGate.NAME}' and "
        rf"plugin '{SameMechanism.NAME}'; enable only one of them"
    )):
        EmbeddedBroker(TWO_LISTENERS,
                       plugins=["metadata_kraft", SecretGate.NAME, SameMechanism.NAME]).start()


def test_sasl_listener_without_a_mechanism_stops_startup() -> None:
    with pytest.raises(ConfigError, match=(
        r"listeners: SASL_PLAINTEXT: a SASL listener needs a SASL mechanism, and no enabled "
        r"plugin offers one on it"
    )):
        EmbeddedBroker(TWO_LISTENERS).start()


def test_plugins_start_in_config_order_unless_tryfirst(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory(plugins=["metadata_kraft", StartsInOrder.NAME, AlsoInOrder.NAME,
                                StartsFirst.NAME])
    assert b.broker is not None
    pm = b.broker.plugins.pm
    first, second, tryfirst = (pm.get_plugin(p.NAME)
                               for p in (StartsInOrder, AlsoInOrder, StartsFirst))
    assert tryfirst.after == []
    assert first.after == [StartsFirst.NAME]
    assert sorted(second.after) == sorted([StartsFirst.NAME, StartsInOrder.NAME])
    b.stop()
    # Stopped in the reverse of the config order (StartsFirst's shutdown is not tryfirst).
    assert tryfirst.stopped_after == []
    assert second.stopped_after == [StartsFirst.NAME]
    assert sorted(first.stopped_after) == sorted([StartsFirst.NAME, AlsoInOrder.NAME])
