"""Certificates for TLS tests and benchmarks, made with ``cryptography`` (the test
extra): a CA, a server certificate for 127.0.0.1 and localhost, client certificates
signed by the CA or by another one, written as PEM files the way Kafka's PEM keystores
hold them (KIP-651: PKCS#8 key followed by the certificate chain)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "key-secret"
CLIENT_SUBJECT = "CN=alice,OU=payments,O=Kafkernel,C=NL"


@dataclass(frozen=True)
class Issued:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def key_pem(self, password: str | None = None) -> str:
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password.encode()) if password
            else serialization.NoEncryption())
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8, encryption).decode()

    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()


def _name(cn: str, *, ou: str | None = None, o: str = "Kafkernel", c: str = "NL") -> x509.Name:
    # Certificate order: C, O, OU, CN; RFC 2253 lists them the other way round.
    attrs = [x509.NameAttribute(NameOID.COUNTRY_NAME, c),
             x509.NameAttribute(NameOID.ORGANIZATION_NAME, o)]
    if ou is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _issue(subject: x509.Name, issuer: Issued | None, *, ca: bool = False,
           server: bool = False) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]), critical=False).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    signer = issuer.key if issuer else key
    return Issued(key, builder.sign(signer, hashes.SHA256()))


@dataclass(frozen=True)
class Pki:
    """PEM files under one directory: ``ca`` (the truststore), ``server`` (key and
    chain), ``server_encrypted`` (its key under KEY_PASSWORD), ``client`` (subject
    CLIENT_SUBJECT) and ``client_key``/``client_cert`` apart for the clients that want
    them so, and ``rogue_*``: a client certificate from a CA the broker does not trust."""

    dir: Path
    ca_cert: Issued
    server_cert: Issued
    client_cert_issued: Issued

    def path(self, name: str) -> str:
        return str(self.dir / f"{name}.pem")


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _issue(_name("Kafkernel test CA"), None, ca=True)
    server = _issue(_name("localhost"), ca, server=True)
    client = _issue(_name("alice", ou="payments"), ca)
    rogue_ca = _issue(_name("Rogue CA"), None, ca=True)
    rogue = _issue(_name("mallory"), rogue_ca)
    other = _issue(_name("other"), ca, server=True)
    files = {
        "ca": ca.cert_pem(),
        "server": server.key_pem() + server.cert_pem() + ca.cert_pem(),
        "server_encrypted": server.key_pem(KEY_PASSWORD) + server.cert_pem(),
        "server_key": server.key_pem(),
        "server_cert": server.cert_pem(),
        # Another certificate with the server's key: a key that does not match it.
        "mismatched": server.key_pem() + other.cert_pem(),
        "client": client.key_pem() + client.cert_pem(),
        "client_key": client.key_pem(),
        "client_cert": client.cert_pem(),
        "rogue_key": rogue.key_pem(),
        "rogue_cert": rogue.cert_pem(),
    }
    for name, text in files.items():
        (directory / f"{name}.pem").write_text(text)
    return Pki(directory, ca, server, client)
