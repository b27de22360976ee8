"""kernel.network.tls's pure parts: Kafka's SslPrincipalMapper rules (the cases of
Kafka's SslPrincipalMapperTest), the subject DN as Java's X500Principal.getName() gives
it, and IANA cipher suite names as OpenSSL's."""

from __future__ import annotations

import pytest

from kernel.config import ConfigError
from kernel.network.tls import NoMatchingRule, PrincipalMapper, openssl_cipher_name, rfc2253


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    "",
    ",   , , ,      , , ,   ",
])
def test_valid_rules(rules: str) -> None:
    PrincipalMapper.parse(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules: invalid"):
        PrincipalMapper.parse(rules)


def test_the_first_rule_that_matches_names_the_principal() -> None:
    mapper = PrincipalMapper.parse(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US")
            == "OU=JavaSoft,O=Sun Microsystems,C=US")


def test_a_comma_in_a_value_and_back_references() -> None:
    mapper = PrincipalMapper.parse("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"
    # A reference to a group the pattern lacks stays literal, as in Kafka's mapper.
    assert PrincipalMapper.parse("RULE:^CN=(.*?),.*$/$1-$2/").name("CN=a,O=b") == "a-$2"


def test_no_matching_rule() -> None:
    with pytest.raises(NoMatchingRule):
        PrincipalMapper.parse("RULE:^CN=x$/y/").name("CN=z")


def test_subject_in_rfc2253_form_as_java_gives_it() -> None:
    subject = ((("countryName", "NL"),), (("organizationName", "A, B+C"),),
               (("organizationalUnitName", "#ops"),),
               (("commonName", "alice"), ("emailAddress", "a@x.org")))
    assert rfc2253(subject) == (
        "CN=alice+1.2.840.113549.1.9.1=#1607" + b"a@x.org".hex()
        + ",OU=\\#ops,O=A\\, B\\+C,C=NL")


@pytest.mark.parametrize(("iana", "openssl"), [
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"),
    ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
    ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
])
def test_cipher_suite_names(iana: str, openssl: str) -> None:
    assert openssl_cipher_name(iana) == openssl
