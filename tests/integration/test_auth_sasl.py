"""The auth_sasl plugin with real clients: confluent-kafka, kafka-python and kcat over
SASL_PLAINTEXT with PLAIN (users from a password file) and SCRAM-SHA-256/512 (users
created with AlterUserScramCredentials), SCRAM over SASL_SSL; failed logins answered with
Kafka's error, then closed; garbage in SaslAuthenticate; the SCRAM credential APIs'
checks on the wire."""

from __future__ import annotations

import base64
import hashlib
import hmac
import shutil
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
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
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kernel.config import ConfigError
from kernel.testing.embedded import EmbeddedBroker
from kernel.testing.pki import Pki, make_pki
from tests.integration.roundtrip import produce_and_consume
from tests.integration.wire import (
    closed_by_broker,
    connect,
    decode_response,
    encode_request,
    recv_frame,
)

PLUGINS = ["metadata_kraft", "coordinator", "txn", "auth_sasl"]
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
SCRAM_USER, SCRAM_PASSWORD = "scram-user", "scram-secret"
INVALID = "Authentication failed: Invalid username or password"


@pytest.fixture
def users_file(tmp_path: Path) -> str:
    path = tmp_path / "users"
    path.write_text(f"# PLAIN users\n{ADMIN}:{ADMIN_PASSWORD}\n\nbob:b:o:b\n")
    return str(path)


def _sasl_broker(broker_factory: Callable[..., EmbeddedBroker], users_file: str,
                 listener: str = "SASL_PLAINTEXT", delay_ms: int = 0,
                 **settings: Any) -> EmbeddedBroker:
    settings["listeners"] = [f"{listener}://127.0.0.1:0"]
    settings.setdefault("inter.broker.listener.name", listener)
    return broker_factory(settings, plugins=PLUGINS, plugin_settings={"auth_sasl": {
        "plain.users.file": users_file,
        "connection.failed.authentication.delay.ms": delay_ms,
    }})


def _client(b: EmbeddedBroker, mechanism: str, user: str, password: str,
            protocol: str = "SASL_PLAINTEXT", **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": b.bootstrap, "security.protocol": protocol,
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            **extra}


def _add_scram_user(b: EmbeddedBroker, mechanism: str, user: str = SCRAM_USER,
                    password: str = SCRAM_PASSWORD, **extra: Any) -> None:
    admin = AdminClient(_client(b, "PLAIN", ADMIN, ADMIN_PASSWORD, **extra))
    kind = getattr(ScramMechanism, mechanism.replace("-", "_"))
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(kind, 4096),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)


def _client_error(conf: dict[str, Any]) -> str:
    """The first error librdkafka reports for ``conf`` (an authentication failure is
    reported through error_cb, not raised)."""
    errors: list[str] = []
    producer = Producer({**conf, "error_cb": lambda e: errors.append(e.str())})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    return errors[0] if errors else ""


def _ask(sock: Any, body: Any) -> Any:
    sock.sendall(encode_request(body, correlation_id=7))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    return decode_response(frame, body.__api_key__, body.__version__)[1]


def _login(b: EmbeddedBroker, mechanism: str, auth_bytes: bytes) -> tuple[Any, bool]:
    """One SaslAuthenticate after the handshake: its response, and whether the broker
    then closed the connection."""
    with connect(b.bootstrap) as s:
        assert _ask(s, SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        response = _ask(s, SaslAuthenticateRequest(auth_bytes=auth_bytes))
        return response, closed_by_broker(s)


def _failed_count(b: EmbeddedBroker) -> float:
    assert b.broker is not None
    value = b.broker.metrics.registry.get_sample_value("kafkernel_failed_authentication_total")
    return value or 0.0


# -- real clients ----------------------------------------------------------------------


def test_confluent_kafka_over_sasl_plaintext_with_plain_and_scram(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    assert len(produce_and_consume(_client(b, "PLAIN", ADMIN, ADMIN_PASSWORD))) == 10
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        _add_scram_user(b, mechanism)
        conf = _client(b, mechanism, SCRAM_USER, SCRAM_PASSWORD)
        assert len(produce_and_consume(conf)) == 10


def test_kafka_python_over_sasl_plaintext_with_plain_and_scram(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    b = _sasl_broker(broker_factory, users_file)
    _add_scram_user(b, "SCRAM-SHA-512")
    for mechanism, user, password in (("PLAIN", "bob", "b:o:b"),
                                      ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD)):
        conf = {"bootstrap_servers": b.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": password}
        topic = "kp-" + uuid.uuid4().hex[:8]
        producer = KafkaProducer(**conf)
        for i in range(5):
            producer.send(topic, f"k{i}".encode())
        producer.flush(20)
        producer.close()
        consumer = KafkaConsumer(topic, auto_offset_reset="earliest",
                                 consumer_timeout_ms=10000, **conf)
        assert [m.value for m in consumer] == [f"k{i}".encode() for i in range(5)]
        consumer.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_sasl_plaintext_with_scram_and_plain(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    _add_scram_user(b, "SCRAM-SHA-256")
    for mechanism, user, password in (("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
                                      ("PLAIN", ADMIN, ADMIN_PASSWORD)):
        topic = "kcat-" + uuid.uuid4().hex[:8]
        auth = ["-b", b.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                "-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}",
                "-X", f"sasl.password={password}"]
        subprocess.run(["kcat", *auth, "-P", "-t", topic], input=b"one\ntwo\n",
                       check=True, timeout=30)
        out = subprocess.run(["kcat", *auth, "-C", "-t", topic, "-o", "beginning", "-e",
                              "-c", "2"], capture_output=True, check=True, timeout=30)
        assert out.stdout.split() == [b"one", b"two"]


def test_scram_over_sasl_ssl(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str, tmp_path: Path,
) -> None:
    pki: Pki = make_pki(tmp_path / "pki")
    b = _sasl_broker(broker_factory, users_file, listener="SASL_SSL", **{
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca"),
    })
    tls = {"ssl.ca.location": pki.path("ca")}
    _add_scram_user(b, "SCRAM-SHA-512", protocol="SASL_SSL", **tls)
    conf = _client(b, "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD, "SASL_SSL", **tls)
    assert len(produce_and_consume(conf)) == 10


# -- failed logins -----------------------------------------------------------------------


@pytest.mark.parametrize("user,password", [(ADMIN, "wrong"), ("nobody", ADMIN_PASSWORD)])
def test_a_failed_plain_login_gets_kafkas_error_then_the_connection_closes(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
    caplog: pytest.LogCaptureFixture, user: str, password: str,
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    response, closed = _login(b, "PLAIN", f"\0{user}\0{password}".encode())
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert response.error_message == INVALID
    assert closed
    assert _failed_count(b) == 1
    # A client with the wrong password is told Kafka's reason.
    assert INVALID in _client_error(_client(b, "PLAIN", user, password))
    assert _failed_count(b) >= 2


def test_a_failed_login_is_logged_with_the_client_address_and_no_password(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    with connect(b.bootstrap) as s:
        peer = "{}:{}".format(*s.getsockname()[:2])
        _ask(s, SaslHandshakeRequest(mechanism="PLAIN"))
        _ask(s, SaslAuthenticateRequest(auth_bytes=b"\0admin\0hunter2-not-it"))
    b.stop()
    out = capsys.readouterr()
    logged = out.out + out.err
    assert "failed authentication" in logged and peer in logged
    assert "hunter2-not-it" not in logged


def test_a_failed_scram_login_gets_kafkas_message_for_invalid_credentials(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    _add_scram_user(b, "SCRAM-SHA-256")
    # Unknown user: refused at the first message, without saying the user is unknown.
    response, closed = _login(b, "SCRAM-SHA-256", b"n,,n=nobody,r=abcdefgh")
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert response.error_message == ("Authentication failed during authentication due to "
                                      "invalid credentials with SASL mechanism SCRAM-SHA-256")
    assert closed
    # A known user with the wrong password: refused at the final message.
    conf = _client(b, "SCRAM-SHA-256", SCRAM_USER, "not-the-password")
    assert "invalid credentials with SASL mechanism" in _client_error(conf)
    # The tokenauth extension (delegation tokens) is refused.
    response, _ = _login(b, "SCRAM-SHA-256",
                         f"n,,n={SCRAM_USER},r=abcdefgh,tokenauth=true".encode())
    assert response.error_code == ErrorCode.sasl_authentication_failed


def test_the_answer_to_a_failed_login_is_delayed(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    b = _sasl_broker(broker_factory, users_file, delay_ms=400)
    started = time.monotonic()
    response, closed = _login(b, "PLAIN", b"\0admin\0wrong")
    assert time.monotonic() - started >= 0.4
    assert response.error_message == INVALID and closed


@pytest.mark.parametrize("garbage", [b"", b"\xff\xfe\0\0\0\0", b"no-nul-at-all", b"\0" * 9])
def test_garbage_in_sasl_authenticate_fails_the_login_and_the_broker_keeps_serving(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str, garbage: bytes,
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        response, closed = _login(b, mechanism, garbage)
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert closed
    with connect(b.bootstrap) as s:
        _ask(s, SaslHandshakeRequest(mechanism="PLAIN"))
        ok = _ask(s, SaslAuthenticateRequest(auth_bytes=b"\0admin\0admin-secret"))
        assert ok.error_code == 0
        assert _ask(s, MetadataRequest(topics=())).brokers


def test_sasl_authenticate_without_a_handshake_or_an_unknown_mechanism_closes(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    with connect(b.bootstrap) as s:
        s.sendall(encode_request(SaslAuthenticateRequest(auth_bytes=b"\0admin\0x")))
        assert closed_by_broker(s)
    with connect(b.bootstrap) as s:
        response = _ask(s, SaslHandshakeRequest(mechanism="GSSAPI"))
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert response.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        assert closed_by_broker(s)


def _raw_token(sock: Any, token: bytes) -> bytes | None:
    """A bare size-prefixed SASL token, as a client sends it after SaslHandshake v0;
    the broker's answer the same way (None: it closed the connection)."""
    sock.sendall(struct.pack(">i", len(token)) + token)
    return recv_frame(sock)


def test_sasl_handshake_v0_is_followed_by_raw_tokens(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    """KIP-43's first framing, which Kafka still serves: after SaslHandshake v0 the
    tokens travel as bare size-prefixed frames, not SaslAuthenticate requests. A good
    login then serves requests; a bad one closes the connection, counted and logged,
    and the broker keeps serving."""
    b = _sasl_broker(broker_factory, users_file)
    with connect(b.bootstrap) as s:
        assert _ask(s, SaslHandshakeV0(mechanism="PLAIN")).error_code == 0
        assert _raw_token(s, b"\0admin\0admin-secret") == b""
        assert _ask(s, MetadataRequest(topics=())).brokers
    failed = _failed_count(b)
    with connect(b.bootstrap) as s:
        assert _ask(s, SaslHandshakeV0(mechanism="PLAIN")).error_code == 0
        assert _raw_token(s, b"\0admin\0wrong") is None
    assert _failed_count(b) == failed + 1
    _add_scram_user(b, "SCRAM-SHA-256")
    with connect(b.bootstrap) as s:
        assert _ask(s, SaslHandshakeV0(mechanism="SCRAM-SHA-256")).error_code == 0
        server_first = _raw_token(s, f"n,,n={SCRAM_USER},r=clientnonce".encode())
        assert server_first is not None and server_first.startswith(b"r=clientnonce")
    with connect(b.bootstrap) as s:
        _ask(s, SaslHandshakeRequest(mechanism="PLAIN"))
        ok = _ask(s, SaslAuthenticateRequest(auth_bytes=b"\0admin\0admin-secret"))
        assert ok.error_code == 0


def test_a_client_gone_before_its_failed_raw_login_is_answered_logs_no_error(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    """The failed raw login's close was an unretrieved task exception ("Task exception
    was never retrieved", error level) when the client had already gone (found by
    tests/fuzz/test_fuzz_security.py). The broker fixture fails on an error logged."""
    b = _sasl_broker(broker_factory, users_file)
    for _ in range(20):
        with connect(b.bootstrap) as s:
            s.sendall(encode_request(SaslHandshakeV0(mechanism="PLAIN"), correlation_id=1)
                      + struct.pack(">i", 12) + b"\0admin\0wrong")
        time.sleep(0.05)  # the failure completes after the client closed
    with connect(b.bootstrap) as s:
        assert _ask(s, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0


# -- the SCRAM exchange by hand (RFC 5802's arithmetic, the server's signature) ----------


def test_scram_server_signature_proves_the_broker_knows_the_credential(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    _add_scram_user(b, "SCRAM-SHA-256")
    with connect(b.bootstrap) as s:
        _ask(s, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        first_bare = f"n={SCRAM_USER},r=clientnonce"
        server_first = _ask(s, SaslAuthenticateRequest(
            auth_bytes=b"n,," + first_bare.encode())).auth_bytes.decode()
        fields = dict(f.split("=", 1) for f in server_first.split(","))
        assert fields["r"].startswith("clientnonce") and int(fields["i"]) == 4096
        salted = hashlib.pbkdf2_hmac("sha256", SCRAM_PASSWORD.encode(),
                                     base64.b64decode(fields["s"]), int(fields["i"]))
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message,
                             "sha256").digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        final = _ask(s, SaslAuthenticateRequest(
            auth_bytes=f"{without_proof},p={base64.b64encode(proof).decode()}".encode()))
        assert final.error_code == 0
        server_key = hmac.new(salted, b"Server Key", "sha256").digest()
        expected = hmac.new(server_key, auth_message, "sha256").digest()
        assert final.auth_bytes == b"v=" + base64.b64encode(expected)
        assert _ask(s, MetadataRequest(topics=())).brokers


# -- AlterUserScramCredentials / DescribeUserScramCredentials ---------------------------


def _admin_socket(b: EmbeddedBroker) -> Any:
    s = connect(b.bootstrap)
    _ask(s, SaslHandshakeRequest(mechanism="PLAIN"))
    assert _ask(s, SaslAuthenticateRequest(
        auth_bytes=f"\0{ADMIN}\0{ADMIN_PASSWORD}".encode())).error_code == 0
    return s


def _upsert(name: str, mechanism: int = 1, iterations: int = 4096) -> ScramCredentialUpsertion:
    return ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations,
                                    salt=b"salt", salted_password=b"x" * 32)


def test_alter_user_scram_credentials_checks_as_kafka_does(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    with _admin_socket(b) as s:
        response = _ask(s, AlterUserScramCredentialsRequest(
            deletions=(ScramCredentialDeletion(name="ghost", mechanism=1),),
            upsertions=(_upsert("few", iterations=4095), _upsert("many", iterations=16385),
                        _upsert("odd", mechanism=3), _upsert(""), _upsert("twice"),
                        _upsert("twice", mechanism=2), _upsert("fine"))))
        results = {r.user: (r.error_code, r.error_message) for r in response.results}
        assert results == {
            "ghost": (ErrorCode.resource_not_found,
                      "Attempt to delete a user credential that does not exist"),
            "few": (ErrorCode.unacceptable_credential, "Too few iterations"),
            "many": (ErrorCode.unacceptable_credential, "Too many iterations"),
            "odd": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
            "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
            "twice": (ErrorCode.duplicate_resource,
                      "A user credential cannot be altered twice in the same request"),
            "fine": (ErrorCode.none, None),
        }
        described = _ask(s, DescribeUserScramCredentialsRequest(
            users=(UserName(name="fine"), UserName(name="ghost"))))
        by_user = {r.user: r for r in described.results}
        assert [(c.mechanism, c.iterations) for c in by_user["fine"].credential_infos] == [
            (1, 4096)]
        assert by_user["ghost"].error_code == ErrorCode.resource_not_found
        assert by_user["ghost"].error_message == (
            "Attempt to describe a user credential that does not exist: ghost")
        deleted = _ask(s, AlterUserScramCredentialsRequest(
            deletions=(ScramCredentialDeletion(name="fine", mechanism=1),), upsertions=()))
        assert [(r.user, r.error_code) for r in deleted.results] == [("fine", 0)]
        assert _ask(s, DescribeUserScramCredentialsRequest(users=None)).results == ()


def test_a_bad_password_file_line_is_one_config_error_without_its_content(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    path = tmp_path / "users"
    path.write_text("admin:fine\nsecret-without-colon\n")
    with pytest.raises(ConfigError) as raised:
        _sasl_broker(broker_factory, str(path))
    assert "line 2" in str(raised.value) and "secret-without-colon" not in str(raised.value)
    with pytest.raises(ConfigError, match="cannot read"):
        _sasl_broker(broker_factory, str(tmp_path / "missing"))


def test_scram_users_survive_a_restart_and_their_passwords_are_not_stored(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    b = _sasl_broker(broker_factory, users_file)
    _add_scram_user(b, "SCRAM-SHA-256")
    _add_scram_user(b, "SCRAM-SHA-512", user="other", password="other-secret")
    b.restart()
    for mechanism, user, password in (("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
                                      ("SCRAM-SHA-512", "other", "other-secret")):
        assert len(produce_and_consume(_client(b, mechanism, user, password), n=3)) == 3
    metadata_log = b.data_dir.rglob("__cluster_metadata-0/*")
    stored = b"".join(p.read_bytes() for p in metadata_log if p.is_file())
    assert b"other" in stored  # the user's record (Kafka's binary UserScramCredentialRecord)
    assert b"other-secret" not in stored and SCRAM_PASSWORD.encode() not in stored
    # A deletion is in the log too.
    with _admin_socket(b) as s:
        _ask(s, AlterUserScramCredentialsRequest(
            deletions=(ScramCredentialDeletion(name="other", mechanism=2),), upsertions=()))
    b.restart()
    assert "invalid credentials" in _client_error(
        _client(b, "SCRAM-SHA-512", "other", "other-secret"))


def test_sasl_requests_on_an_authenticated_connection_get_illegal_sasl_state(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str,
) -> None:
    # As Kafka's KafkaApis answers them: on a PLAINTEXT listener, and after the exchange.
    b = broker_factory({"listeners": ["PLAINTEXT://127.0.0.1:0"]}, plugins=PLUGINS,
                       plugin_settings={"auth_sasl": {"plain.users.file": users_file}})
    with connect(b.bootstrap) as s:
        assert _ask(s, SaslHandshakeRequest(mechanism="PLAIN")).error_code == (
            ErrorCode.illegal_sasl_state)
        response = _ask(s, SaslAuthenticateRequest(auth_bytes=b"\0admin\0admin-secret"))
        assert response.error_code == ErrorCode.illegal_sasl_state
        assert response.error_message == (
            "SaslAuthenticate request received after successful authentication")
        assert _ask(s, MetadataRequest(topics=())).brokers


def test_each_sasl_listener_offers_its_own_mechanisms(
    broker_factory: Callable[..., EmbeddedBroker], users_file: str, tmp_path: Path,
) -> None:
    """Kafka's listener.name.<listener>.sasl.enabled.mechanisms: PLAIN on the internal
    SASL_PLAINTEXT listener only, SCRAM on the external SASL_SSL one only."""
    pki = make_pki(tmp_path / "pki")
    b = broker_factory({
        "listeners": ["INTERNAL://127.0.0.1:0", "EXTERNAL://127.0.0.1:0"],
        "listener.security.protocol.map": ["INTERNAL:SASL_PLAINTEXT", "EXTERNAL:SASL_SSL"],
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca"),
        "listener.name.internal.sasl.enabled.mechanisms": ["PLAIN"],
        "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    }, plugins=PLUGINS, plugin_settings={"auth_sasl": {
        "plain.users.file": users_file, "connection.failed.authentication.delay.ms": 0}})
    assert b.broker is not None
    internal, external = (f"127.0.0.1:{listener.port}" for listener in b.broker.listeners)
    with connect(internal) as s:
        answer = _ask(s, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        assert (answer.error_code, answer.mechanisms) == (
            ErrorCode.unsupported_sasl_mechanism, ("PLAIN",))
    plain = {"bootstrap.servers": internal, "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "PLAIN", "sasl.username": ADMIN,
             "sasl.password": ADMIN_PASSWORD}
    admin = AdminClient(plain)
    kind = ScramMechanism.SCRAM_SHA_256
    upsert = UserScramCredentialUpsertion(SCRAM_USER, ScramCredentialInfo(kind, 4096),
                                          SCRAM_PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)
    scram = {"bootstrap.servers": external, "security.protocol": "SASL_SSL",
             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": SCRAM_USER,
             "sasl.password": SCRAM_PASSWORD, "ssl.ca.location": pki.path("ca")}
    assert len(produce_and_consume(scram, 3)) == 3
    assert "PLAIN" in _client_error({**scram, "sasl.mechanism": "PLAIN",
                                     "sasl.username": ADMIN, "sasl.password": ADMIN_PASSWORD})


def test_a_listener_enabling_a_mechanism_no_plugin_serves_is_one_config_line(
    tmp_path: Path, users_file: str,
) -> None:
    config = tmp_path / "k.toml"
    config.write_text(
        'listeners = ["SASL_PLAINTEXT://127.0.0.1:0"]\n'
        '"inter.broker.listener.name" = "SASL_PLAINTEXT"\n'
        f'"log.dirs" = ["{tmp_path / "data"}"]\n'
        '"listener.name.sasl_plaintext.sasl.enabled.mechanisms" = ["GSSAPI"]\n'
        '[plugins]\nenabled = ["metadata_kraft", "auth_sasl"]\n'
        f'[plugins.auth_sasl]\n"plain.users.file" = "{users_file}"\n')
    result = subprocess.run(
        [sys.executable, "-m", "kernel", "serve", "--config", str(config)],
        capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert ("listener.name.sasl_plaintext.sasl.enabled.mechanisms: GSSAPI is not a "
            "mechanism the auth_sasl plugin serves") in result.stderr + result.stdout
