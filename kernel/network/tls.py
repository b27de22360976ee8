"""TLS for the SSL and SASL_SSL listeners: a server ``ssl.SSLContext`` made from Kafka's
``ssl.*`` settings (PEM keystores and truststores, KIP-651), each overridable per
listener with ``listener.name.<listener>.``, and the mTLS principal: Kafka's
DefaultKafkaPrincipalBuilder names a client by its certificate's subject in RFC 2253
form, mapped by ``ssl.principal.mapping.rules``; a client without one is ANONYMOUS.

Everything is checked when the listener is made, so ``kafkernel serve`` and
``kafkernel config check`` refuse a missing file, a key that is not the certificate's or
a wrong key password in one line naming the setting.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kernel.config import BrokerConfig, ConfigError, schema_keys

TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
PEM = "PEM"
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                "required": ssl.CERT_REQUIRED}
# TLS 1.3 suites: OpenSSL keeps them apart from the TLS 1.2 list that Python can set.
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                           "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                           "TLS_AES_128_CCM_8_SHA256"})


class ListenerSettings:
    """The ``ssl.*`` settings one listener sees: its ``listener.name.<name>.`` value,
    else the broker's; ``where`` is the key an error names."""

    def __init__(self, cfg: BrokerConfig, listener_name: str) -> None:
        self._cfg = cfg
        self._overrides: Mapping[str, Any] = cfg.listener_overrides.get(listener_name, {})
        self._prefix = f"listener.name.{listener_name.lower()}."
        self._keys = schema_keys(BrokerConfig)

    def __getitem__(self, name: str) -> Any:
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._cfg, self._keys[name].attr)

    def where(self, name: str) -> str:
        return self._prefix + name if name in self._overrides else name


@dataclass(frozen=True, slots=True)
class ServerTls:
    """A TLS listener's context and how its clients' principals are named."""

    context: ssl.SSLContext
    principal_of: Callable[[Any], str]


def server_tls(cfg: BrokerConfig, listener_name: str) -> ServerTls:
    """The listener's TLS, or a ConfigError ``KEY: problem`` (one line, no traceback)."""
    s = ListenerSettings(cfg, listener_name)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_keystore(ctx, s, listener_name)
    client_auth = s["ssl.client.auth"]
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    trusted = _load_truststore(ctx, s)
    if not trusted and client_auth != "none":
        # Kafka's JVM falls back to its default truststore; ours is the system's CAs.
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    enabled = [_VERSIONS[p] for p in s["ssl.enabled.protocols"]]
    ctx.minimum_version = min(enabled)
    ctx.maximum_version = max(enabled)
    _set_ciphers(ctx, s)
    mapper = PrincipalMapper.parse(s["ssl.principal.mapping.rules"],
                                   s.where("ssl.principal.mapping.rules"))
    return ServerTls(ctx, lambda ssl_object: principal_of(ssl_object, mapper))


def inter_broker_client_tls(cfg: BrokerConfig, listener_name: str) -> ssl.SSLContext:
    """The context a follower connects to a leader's SSL inter-broker listener with:
    the listener's own keystore as its client certificate (Kafka's brokers present it
    to each other), its truststore (else the system's CAs) to check the leader, and
    the host name checked unless ssl.endpoint.identification.algorithm is empty."""
    s = ListenerSettings(cfg, listener_name)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _load_keystore(ctx, s, listener_name)
    if not _load_truststore(ctx, s):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = bool(s["ssl.endpoint.identification.algorithm"])
    enabled = [_VERSIONS[p] for p in s["ssl.enabled.protocols"]]
    ctx.minimum_version = min(enabled)
    ctx.maximum_version = max(enabled)
    return ctx


def _read(path: str, key: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"{key}: cannot read {path}: {e.strerror}") from None


def _pem_only(s: ListenerSettings, type_key: str, given: bool) -> None:
    kind = s[type_key]
    if given and kind.upper() != PEM:
        raise ConfigError(f"{s.where(type_key)}: {kind} is not supported; set {type_key} "
                          "to PEM (PEM files, as Kafka's KIP-651)")


def _load_keystore(ctx: ssl.SSLContext, s: ListenerSettings, listener_name: str) -> None:
    location = s["ssl.keystore.location"]
    chain, key = s["ssl.keystore.certificate.chain"], s["ssl.keystore.key"]
    if location is None and chain is None and key is None:
        raise ConfigError(
            f"{s.where('ssl.keystore.location')}: listener {listener_name} uses TLS and has "
            "no keystore: set ssl.keystore.location (a PEM file with the key and its "
            "certificate chain) or ssl.keystore.certificate.chain and ssl.keystore.key"
        )
    _pem_only(s, "ssl.keystore.type", True)
    if s["ssl.keystore.password"] is not None:
        raise ConfigError(f"{s.where('ssl.keystore.password')}: a PEM keystore has no "
                          "password; an encrypted key takes ssl.key.password")
    if location is not None:
        if chain is not None or key is not None:
            raise ConfigError(f"{s.where('ssl.keystore.location')}: set either the file or "
                              "ssl.keystore.certificate.chain and ssl.keystore.key, not both")
        where = s.where("ssl.keystore.location")
        text = _read(location, where)
        source = location
    else:
        if chain is None or key is None:
            missing = "ssl.keystore.key" if key is None else "ssl.keystore.certificate.chain"
            raise ConfigError(f"{s.where(missing)}: needed with the other inline PEM setting")
        where = s.where("ssl.keystore.key")
        text = f"{key.strip()}\n{chain.strip()}\n"
        source = "ssl.keystore.key"
    if "PRIVATE KEY-----" not in text:
        raise ConfigError(f"{where}: {source} holds no PEM private key")
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"{where}: {source} holds no PEM certificate")
    password = s["ssl.key.password"]
    password_key = s.where("ssl.key.password")
    encrypted = "ENCRYPTED PRIVATE KEY-----" in text or "Proc-Type: 4,ENCRYPTED" in text
    if encrypted and password is None:
        raise ConfigError(f"{password_key}: the private key in {source} is encrypted; "
                          "set ssl.key.password")
    # A callable: OpenSSL never prompts on a terminal for a password it was not given.
    def secret() -> str:
        return password or ""

    try:
        if location is not None:
            ctx.load_cert_chain(location, password=secret)
        else:
            # Python loads a chain from a file only: a private one, gone at once.
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "keystore.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                ctx.load_cert_chain(path, password=secret)
    except ssl.SSLError as e:
        reason = e.reason or ""
        if reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"{where}: the private key in {source} does not match its "
                              "certificate") from None
        if encrypted:
            raise ConfigError(f"{password_key}: cannot decrypt the private key in {source} "
                              "(wrong password?)") from None
        raise ConfigError(f"{where}: cannot load the key and certificate chain in "
                          f"{source}: {reason or e}") from None


def _load_truststore(ctx: ssl.SSLContext, s: ListenerSettings) -> bool:
    location, inline = s["ssl.truststore.location"], s["ssl.truststore.certificates"]
    if location is None and inline is None:
        return False
    _pem_only(s, "ssl.truststore.type", True)
    if s["ssl.truststore.password"] is not None:
        raise ConfigError(f"{s.where('ssl.truststore.password')}: a PEM truststore has no "
                          "password")
    if location is not None and inline is not None:
        raise ConfigError(f"{s.where('ssl.truststore.location')}: set either the file or "
                          "ssl.truststore.certificates, not both")
    where = s.where("ssl.truststore.location" if location else "ssl.truststore.certificates")
    text = _read(location, where) if location is not None else inline
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"{where}: {location or 'the setting'} holds no PEM certificate")
    try:
        ctx.load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(f"{where}: cannot load the certificates in "
                          f"{location or 'the setting'}: {getattr(e, 'reason', None) or e}"
                          ) from None
    return True


def openssl_cipher_name(suite: str) -> str:
    """An IANA (Java) cipher suite name as OpenSSL names it, e.g.
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256; other names
    are taken as OpenSSL's."""
    if not suite.startswith("TLS_") or "_WITH_" not in suite:
        return suite
    kx, _, cipher = suite[4:].partition("_WITH_")
    cipher = re.sub(r"^AES_(\d+)", r"AES\1", cipher)
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    parts = ([] if kx == "RSA" else kx.split("_")) + cipher.split("_")
    return "-".join(parts)


def _set_ciphers(ctx: ssl.SSLContext, s: ListenerSettings) -> None:
    suites = s["ssl.cipher.suites"]
    if not suites:
        return
    where = s.where("ssl.cipher.suites")
    names = []
    for suite in suites:
        if suite in _TLS13_SUITES:
            continue
        name = openssl_cipher_name(suite)
        try:
            ctx.set_ciphers(name)
        except ssl.SSLError:
            raise ConfigError(f"{where}: unknown cipher suite {suite}") from None
        names.append(name)
    if names:
        ctx.set_ciphers(":".join(names))
    elif ctx.maximum_version == ssl.TLSVersion.TLSv1_3:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3  # only TLS 1.3 suites were named
    else:
        raise ConfigError(f"{where}: no cipher suite for the enabled protocols")


# -- the principal ---------------------------------------------------------------------

# How Java's X500Principal.getName(RFC2253) names attributes: these by keyword, any
# other by its OID with the value's DER in hex (tag, length, bytes).
_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
# OpenSSL's long name -> (OID, the ASN.1 string type certificates use for it).
_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", 0x16),
    "serialNumber": ("2.5.4.5", 0x13),
    "dnQualifier": ("2.5.4.46", 0x13),
    "surname": ("2.5.4.4", 0x0C),
    "givenName": ("2.5.4.42", 0x0C),
    "title": ("2.5.4.12", 0x0C),
    "initials": ("2.5.4.43", 0x0C),
    "generationQualifier": ("2.5.4.44", 0x0C),
    "pseudonym": ("2.5.4.65", 0x0C),
    "businessCategory": ("2.5.4.15", 0x0C),
    "postalCode": ("2.5.4.17", 0x0C),
}
_OID = re.compile(r"^\d+(\.\d+)+$")


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _der_hex(value: str, tag: int) -> str:
    data = value.encode()
    n = len(data)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + \
        n.to_bytes((n.bit_length() + 7) // 8, "big")
    return "#" + (bytes([tag]) + length + data).hex()


def rfc2253(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """A subject as Python's ``getpeercert()`` gives it (RDNs in certificate order, long
    names) in the form Java's X500Principal.getName() gives it: RDNs last to first."""
    rdns = []
    for rdn in reversed(subject):
        avas = []
        for name, value in rdn:
            keyword = _KEYWORDS.get(name)
            if keyword is not None:
                avas.append(f"{keyword}={_escape(value)}")
                continue
            oid, tag = _OIDS.get(name, (name, 0x0C))
            if not _OID.match(oid):
                oid, tag = name, 0x0C  # a name OpenSSL knows and this table does not
            avas.append(f"{oid}={_der_hex(value, tag)}")
        rdns.append("+".join(avas))
    return ",".join(rdns)


class NoMatchingRule(Exception):
    """No ``ssl.principal.mapping.rules`` rule applies to a certificate's subject."""


_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        if self.case == "L":
            return result.lower()
        return result.upper() if self.case == "U" else result


def _python_replacement(java: str, groups: int) -> str:
    """Java's replacement syntax ($1; \\$ for a literal) as re.sub's (\\g<1>); a back
    reference to a group the pattern lacks stays literal, as Kafka's mapper has it."""
    out = []
    i = 0
    while i < len(java):
        c = java[i]
        if c == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        m = _BACK_REFERENCE.match(java, i)
        if m is not None:
            digits = m.group(1)
            # Java takes the longest number that names a group: $12 with 3 groups is $1, "2".
            n = len(digits)
            while n > 1 and int(digits[:n]) > groups:
                n -= 1
            index = int(digits[:n])
            if index <= groups:
                out.append(f"\\g<{index}>{digits[n:]}")
            else:
                out.append("$" + digits)
            i = m.end()
            continue
        out.append("\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """Kafka's SslPrincipalMapper: the first rule that matches the whole DN names it."""

    rules: tuple[_Rule, ...]

    @classmethod
    def parse(cls, text: str, key: str = "ssl.principal.mapping.rules") -> PrincipalMapper:
        rules = []
        for m in _RULE_SPLITTER.finditer(text.strip()):
            raw = m.group(1)
            parsed = _RULE_PARSER.match(raw)
            if parsed is None or parsed.end() != len(raw):
                raise ConfigError(f"{key}: invalid rule {raw!r}")
            if parsed.group(1) is not None:
                rules.append(_Rule(None))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as e:
                    raise ConfigError(f"{key}: invalid pattern in {raw!r}: {e}") from None
                replacement = _python_replacement(parsed.group(4), pattern.groups)
                rules.append(_Rule(pattern, replacement, parsed.group(6) or ""))
            elif parsed.group(7):
                raise ConfigError(f"{key}: invalid rule {raw!r}")
            if m.end() >= len(text.strip()):
                break
        return cls(tuple(rules))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn}")


def principal_of(ssl_object: Any, mapper: PrincipalMapper) -> str:
    """User:<mapped subject DN> of a verified client certificate, else User:ANONYMOUS.
    Raises NoMatchingRule when no rule names the subject (Kafka fails the login)."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert or "subject" not in cert:
        return "User:ANONYMOUS"
    return "User:" + mapper.name(rfc2253(cert["subject"]))
