"""KIP-368 re-authentication: SaslAuthenticate tells the client its session lifetime
(connections.max.reauth.ms, or less when the credential expires sooner); a connection
that does not re-authenticate in time is closed on its next request; re-authentication
keeps the mechanism and principal; confluent-kafka (librdkafka >= 2.2) re-authenticates
on its own and keeps working (Kafka's Java client: tests/java/test_java_sasl.py)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import connect, decode_response, encode_request, recv_frame

PLUGINS = ["metadata_kraft", "coordinator", "txn", "auth_sasl"]
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
METADATA = MetadataRequest(topics=(), allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)


def reauth_broker(broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
                  max_reauth_ms: int) -> EmbeddedBroker:
    users = tmp_path / "users"
    users.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    return broker_factory(
        {"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"],
         "inter.broker.listener.name": "SASL_PLAINTEXT",
         "connections.max.reauth.ms": max_reauth_ms},
        plugins=PLUGINS,
        plugin_settings={"auth_sasl": {"plain.users.file": str(users),
                                       "connection.failed.authentication.delay.ms": 0}})


def ask(sock: Any, body: Any) -> Any | None:
    """The answer to ``body``, or None when the broker closed the connection."""
    sock.sendall(encode_request(body, correlation_id=5))
    try:
        frame = recv_frame(sock)
    except ConnectionResetError:
        return None
    return None if frame is None else decode_response(
        frame, body.__api_key__, body.__version__)[1]


def login(sock: Any, user: str, mechanism: str = "PLAIN") -> Any:
    handshake = ask(sock, SaslHandshakeRequest(mechanism=mechanism))
    assert handshake is not None and handshake.error_code == 0
    return ask(sock, SaslAuthenticateRequest(
        auth_bytes=f"\0{user}\0{USERS[user]}".encode()))


def counter(b: EmbeddedBroker, name: str) -> float:
    assert b.broker is not None
    return b.broker.metrics.registry.get_sample_value(name) or 0.0


def test_a_session_that_is_not_reauthenticated_is_closed_on_its_next_request(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = reauth_broker(broker_factory, tmp_path, 1500)
    with connect(b.bootstrap) as s:
        answer = login(s, "alice")
        assert answer.session_lifetime == datetime.timedelta(milliseconds=1500)
        assert ask(s, METADATA) is not None
        time.sleep(1.7)
        assert ask(s, METADATA) is None  # expired: closed, as Kafka does
    assert counter(b, "kafkernel_expired_connections_killed_total") == 1
    with connect(b.bootstrap) as s:  # and the broker goes on serving
        login(s, "alice")
        assert ask(s, METADATA) is not None


def test_reauthentication_extends_the_session_and_keeps_the_principal(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = reauth_broker(broker_factory, tmp_path, 1500)
    with connect(b.bootstrap) as s:
        login(s, "alice")
        time.sleep(1.0)
        again = login(s, "alice")
        assert (again.error_code, again.session_lifetime) == (
            0, datetime.timedelta(milliseconds=1500))
        time.sleep(1.0)  # past the first session's end, within the second's
        assert ask(s, METADATA) is not None
    assert counter(b, "kafkernel_successful_reauthentication_total") == 1

    with connect(b.bootstrap) as s:
        login(s, "alice")
        changed = login(s, "bob")
        assert changed.error_code == 58
        assert changed.error_message == ("Cannot change principals during "
                                         "re-authentication from User.alice: User.bob")
        assert ask(s, METADATA) is None
    with connect(b.bootstrap) as s:
        login(s, "alice")
        other = login(s, "alice", mechanism="SCRAM-SHA-256")
        assert other.error_code == 58
        assert other.error_message == ("SASL mechanism 'SCRAM-SHA-256' requested by client "
                                       "is not supported for re-authentication of "
                                       "mechanism 'PLAIN'")
    assert counter(b, "kafkernel_failed_reauthentication_total") == 2


def test_without_connections_max_reauth_ms_a_plain_session_never_expires(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = reauth_broker(broker_factory, tmp_path, 0)
    with connect(b.bootstrap) as s:
        answer = login(s, "alice")
        assert answer.session_lifetime == datetime.timedelta(0)
        # no KIP-368 session: a second handshake is ILLEGAL_SASL_STATE, as before
        assert ask(s, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 34


def test_confluent_kafka_reauthenticates_and_keeps_producing(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = reauth_broker(broker_factory, tmp_path, 1000)
    producer = Producer({"bootstrap.servers": b.bootstrap,
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "alice", "sasl.password": USERS["alice"]})
    topic = "reauth-" + uuid.uuid4().hex[:8]
    delivered: list[Any] = []
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        producer.produce(topic, b"v", on_delivery=lambda err, _: delivered.append(err))
        producer.poll(0.2)
    assert producer.flush(15) == 0
    assert delivered and all(err is None for err in delivered)
    assert counter(b, "kafkernel_successful_reauthentication_total") >= 2
