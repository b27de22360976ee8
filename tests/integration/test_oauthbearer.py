"""OAUTHBEARER (KIP-768) with real clients: JWTs signed by a test identity provider's RSA
keys, checked against its JWKS (a file, or served over HTTP for key rotation);
confluent-kafka, kafka-python and Kafka's Java console clients over SASL_PLAINTEXT and
SASL_SSL; expired tokens, a wrong audience or issuer, a bad signature and an unknown key
fail with Kafka's answer and the broker goes on serving."""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from kafka.net.sasl.oauth import AbstractTokenProvider
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kernel.testing.embedded import EmbeddedBroker
from kernel.testing.pki import make_pki
from reference import tools
from tests.integration.roundtrip import produce_and_consume
from tests.integration.wire import (
    closed_by_broker,
    connect,
    decode_response,
    encode_request,
    recv_frame,
)

PLUGINS = ["metadata_kraft", "coordinator", "txn", "auth_sasl"]
ISSUER, AUDIENCE = "https://idp.test", "kafka"


class IdentityProvider:
    """Signing keys and their JWKS, written to a file and served over HTTP."""

    def __init__(self, directory: Path) -> None:
        self.keys: dict[str, Any] = {}
        self.jwks_file = directory / "jwks.json"
        self.rotate("k1")

    def rotate(self, kid: str, keep_old: bool = False) -> None:
        if not keep_old:
            self.keys.clear()
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.jwks_file.write_text(json.dumps(self.jwks()))

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.keys.items():
            jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "alg": "RS256", "use": "sig"})
        return {"keys": keys}

    def token(self, sub: str = "alice", *, lifetime_s: float = 3600, kid: str | None = None,
              audience: str = AUDIENCE, issuer: str = ISSUER, key: Any = None) -> str:
        kid = kid or next(reversed(self.keys))
        now = time.time()
        claims = {"sub": sub, "iss": issuer, "aud": audience, "iat": int(now),
                  "exp": int(now + lifetime_s), "scope": "kafka"}
        return jwt.encode(claims, key or self.keys[kid], algorithm="RS256",
                          headers={"kid": kid})


@pytest.fixture
def idp(tmp_path: Path) -> IdentityProvider:
    return IdentityProvider(tmp_path)


@pytest.fixture
def jwks_server(idp: IdentityProvider) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(idp.jwks()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    server.shutdown()


def oauth_broker(broker_factory: Callable[..., EmbeddedBroker], jwks_url: str,
                 listener: str = "SASL_PLAINTEXT", **settings: Any) -> EmbeddedBroker:
    settings["listeners"] = [f"{listener}://127.0.0.1:0"]
    settings.setdefault("inter.broker.listener.name", listener)
    return broker_factory(settings, plugins=PLUGINS, plugin_settings={"auth_sasl": {
        "sasl.enabled.mechanisms": ["OAUTHBEARER", "PLAIN"],
        "plain.users": ["admin:admin-secret"],
        "sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        "sasl.oauthbearer.expected.audience": [AUDIENCE],
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "connection.failed.authentication.delay.ms": 0,
    }})


def confluent_conf(b: EmbeddedBroker, token: Callable[[], str],
                   protocol: str = "SASL_PLAINTEXT", **extra: Any) -> dict[str, Any]:
    def oauth_cb(_config: str) -> tuple[str, float]:
        value = token()
        return value, float(jwt.decode(value, options={"verify_signature": False})["exp"])

    return {"bootstrap.servers": b.bootstrap, "security.protocol": protocol,
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb, **extra}


def test_confluent_kafka_over_sasl_plaintext_and_sasl_ssl(
    broker_factory: Callable[..., EmbeddedBroker], idp: IdentityProvider, tmp_path: Path,
) -> None:
    url = idp.jwks_file.as_uri()
    b = oauth_broker(broker_factory, url)
    assert produce_and_consume(confluent_conf(b, idp.token), 5) == [
        f"m{i}".encode() for i in range(5)]
    pki = make_pki(tmp_path / "pki")
    tls = oauth_broker(broker_factory, url, "SASL_SSL", **{
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca")})
    conf = confluent_conf(tls, idp.token, "SASL_SSL", **{"ssl.ca.location": pki.path("ca")})
    assert len(produce_and_consume(conf, 5)) == 5


def test_kafka_python_with_a_token_provider(
    broker_factory: Callable[..., EmbeddedBroker], idp: IdentityProvider,
) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return idp.token("bob")

    b = oauth_broker(broker_factory, idp.jwks_file.as_uri())
    auth: dict[str, Any] = {"bootstrap_servers": b.bootstrap,
                            "security_protocol": "SASL_PLAINTEXT",
                            "sasl_mechanism": "OAUTHBEARER",
                            "sasl_oauth_token_provider": Provider()}
    producer = KafkaProducer(**auth)
    producer.send("kp-oauth", b"hello").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer("kp-oauth", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000, **auth)
    assert [m.value for m in consumer][:1] == [b"hello"]
    consumer.close()


def _login(b: EmbeddedBroker, token: str) -> list[Any]:
    """The SaslAuthenticate answers to ``token``, then to %x01 if the broker sent an
    error challenge; and whether it closed the connection."""
    message = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    answers: list[Any] = []
    with connect(b.bootstrap) as s:
        answers.append(_ask(s, SaslHandshakeRequest(mechanism="OAUTHBEARER")))
        first = _ask(s, SaslAuthenticateRequest(auth_bytes=message))
        answers.append(first)
        if first.error_code == 0 and first.auth_bytes:
            answers.append(_ask(s, SaslAuthenticateRequest(auth_bytes=b"\x01")))
        answers.append(_closed(s))
    return answers


def _closed(sock: Any) -> bool:
    """Whether the broker closes the connection within a second (a failed login is
    closed at once: connection.failed.authentication.delay.ms is 0 here)."""
    sock.settimeout(1)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _ask(sock: Any, body: Any) -> Any:
    sock.sendall(encode_request(body, correlation_id=3))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    return decode_response(frame, body.__api_key__, body.__version__)[1]


@pytest.mark.parametrize("case", ["expired", "audience", "issuer", "signature", "kid",
                                  "alg-none", "no-sub"])
def test_a_bad_token_gets_the_invalid_token_challenge_then_fails(
    broker_factory: Callable[..., EmbeddedBroker], idp: IdentityProvider, case: str,
) -> None:
    b = oauth_broker(broker_factory, idp.jwks_file.as_uri())
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = {
        "expired": lambda: idp.token(lifetime_s=-120),  # beyond the 30 s clock skew
        "audience": lambda: idp.token(audience="not-kafka"),
        "issuer": lambda: idp.token(issuer="https://evil.test"),
        "signature": lambda: idp.token(key=other_key),
        "kid": lambda: idp.token(kid="k1", key=other_key).replace(
            _b64_header({"alg": "RS256", "kid": "k1", "typ": "JWT"}),
            _b64_header({"alg": "RS256", "kid": "unknown", "typ": "JWT"})),
        "alg-none": lambda: jwt.encode({"sub": "mallory", "exp": int(time.time()) + 60,
                                        "aud": AUDIENCE, "iss": ISSUER}, None,
                                       algorithm="none"),
        "no-sub": lambda: _token_without_sub(idp),
    }[case]()
    handshake, challenge, failure, closed = _login(b, token)
    assert handshake.error_code == 0
    assert (challenge.error_code, challenge.auth_bytes) == (0, b'{"status":"invalid_token"}')
    assert (failure.error_code, failure.error_message) == (58, '{"status":"invalid_token"}')
    assert closed
    # and a good token on the next connection still logs in
    handshake, success, closed = _login(b, idp.token())
    assert (success.error_code, closed) == (0, False)


def _b64_header(header: dict[str, str]) -> str:
    raw = json.dumps(header, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _token_without_sub(idp: IdentityProvider) -> str:
    kid = next(iter(idp.keys))
    return jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 60},
                      idp.keys[kid], algorithm="RS256", headers={"kid": kid})


def test_a_malformed_first_message_fails_with_kafkas_generic_message(
    broker_factory: Callable[..., EmbeddedBroker], idp: IdentityProvider,
) -> None:
    b = oauth_broker(broker_factory, idp.jwks_file.as_uri())
    for message in (b"garbage", b"n,,\x01auth=Basic abc\x01\x01", b"n,,\x01\x01",
                    b"\xff\xfe"):
        with connect(b.bootstrap) as s:
            _ask(s, SaslHandshakeRequest(mechanism="OAUTHBEARER"))
            answer = _ask(s, SaslAuthenticateRequest(auth_bytes=message))
            assert answer.error_code == 58
            assert answer.error_message == ("Authentication failed during authentication "
                                            "due to invalid credentials with SASL mechanism "
                                            "OAUTHBEARER")
            assert closed_by_broker(s)


def test_a_rotated_key_is_picked_up_from_the_jwks_endpoint(
    broker_factory: Callable[..., EmbeddedBroker], idp: IdentityProvider, jwks_server: str,
) -> None:
    b = oauth_broker(broker_factory, jwks_server)
    assert _login(b, idp.token())[1].error_code == 0
    idp.rotate("k2")
    # the first token of the new key names a kid the broker lacks: it is refused and the
    # JWKS is fetched again, so a later login succeeds
    deadline = time.monotonic() + 15
    while _login(b, idp.token())[1].auth_bytes and time.monotonic() < deadline:
        time.sleep(0.2)
    _handshake, success, closed = _login(b, idp.token())
    assert (success.error_code, success.auth_bytes, closed) == (0, b"", False)


def test_java_console_clients_log_in_with_a_token_file(
    broker_factory: Callable[..., EmbeddedBroker], idp: IdentityProvider, tmp_path: Path,
) -> None:
    """Kafka's own OAuthBearerLoginCallbackHandler reads the token from a file URL."""
    b = oauth_broker(broker_factory, idp.jwks_file.as_uri())
    token_file = tmp_path / "token.jwt"
    token_file.write_text(idp.token("carol"))
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer."
        "OAuthBearerLoginCallbackHandler\n"
        f"sasl.oauthbearer.token.endpoint.url={token_file.as_uri()}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer."
        "OAuthBearerLoginModule required ;\n")
    jvm = [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={token_file.as_uri()}"]
    produced = tools.run(tools.CONSOLE_PRODUCER, "--bootstrap-server", b.bootstrap,
                         "--topic", "java-oauth", "--command-config", str(props),
                         stdin="first\nsecond\n", jvm_options=jvm)
    assert produced.returncode == 0, produced.describe()
    consumed = tools.run(tools.CONSOLE_CONSUMER, "--bootstrap-server", b.bootstrap,
                         "--topic", "java-oauth", "--from-beginning", "--max-messages", "2",
                         "--timeout-ms", "20000", "--command-config", str(props),
                         jvm_options=jvm)
    assert consumed.returncode == 0, consumed.describe()
    assert consumed.stdout.splitlines() == ["first", "second"]
