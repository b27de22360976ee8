"""Kafka's Java client (the console producer and consumer) over SASL_PLAINTEXT and
SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and its KIP-368
re-authentication under a small connections.max.reauth.ms."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kernel.testing.embedded import EmbeddedBroker
from kernel.testing.pki import make_pki
from reference import tools

PLUGINS = ["metadata_kraft", "coordinator", "txn", "auth_sasl"]
LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def _broker(broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
            **settings: Any) -> tuple[EmbeddedBroker, dict[str, str]]:
    """A broker with a SASL_PLAINTEXT and a SASL_SSL listener; the client settings of
    the latter's TLS."""
    pki = make_pki(tmp_path / "pki")
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\n")
    b = broker_factory({
        "listeners": ["SASL_PLAINTEXT://127.0.0.1:0", "SASL_SSL://127.0.0.1:0"],
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server"),
        **settings,
    }, plugins=PLUGINS, plugin_settings={"auth_sasl": {"plain.users.file": str(users)}})
    tls = {"ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca")}
    return b, tls


def _address(b: EmbeddedBroker, listener: str) -> str:
    assert b.broker is not None
    port = next(lst.port for lst in b.broker.listeners
                if lst.endpoint.listener_name == listener)
    return f"127.0.0.1:{port}"


def _add_scram_user(b: EmbeddedBroker, mechanism: str) -> None:
    admin = AdminClient({"bootstrap.servers": _address(b, "SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "admin", "sasl.password": "admin-secret"})
    kind = getattr(ScramMechanism, mechanism.replace("-", "_"))
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(kind, 4096),
                                          b"carol-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)


def _properties(protocol: str, mechanism: str, tls: dict[str, str]) -> list[str]:
    user, password = (("admin", "admin-secret") if mechanism == "PLAIN"
                      else ("carol", "carol-secret"))
    props = {"security.protocol": protocol, "sasl.mechanism": mechanism,
             "sasl.jaas.config": f'{LOGIN_MODULES[mechanism]} required '
                                 f'username="{user}" password="{password}";'}
    if protocol == "SASL_SSL":
        props.update(tls)
    return [a for k, v in props.items() for a in ("--command-property", f"{k}={v}")]


def _metric(b: EmbeddedBroker, name: str) -> float:
    assert b.broker is not None
    return b.broker.metrics.registry.get_sample_value(name) or 0.0


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_java_console_producer_and_consumer_over_sasl_plaintext_and_sasl_ssl(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path, mechanism: str,
) -> None:
    b, tls = _broker(broker_factory, tmp_path)
    if mechanism != "PLAIN":
        _add_scram_user(b, mechanism)
    for protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        topic = "java-sasl-" + uuid.uuid4().hex[:6]
        props = _properties(protocol, mechanism, tls)
        bootstrap = ("--bootstrap-server", _address(b, protocol))
        produced = tools.run(tools.CONSOLE_PRODUCER, *bootstrap, "--topic", topic, *props,
                             stdin="first\nsecond\n")
        assert produced.returncode == 0, produced.describe()
        consumed = tools.run(tools.CONSOLE_CONSUMER, *bootstrap, "--topic", topic,
                             "--from-beginning", "--max-messages", "2",
                             "--timeout-ms", "20000", *props)
        assert consumed.returncode == 0, consumed.describe()
        assert consumed.stdout.splitlines() == ["first", "second"]
    assert _metric(b, "kafkernel_failed_authentication_total") == 0


def test_the_java_client_reauthenticates_and_keeps_consuming(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    # A 2 s session: the console consumer, waiting 8 s for a message that never comes,
    # fetches all along and must re-authenticate several times to stay connected. Its
    # long polls are kept short (fetch.max.wait.ms): a request queued behind one that
    # ends past the session is refused, as Kafka's muted channel would.
    b, tls = _broker(broker_factory, tmp_path, **{"connections.max.reauth.ms": 2000})
    _add_scram_user(b, "SCRAM-SHA-512")
    props = _properties("SASL_SSL", "SCRAM-SHA-512", tls)
    bootstrap = ("--bootstrap-server", _address(b, "SASL_SSL"))
    produced = tools.run(tools.CONSOLE_PRODUCER, *bootstrap, "--topic", "java-reauth",
                         *props, stdin="only\n")
    assert produced.returncode == 0, produced.describe()
    consumed = tools.run(tools.CONSOLE_CONSUMER, *bootstrap, "--topic", "java-reauth",
                         "--from-beginning", "--max-messages", "2", "--timeout-ms", "8000",
                         "--command-property", "fetch.max.wait.ms=100", *props)
    assert consumed.stdout.splitlines() == ["only"], consumed.describe()
    assert "Processed a total of 1 messages" in consumed.stderr
    assert _metric(b, "kafkernel_successful_reauthentication_total") >= 3
    assert _metric(b, "kafkernel_failed_reauthentication_total") == 0
    assert _metric(b, "kafkernel_expired_connections_killed_total") == 0
