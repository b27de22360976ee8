"""The client's side of SASL a broker logs in to another broker with
(kernel/protocol/sasl_client.py), and where its login comes from
(kernel/network/inter_broker.py): RFC 7677's SCRAM-SHA-256 example exchange byte for
byte, a server signature that does not verify, PLAIN's one token, and Kafka's JAAS
login strings with their errors."""

from __future__ import annotations

import pytest

from kernel.config import BrokerConfig, ConfigError, load_config
from kernel.network.inter_broker import inter_broker_sasl, parse_jaas_login
from kernel.protocol.sasl_client import (
    SaslClientError,
    SaslCredentials,
    ScramClient,
    client_for,
)

# RFC 7677 section 3.
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc_client() -> ScramClient:
    return ScramClient(SaslCredentials("SCRAM-SHA-256", "user", "pencil"), nonce=RFC_NONCE)


def test_scram_sha_256_exchange_of_rfc_7677() -> None:
    client = _rfc_client()
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.next(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.next(RFC_SERVER_FINAL) is None


@pytest.mark.parametrize(("server_final", "message"), [
    (b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "does not verify"),
    (b"e=invalid-proof", "refused: invalid-proof"),
    (b"x=what", "malformed"),
])
def test_a_server_final_that_does_not_verify_is_refused(server_final: bytes,
                                                         message: str) -> None:
    client = _rfc_client()
    client.first()
    client.next(RFC_SERVER_FIRST)
    with pytest.raises(SaslClientError, match=message):
        client.next(server_final)


@pytest.mark.parametrize(("server_first", "message"), [
    (b"r=someone-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
    (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,i=4096", "malformed"),
    (b"\xff\xfe", "malformed"),
])
def test_a_malformed_server_first_is_refused(server_first: bytes, message: str) -> None:
    client = _rfc_client()
    client.first()
    with pytest.raises(SaslClientError, match=message):
        client.next(server_first)


def test_scram_escapes_the_user_name() -> None:
    client = ScramClient(SaslCredentials("SCRAM-SHA-512", "a=b,c", "p"), nonce="n")
    assert client.first() == b"n,,n=a=3Db=2Cc,r=n"


def test_plain_is_one_token() -> None:
    client = client_for(SaslCredentials("PLAIN", "broker", "secret"))
    assert client.first() == b"\0broker\0secret"
    assert client.next(b"") is None


PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required ' \
        'username="broker" password="se\\"cret";'


def test_a_jaas_login_gives_its_user_and_password() -> None:
    assert parse_jaas_login(PLAIN, "k", "PLAIN") == ("broker", 'se"cret')
    scram = ("org.apache.kafka.common.security.scram.ScramLoginModule required\n"
             "    username=broker\n    password=\"x;y\";")
    assert parse_jaas_login(scram, "k", "SCRAM-SHA-512") == ("broker", "x;y")


@pytest.mark.parametrize(("login", "mechanism", "message"), [
    ("not a login", "PLAIN", "k: not a JAAS login"),
    (PLAIN, "SCRAM-SHA-256", "PlainLoginModule does not log in with SCRAM-SHA-256"),
    ('x.PlainLoginModule required username="u";', "PLAIN", "no password"),
    ('x.PlainLoginModule required username="u" password="p" user_u="p";', "PLAIN",
     "user_u: Kafkernel's PLAIN users come from"),
])
def test_a_bad_jaas_login_is_one_line_naming_its_key(login: str, mechanism: str,
                                                     message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_jaas_login(login, "k", mechanism)


def _config(**flat: object) -> BrokerConfig:
    return load_config(None, extra=flat).broker


def test_the_listener_s_login_wins_over_sasl_jaas_config() -> None:
    other = PLAIN.replace('username="broker"', 'username="global"')
    cfg = _config(**{"sasl.mechanism.inter.broker.protocol": "PLAIN",
                     "sasl.jaas.config": other,
                     "listener.name.internal.plain.sasl.jaas.config": PLAIN})
    assert inter_broker_sasl(cfg, "INTERNAL") == SaslCredentials("PLAIN", "broker", 'se"cret')
    assert inter_broker_sasl(cfg, "OTHER") == SaslCredentials("PLAIN", "global", 'se"cret')
    assert inter_broker_sasl(_config(), "INTERNAL") is None


def test_gssapi_is_refused_once_a_login_is_given() -> None:
    cfg = _config(**{"sasl.jaas.config": PLAIN})
    with pytest.raises(ConfigError, match="GSSAPI is not supported"):
        inter_broker_sasl(cfg, "INTERNAL")
