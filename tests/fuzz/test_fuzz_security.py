"""The fuzzer on a broker's security listeners (run with the suite for a bounded number
of inputs, as test_fuzz_broker.py): mutated SASL exchanges (SaslHandshake v0/v1, then a
mutated SaslAuthenticate or raw token, for PLAIN and SCRAM) on a SASL_PLAINTEXT
listener; pre-authentication frames there (size prefixes over
sasl.server.max.receive.size, frames trickled in pieces, garbage after a handshake); and
mutated or truncated TLS ClientHellos, and plaintext Kafka frames, on SSL and SASL_SSL
listeners. The oracle is the Fuzzer's: the broker never dies, never logs an error, keeps
answering new connections, and its RSS stays bounded."""

from __future__ import annotations

import contextlib
import random
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as HandshakeV1

from kernel.testing.pki import make_pki
from tests.broker_process import BrokerProcess, free_port
from tests.fuzz.harness import Fuzzer
from tests.fuzz.inputs import mutate
from tests.fuzz.test_fuzz_broker import fuzz_settings
from tests.integration.wire import encode_request

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# What each mechanism's first client message looks like, before mutation.
FIRST_MESSAGES = {"PLAIN": b"\x00admin\x00admin-secret",
                  "SCRAM-SHA-256": b"n,,n=admin,r=fyko+d2lbbFgONRv9qkxdawL",
                  "SCRAM-SHA-512": b"n,,n=admin,r=fyko+d2lbbFgONRv9qkxdawL"}


class SecurityPorts:
    def __init__(self) -> None:
        self.ssl = free_port()
        self.sasl_ssl = free_port()


@pytest.fixture(scope="module")
def ports() -> SecurityPorts:
    return SecurityPorts()


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory, ports: SecurityPorts) -> Iterator[Fuzzer]:
    workdir: Path = tmp_path_factory.mktemp("fuzz-security")
    pki = make_pki(workdir / "pki")
    broker = BrokerProcess(workdir, plugins=("metadata_kraft", "coordinator", "txn",
                                             "auth_sasl"))
    listeners = (f'["SASL_PLAINTEXT://127.0.0.1:{broker.port}", '
                 f'"SSL://127.0.0.1:{ports.ssl}", "SASL_SSL://127.0.0.1:{ports.sasl_ssl}"]')
    broker.args += [
        "--override", f"listeners={listeners}",
        "--override", "inter.broker.listener.name=SASL_PLAINTEXT",
        "--override", "ssl.keystore.type=PEM",
        "--override", f"ssl.keystore.location={pki.path('server')}",
        "--override", "ssl.truststore.type=PEM",
        "--override", f"ssl.truststore.location={pki.path('ca')}",
        "--override", 'plugins.auth_sasl.plain.users=["admin:admin-secret"]',
        "--override", "plugins.auth_sasl.connection.failed.authentication.delay.ms=0",
    ]
    with broker:
        f = Fuzzer(broker)
        yield f
        f.check()
        print("fuzz:", f.summary())


def client_hello() -> bytes:
    """The first flight of a real TLS client (Python's OpenSSL), to mutate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """``data`` with a few bytes flipped, cut, inserted or dropped (no framing kept)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(out)) if out else 0
        op = rng.randrange(4)
        if op == 0 and out:
            out[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            del out[at:]
        elif op == 2:
            out[at:at] = rng.randbytes(rng.randint(1, 16))
        else:
            del out[at:at + rng.randint(1, 16)]
    return bytes(out)


def test_mutated_sasl_exchanges_on_a_sasl_listener(fuzzer: Fuzzer) -> None:
    @fuzz_settings(150)
    @given(st.sampled_from(MECHANISMS), st.integers(0, 2), st.randoms(use_true_random=False))
    def one(mechanism: str, form: int, rng: random.Random) -> None:
        token = mutate_bytes(FIRST_MESSAGES[mechanism], rng)
        if form == 0:  # v1: a SaslAuthenticate frame, itself mutated
            data = encode_request(HandshakeV1(mechanism=mechanism)) + mutate(
                encode_request(SaslAuthenticateRequest(auth_bytes=token)), rng)
        elif form == 1:  # v0: a raw token follows the handshake
            data = (encode_request(HandshakeV0(mechanism=mechanism))
                    + struct.pack(">i", len(token)) + token)
        else:  # a mutated handshake, then whatever follows
            data = mutate(encode_request(HandshakeV1(mechanism=mechanism)), rng) + token
        fuzzer.send(data)

    one()


SASL_MAX_RECEIVE_SIZE = 524288  # sasl.server.max.receive.size's default


def test_pre_authentication_frames_on_a_sasl_listener(fuzzer: Fuzzer) -> None:
    @fuzz_settings(60)
    @given(st.sampled_from(MECHANISMS), st.integers(0, 3), st.randoms(use_true_random=False))
    def one(mechanism: str, form: int, rng: random.Random) -> None:
        v1, v0 = (encode_request(HandshakeV1(mechanism=mechanism)),
                  encode_request(HandshakeV0(mechanism=mechanism)))
        token = FIRST_MESSAGES[mechanism]
        if form == 0:  # a size prefix over the limit, then some of what it claims
            claim = rng.choice((SASL_MAX_RECEIVE_SIZE + 1, 10 << 20, 100_000_000, 2**31 - 1))
            body = encode_request(SaslAuthenticateRequest(auth_bytes=token))[4:]
            data = (rng.choice((v0, v1)) + struct.pack(">i", claim) + body
                    + bytes(rng.randint(0, 64 * 1024)))
            fuzzer.send(data)
        elif form == 1:  # a whole exchange trickled in small pieces
            data = v1 + encode_request(SaslAuthenticateRequest(auth_bytes=token))
            fuzzer.send(data, pieces=rng.randint(2, 8), pause_s=0.02)
        elif form == 2:  # a frame under the limit, trickled and never finished
            size = rng.randint(1024, SASL_MAX_RECEIVE_SIZE)
            data = v1 + struct.pack(">i", size) + rng.randbytes(rng.randint(0, 4096))
            fuzzer.send(data, pieces=rng.randint(2, 6), pause_s=0.02)
        else:  # garbage after a handshake, framed or not
            garbage = rng.randbytes(rng.randint(1, 2048))
            if rng.random() < 0.5:
                garbage = struct.pack(">i", len(garbage)) + garbage
            fuzzer.send(rng.choice((v0, v1)) + garbage)

    one()


def test_mutated_tls_client_hellos_and_plaintext_on_tls_listeners(
    fuzzer: Fuzzer, ports: SecurityPorts,
) -> None:
    hello = client_hello()
    metadata = encode_request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False))

    @fuzz_settings(150)
    @given(st.sampled_from((ports.ssl, ports.sasl_ssl)), st.booleans(),
           st.randoms(use_true_random=False))
    def one(port: int, tls: bool, rng: random.Random) -> None:
        fuzzer.send(mutate_bytes(hello if tls else metadata, rng), port=port)

    one()
    # and an intact TLS client still gets its handshake answered afterwards
    fuzzer.send(hello, port=ports.ssl)
    fuzzer.check()
