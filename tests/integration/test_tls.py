"""TLS listeners (SSL, SASL_SSL) with real clients: confluent-kafka, kafka-python and kcat
produce and consume over SSL; client certificates (ssl.client.auth) name the session's
principal through ssl.principal.mapping.rules, and an authorizer sees it; a client
without a certificate, or with an untrusted one, is refused; bad TLS input (plaintext on
a TLS port, a TLS handshake on a plaintext port, a handshake that never ends) is logged
once per address and the broker keeps serving; bad TLS settings stop `kafkernel serve`
and `kafkernel config check` with one line naming the setting."""

from __future__ import annotations

import datetime
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.types import TopicName

from kernel.testing.embedded import EmbeddedBroker
from kernel.testing.pki import CLIENT_SUBJECT, KEY_PASSWORD, Pki, make_pki
from tests.integration.roundtrip import consume_values
from tests.integration.wire import decode_response, encode_request, recv_frame
from tests.plugin_fixtures.session_plugins import MECHANISM, PRINCIPAL, SECRET, SecretGate
from tests.plugin_fixtures.tls_plugins import PrincipalRecorder

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls(pki: Pki, **extra: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "listeners": ["SSL://127.0.0.1:0"], "security.inter.broker.protocol": "SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca"),
    }
    settings.update({k.replace("_", "."): v for k, v in extra.items()})
    return settings


def _port(b: EmbeddedBroker, index: int = 0) -> int:
    assert b.broker is not None
    return b.broker.listeners[index].port


def _librdkafka(b: EmbeddedBroker, pki: Pki, cert: str | None = "client") -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": b.bootstrap, "security.protocol": "SSL",
        "ssl.ca.location": pki.path("ca"),
    }
    if cert is not None:
        conf["ssl.certificate.location"] = pki.path(f"{cert}_cert")
        conf["ssl.key.location"] = pki.path(f"{cert}_key")
    return conf


def _produce_and_consume_confluent(conf: dict[str, Any], topic: str, n: int = 20) -> list[bytes]:
    producer = Producer({**conf, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    return consume_values({**conf, "group.id": f"g-{topic}"}, topic, n, TIMEOUT_S)


def _client_context(pki: Pki, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.path("ca"))
    if cert is not None:
        ctx.load_cert_chain(pki.path(f"{cert}_cert"), pki.path(f"{cert}_key"))
    return ctx


def _tls_socket(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def _ask(sock: socket.socket, body: Any, correlation_id: int = 7) -> Any:
    sock.sendall(encode_request(body, correlation_id=correlation_id))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    return decode_response(frame, body.__api_key__, body.__version__)[1]


def _served(port: int, ctx: ssl.SSLContext | None = None) -> bool:
    """ApiVersions answered on the port (over TLS when ``ctx`` is given)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock = ctx.wrap_socket(raw, server_hostname="localhost") if ctx else raw
    with sock:
        return _ask(sock, ApiVersionsRequest()).error_code == 0


def _closed(sock: socket.socket) -> bool:
    """The broker closed the connection (after a TLS alert, perhaps) within 10 s."""
    while True:
        try:
            if not sock.recv(4096):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def _refused(port: int, ctx: ssl.SSLContext) -> bool:
    """The TLS client gets no answer: its handshake fails, or (TLS 1.3 finishes the
    client's side first) the broker closes the connection instead of answering."""
    try:
        with _tls_socket(port, ctx) as sock:
            sock.sendall(encode_request(ApiVersionsRequest()))
            return recv_frame(sock) is None
    except (ssl.SSLError, OSError):
        return True


def _failed_handshakes(b: EmbeddedBroker, listener: str, count: int) -> None:
    """Wait until the broker counted ``count`` failed handshakes (it logs each before)."""
    assert b.broker is not None
    deadline = time.monotonic() + 10
    while (b.broker.metrics.registry.get_sample_value(
            "kafkernel_connections_rejected_total",
            {"listener": listener, "reason": "tls_handshake_failed"}) or 0) < count:
        assert time.monotonic() < deadline, "the broker did not count the failed handshake"
        time.sleep(0.01)


# -- clients over SSL ------------------------------------------------------------------


def test_confluent_kafka_produces_and_consumes_over_ssl(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    b = broker_factory(_tls(pki))
    values = _produce_and_consume_confluent(_librdkafka(b, pki, cert=None), "ssl-confluent")
    assert values == [f"m{i}".encode() for i in range(20)]


def test_large_fetches_over_ssl_are_read_a_piece_at_a_time(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    """Fetch answers of megabytes: TLS cannot sendfile, so their records are read from the
    segment a piece at a time as the transport drains; a client that stops reading its
    answer leaves the broker serving others."""
    b = broker_factory(_tls(pki))
    conf = _librdkafka(b, pki, cert=None)
    producer = Producer({**conf, "linger.ms": 20, "batch.size": 1_000_000})
    n = 3_000
    for i in range(n):
        producer.produce("ssl-large", value=b"%06d" % i + b"r" * 4_000)
    assert producer.flush(TIMEOUT_S) == 0
    stalled = _tls_socket(_port(b), _client_context(pki))
    try:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(encode_request(FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=8 << 20,
            isolation_level=0, topics=(FetchTopic(topic="ssl-large", partitions=(
                FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=8 << 20),)),),
        )))  # and never read
        values = consume_values({**conf, "group.id": "g-ssl-large"}, "ssl-large", n, TIMEOUT_S)
    finally:
        stalled.close()
    assert values == [b"%06d" % i + b"r" * 4_000 for i in range(n)]


def test_kafka_python_produces_and_consumes_over_ssl(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    b = broker_factory(_tls(pki, ssl_client_auth="requested"))
    ssl_args = {"security_protocol": "SSL", "ssl_cafile": pki.path("ca"),
                "ssl_certfile": pki.path("client_cert"), "ssl_keyfile": pki.path("client_key")}
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, **ssl_args)
    for i in range(10):
        producer.send("ssl-kafka-python", f"k{i}".encode())
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer("ssl-kafka-python", bootstrap_servers=b.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000,
                             group_id="g-kp", **ssl_args)
    values = [m.value for m in consumer]
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(10)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_produces_and_consumes_over_ssl(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    b = broker_factory(_tls(pki, ssl_client_auth="required"))
    common = ["kcat", "-b", b.bootstrap, "-X", "security.protocol=ssl",
              "-X", f"ssl.ca.location={pki.path('ca')}",
              "-X", f"ssl.certificate.location={pki.path('client_cert')}",
              "-X", f"ssl.key.location={pki.path('client_key')}"]
    produced = subprocess.run([*common, "-P", "-t", "ssl-kcat"], input=b"one\ntwo\n",
                              capture_output=True, timeout=TIMEOUT_S)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([*common, "-C", "-t", "ssl-kcat", "-o", "beginning", "-e"],
                              capture_output=True, timeout=TIMEOUT_S)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == [b"one", b"two"]


# -- client certificates and the principal ---------------------------------------------

# Asks the authorizer (DESCRIBE on the topic): what the recorder sees.
DESCRIBE_TOPIC = MetadataRequest(topics=(MetadataRequestTopic(name=TopicName("seen")),))


def _recorded(b: EmbeddedBroker) -> PrincipalRecorder:
    assert b.broker is not None
    recorder = b.broker.plugins.pm.get_plugin(PrincipalRecorder.NAME)
    assert recorder is not None
    return recorder  # type: ignore[no-any-return]


PLUGINS = ["metadata_kraft", "coordinator", PrincipalRecorder.NAME]


def test_required_client_auth_names_the_client_by_its_certificate(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    b = broker_factory(_tls(pki, ssl_client_auth="required"), plugins=PLUGINS)
    topic = f"mtls-{uuid.uuid4().hex[:6]}"
    values = _produce_and_consume_confluent(_librdkafka(b, pki), topic, n=3)
    assert len(values) == 3
    # Java's X500Principal.getName(): the subject's RDNs last to first.
    assert _recorded(b).principals() == {f"User:{CLIENT_SUBJECT}"}
    assert (f"User:{CLIENT_SUBJECT}", "WRITE", "TOPIC", topic) in _recorded(b).asked


@pytest.mark.parametrize("cert", [None, "rogue"])
def test_required_client_auth_refuses_a_client_without_a_trusted_certificate(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki, cert: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = broker_factory(_tls(pki, ssl_client_auth="required"), plugins=PLUGINS)
    admin = AdminClient({**_librdkafka(b, pki, cert=cert), "socket.timeout.ms": 3000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    # A raw client: the broker ends the handshake (TLS 1.3 tells the client on its
    # first read) and serves the next client, which has the certificate.
    assert _refused(_port(b), _client_context(pki, cert))
    assert _served(_port(b), _client_context(pki, "client"))
    assert not [p for p in _recorded(b).principals() if p != f"User:{CLIENT_SUBJECT}"]
    _failed_handshakes(b, "SSL", 2)
    logged = [line for line in capsys.readouterr().err.splitlines() if "handshake" in line]
    assert len(logged) == 1, logged  # once per address and reason
    assert "127.0.0.1" in logged[0]


def test_requested_client_auth_without_a_certificate_is_anonymous(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    b = broker_factory(_tls(pki, ssl_client_auth="requested"), plugins=PLUGINS)
    with _tls_socket(_port(b), _client_context(pki)) as s:
        _ask(s, DESCRIBE_TOPIC)
    with _tls_socket(_port(b), _client_context(pki, "client")) as s:
        _ask(s, DESCRIBE_TOPIC)
    assert _recorded(b).principals() == {"User:ANONYMOUS", f"User:{CLIENT_SUBJECT}"}


def test_principal_mapping_rules_per_listener(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    settings = _tls(pki)
    settings["listeners"] = ["SSL://127.0.0.1:0", "CERTS://127.0.0.1:0"]
    settings["listener.security.protocol.map"] = ["SSL:SSL", "CERTS:SSL"]
    settings["listener.name.certs.ssl.client.auth"] = "required"
    settings["listener.name.certs.ssl.principal.mapping.rules"] = (
        "RULE:^CN=([a-z]+),OU=(.*?),.*$/$1@$2/U, DEFAULT")
    b = broker_factory(settings, plugins=PLUGINS)
    # The first listener asks for no certificate: the same client is ANONYMOUS there.
    for index in (0, 1):
        with _tls_socket(_port(b, index), _client_context(pki, "client")) as s:
            _ask(s, DESCRIBE_TOPIC)
    assert _recorded(b).principals() == {"User:ANONYMOUS", "User:ALICE@PAYMENTS"}


def test_sasl_ssl_authenticates_through_sasl_after_the_handshake(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    settings = _tls(pki, ssl_client_auth="requested")
    settings["listeners"] = ["SASL_SSL://127.0.0.1:0"]
    del settings["security.inter.broker.protocol"]  # Kafka refuses both settings
    settings["inter.broker.listener.name"] = "SASL_SSL"
    b = broker_factory(settings, plugins=["metadata_kraft", SecretGate.NAME])
    assert b.broker is not None
    gate = b.broker.plugins.pm.get_plugin(SecretGate.NAME)
    # A client certificate does not authenticate SASL_SSL: the SASL exchange does.
    with _tls_socket(_port(b), _client_context(pki, "client")) as s:
        peer = "{}:{}".format(*s.getsockname()[:2])
        assert _ask(s, SaslHandshakeRequest(mechanism=MECHANISM)).error_code == 0
        assert gate.sessions[peer].principal is None
        assert _ask(s, SaslAuthenticateRequest(auth_bytes=SECRET)).error_code == 0
        assert _ask(s, MetadataRequest(topics=())).brokers
        assert gate.sessions[peer].principal == PRINCIPAL
        assert gate.sessions[peer].security_protocol == "SASL_SSL"


# -- bad input on the wire ---------------------------------------------------------------


def test_plaintext_on_a_tls_port_and_tls_on_a_plaintext_port(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = _tls(pki)
    settings["listeners"] = ["PLAINTEXT://127.0.0.1:0", "SSL://127.0.0.1:0"]
    b = broker_factory(settings)
    plain, tls = _port(b, 0), _port(b, 1)
    for _ in range(3):
        # A Kafka request in clear on the TLS port: the handshake fails, the socket closes.
        with socket.create_connection(("127.0.0.1", tls), timeout=10) as raw:
            raw.sendall(encode_request(ApiVersionsRequest()))
            assert _closed(raw)
        # A TLS handshake on the plaintext port.
        with pytest.raises((ssl.SSLError, OSError)):
            _tls_socket(plain, _client_context(pki)).close()
    assert _served(plain) and _served(tls, _client_context(pki))
    _failed_handshakes(b, "SSL", 3)
    err = capsys.readouterr().err.splitlines()
    on_tls = [line for line in err if "TLS handshake failed" in line]
    on_plain = [line for line in err if "to a PLAINTEXT listener" in line]
    assert len(on_tls) == 1 and len(on_plain) == 1, err
    assert "plaintext client?" in on_tls[0] and "127.0.0.1" in on_tls[0]
    assert b.broker is not None
    assert b.broker.metrics.registry.get_sample_value(
        "kafkernel_connections_rejected_total",
        {"listener": "SSL", "reason": "tls_handshake_failed"}) == 3


def test_a_handshake_that_never_ends_gives_its_connection_slot_back(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = broker_factory(_tls(pki, max_connections=1, connections_max_idle_ms=500))
    with socket.create_connection(("127.0.0.1", _port(b)), timeout=10) as stalled:
        # Connected, never says hello: it holds the only slot until the timeout.
        started = time.monotonic()
        assert stalled.recv(1) == b""
        assert time.monotonic() - started < 5
    assert _served(_port(b), _client_context(pki))
    # Another reason from the same address is logged too.
    with socket.create_connection(("127.0.0.1", _port(b)), timeout=10) as raw:
        raw.sendall(encode_request(ApiVersionsRequest()))
        assert _closed(raw)
    _failed_handshakes(b, "SSL", 2)
    err = [line for line in capsys.readouterr().err.splitlines() if "handshake" in line]
    assert len(err) == 2, err
    assert "not finished within connections.max.idle.ms (500 ms)" in err[0]
    assert "WRONG_VERSION_NUMBER (a plaintext client?" in err[1]


# -- bad settings --------------------------------------------------------------------------


def _check(tmp_path: Path, pki: Pki, lines: str, command: str = "check",
           ) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "k.toml"
    cfg.write_text(
        'listeners = ["PLAINTEXT://127.0.0.1:0", "SSL://127.0.0.1:0"]\n'
        f'"log.dirs" = "{tmp_path / "data"}"\n'
        '"ssl.keystore.type" = "PEM"\n"ssl.truststore.type" = "PEM"\n'
        f'"ssl.truststore.location" = "{pki.path("ca")}"\n{lines}\n'
        '[plugins]\nenabled = ["metadata_kraft"]\n'
    )
    args = ["config", "check", str(cfg)] if command == "check" else ["serve", "--config", str(cfg)]
    return subprocess.run([sys.executable, "-m", "kernel", *args], capture_output=True,
                          text=True, timeout=60)


def _keystore(pki: Pki, name: str) -> str:
    return f'"ssl.keystore.location" = "{pki.path(name)}"'


BAD_SETTINGS = [
    ("missing file", lambda p: '"ssl.keystore.location" = "/nonexistent/k.pem"',
     "ssl.keystore.location", "cannot read /nonexistent/k.pem: No such file or directory"),
    ("no keystore", lambda p: "", "ssl.keystore.location", "listener SSL uses TLS and has no "
     "keystore"),
    ("key of another certificate", lambda p: _keystore(p, "mismatched"),
     "ssl.keystore.location", "does not match its certificate"),
    ("encrypted key without a password", lambda p: _keystore(p, "server_encrypted"),
     "ssl.key.password", "is encrypted; set ssl.key.password"),
    ("wrong key password", lambda p: _keystore(p, "server_encrypted")
     + '\n"ssl.key.password" = "wrong"', "ssl.key.password", "cannot decrypt"),
    ("no certificate", lambda p: _keystore(p, "server_key"), "ssl.keystore.location",
     "holds no PEM certificate"),
    ("JKS", lambda p: _keystore(p, "server") + '\n"listener.name.ssl.ssl.keystore.type" = "JKS"',
     "listener.name.ssl.ssl.keystore.type", "JKS is not supported"),
    ("client auth", lambda p: _keystore(p, "server") + '\n"ssl.client.auth" = "always"',
     "ssl.client.auth", "one of none, requested, required"),
    ("missing truststore", lambda p: _keystore(p, "server")
     + '\n"listener.name.ssl.ssl.truststore.location" = "/nonexistent/ca.pem"',
     "listener.name.ssl.ssl.truststore.location", "cannot read"),
    ("unknown listener prefix", lambda p: _keystore(p, "server")
     + '\n"listener.name.internal.ssl.client.auth" = "required"',
     "listener.name.internal.ssl.client.auth", "no listener INTERNAL in listeners"),
    ("not an ssl key per listener", lambda p: _keystore(p, "server")
     + '\n"listener.name.ssl.num.partitions" = 3', "listener.name.ssl.num.partitions",
     "only the ssl.* settings"),
    ("inter broker listener", lambda p: _keystore(p, "server")
     + '\n"inter.broker.listener.name" = "REPLICATION"', "inter.broker.listener.name",
     "must be a listener name defined in listeners"),
    ("advertised listener", lambda p: _keystore(p, "server")
     + '\n"advertised.listeners" = ["SSL://localhost:9093", "SASL_SSL://localhost:9094"]',
     "advertised.listeners", "SASL_SSL is not one of PLAINTEXT, SSL"),
    ("inter broker listener unset", lambda p: _keystore(p, "server")
     + '\n"advertised.listeners" = ["SSL://localhost:9093"]', "inter.broker.listener.name",
     "unset, so security.inter.broker.protocol's PLAINTEXT, which must be a listener name "
     "defined in advertised.listeners (SSL)"),
    ("inter broker listener not advertised", lambda p: _keystore(p, "server")
     + '\n"advertised.listeners" = ["SSL://localhost:9093"]'
     + '\n"inter.broker.listener.name" = "plaintext"', "inter.broker.listener.name",
     "must be a listener name defined in advertised.listeners (SSL)"),
    ("both inter broker settings", lambda p: _keystore(p, "server")
     + '\n"inter.broker.listener.name" = "SSL"\n"security.inter.broker.protocol" = "SSL"',
     "inter.broker.listener.name",
     "only one of inter.broker.listener.name and security.inter.broker.protocol"),
    ("mapping rule", lambda p: _keystore(p, "server")
     + '\n"ssl.principal.mapping.rules" = "RULE:^CN=(.*)$/$1/X"',
     "ssl.principal.mapping.rules", "invalid rule"),
    ("protocol", lambda p: _keystore(p, "server") + '\n"ssl.enabled.protocols" = ["SSLv3"]',
     "ssl.enabled.protocols", "TLSv1.2, TLSv1.3"),
    ("cipher", lambda p: _keystore(p, "server") + '\n"ssl.cipher.suites" = ["TLS_NOPE_WITH_X"]',
     "ssl.cipher.suites", "unknown cipher suite TLS_NOPE_WITH_X"),
]


@pytest.mark.parametrize(("case", "lines", "key", "problem"), BAD_SETTINGS,
                         ids=[c[0] for c in BAD_SETTINGS])
def test_bad_tls_settings_are_one_line(
    tmp_path: Path, pki: Pki, case: str, lines: Callable[[Pki], str], key: str, problem: str,
) -> None:
    result = _check(tmp_path, pki, lines(pki))
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr
    err = result.stderr.splitlines()
    assert len(err) == 1, result.stderr
    # config check names the line of a key the file sets (FILE:LINE: KEY: problem).
    assert re.match(rf"{re.escape(str(tmp_path / 'k.toml'))}(:\d+)?: {re.escape(key)}: ",
                    err[0]), err[0]
    assert problem in err[0], err[0]


def test_serve_refuses_a_bad_key_password_in_one_line(tmp_path: Path, pki: Pki) -> None:
    result = _check(tmp_path, pki, _keystore(pki, "server_encrypted")
                    + '\n"ssl.key.password" = "wrong"', command="serve")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"{tmp_path / 'k.toml'}: ssl.key.password: cannot decrypt the private key in "
        f"{pki.path('server_encrypted')} (wrong password?)"]


def test_good_tls_settings_pass_config_check(tmp_path: Path, pki: Pki) -> None:
    for lines in (_keystore(pki, "server_encrypted") + f'\n"ssl.key.password" = "{KEY_PASSWORD}"',
                  '"ssl.keystore.key" = """' + Path(pki.path("server_key")).read_text()
                  + '"""\n"ssl.keystore.certificate.chain" = """'
                  + Path(pki.path("server_cert")).read_text() + '"""',
                  _keystore(pki, "server") + '\n"ssl.cipher.suites" = '
                  '["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"]'):
        result = _check(tmp_path, pki, lines)
        assert result.returncode == 0, result.stderr


def test_describe_configs_hides_the_key_password(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
) -> None:
    from confluent_kafka.admin import ConfigResource

    b = broker_factory(_tls(pki, ssl_keystore_location=pki.path("server_encrypted"),
                            ssl_key_password=KEY_PASSWORD))
    admin = AdminClient(_librdkafka(b, pki, cert=None))
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    entries = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    password = entries["ssl.key.password"]
    assert password.is_sensitive and password.value is None
    assert entries["ssl.keystore.location"].value == pki.path("server_encrypted")
    assert entries["ssl.client.auth"].value == "none"


def test_a_certificate_no_mapping_rule_names_is_refused(
    broker_factory: Callable[..., EmbeddedBroker], pki: Pki,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Kafka fails the login when no ssl.principal.mapping.rules rule applies."""
    b = broker_factory(_tls(pki, ssl_client_auth="requested",
                            ssl_principal_mapping_rules="RULE:^CN=bob,.*$/bob/"),
                       plugins=PLUGINS)
    assert _refused(_port(b), _client_context(pki, "client"))
    # Without a certificate the client is ANONYMOUS, which no rule is asked about.
    with _tls_socket(_port(b), _client_context(pki)) as s:
        _ask(s, DESCRIBE_TOPIC)
    assert _recorded(b).principals() == {"User:ANONYMOUS"}
    err = capsys.readouterr().err
    assert f"no ssl.principal.mapping.rules rule applies to {CLIENT_SUBJECT}" in err
