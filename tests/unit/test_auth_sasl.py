"""The auth_sasl mechanisms without a broker: any bytes a client sends fail the exchange
with one of the two failures Kafka answers (never another exception), and a SCRAM client
following RFC 5802 is accepted."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.auth_sasl.exchange import AuthenticationFailed, InvalidCredentials
from plugins.auth_sasl.plain import PlainServer, parse_users
from plugins.auth_sasl.scram import MECHANISMS, ScramCredential, ScramServer

SHA256 = MECHANISMS["SCRAM-SHA-256"]
SALT = b"pepper"
CREDENTIAL = ScramCredential(SALT, *SHA256.keys(SHA256.salted_password("pw", SALT, 4096)),
                             4096)


def _scram() -> ScramServer:
    return ScramServer(SHA256, lambda user, _: CREDENTIAL if user == "u,=" else None)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_plain_refuses_any_bytes_cleanly(data: bytes) -> None:
    try:
        PlainServer({"alice": "secret"}).evaluate(data)
    except AuthenticationFailed:
        pass
    else:
        assert data.split(b"\0")[1:] == [b"alice", b"secret"]


# Mutations of a well-formed client-first message reach the deeper checks too.
FIRST = b"n,,n=u=2C=3D,r=abc"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200),
                 st.builds(lambda cut, tail: FIRST[:cut] + tail,
                           st.integers(0, len(FIRST)), st.binary(max_size=20))),
       st.binary(max_size=200))
def test_scram_refuses_any_bytes_cleanly(first: bytes, final: bytes) -> None:
    server = _scram()
    try:
        server.evaluate(first)
        server.evaluate(final)
    except (AuthenticationFailed, InvalidCredentials):
        return
    pytest.fail("random bytes completed a SCRAM exchange")


def test_scram_accepts_an_rfc_5802_client_and_escaped_names() -> None:
    server = _scram()
    server_first = server.evaluate(FIRST).decode()
    fields = dict(f.split("=", 1) for f in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", base64.b64decode(fields["s"]), 4096)
    without_proof = f"c=biws,r={fields['r']}"
    auth = f"{FIRST[3:].decode()},{server_first},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
    server.evaluate(f"{without_proof},p={proof.decode()}".encode())
    assert server.complete and server.username == "u,="


def test_password_file_lines() -> None:
    assert parse_users(["# c", "", "a:b:c", " d:e "], "f") == {"a": "b:c", "d": "e"}
    with pytest.raises(ValueError, match="f: line 2"):
        parse_users(["a:b", "oops"], "f")
