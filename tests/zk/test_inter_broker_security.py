"""Brokers that talk to each other over a secured inter-broker listener, as Kafka's do:
followers log in to their leader with sasl.mechanism.inter.broker.protocol and the user
of listener.name.<listener>.<mechanism>.sasl.jaas.config, over SASL_PLAINTEXT (PLAIN)
or SASL_SSL (SCRAM-SHA-512, TLS checked against the CA), while clients use a PLAINTEXT
listener. acks=all is answered only once every follower has fetched the records, so an
acknowledged write proves the followers logged in; with a wrong password they never
do, and the leader counts the failed logins."""

from __future__ import annotations

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
from prometheus_client import generate_latest

from kernel.testing.embedded import EmbeddedBroker
from kernel.testing.pki import Pki, make_pki
from tests.zk.conftest import ZK_PLUGINS
from tests.zk.test_replication_zk import (
    FAST,
    _bootstrap,
    _create_topic,
    _produce,
    _replica,
    _wait,
)

Factory = Callable[..., EmbeddedBroker]
BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
PLAIN_LOGIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
               'username="{user}" password="{password}";')
SCRAM_LOGIN = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
               'username="{user}" password="{password}";')


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def users_file(tmp_path: Path) -> str:
    path = tmp_path / "users"
    path.write_text(f"{BROKER_USER}:{BROKER_PASSWORD}\n")
    return str(path)


def _secured_cluster(zk_broker_factory: Factory, users_file: str, listener: str,
                     mechanism: str, login: str, **settings: Any) -> list[EmbeddedBroker]:
    """Three brokers: clients on PLAINTEXT, the brokers between themselves on
    ``listener`` with ``mechanism``, logging in as ``login``."""
    jaas_key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    return [zk_broker_factory(
        {"broker.id": i, **FAST,
         "listeners": ["PLAINTEXT://127.0.0.1:0", f"{listener}://127.0.0.1:0"],
         "inter.broker.listener.name": listener,
         "sasl.mechanism.inter.broker.protocol": mechanism, jaas_key: login, **settings},
        zk={"zookeeper.session.timeout.ms": 6000},
        plugins=[*ZK_PLUGINS, "auth_sasl"],
        plugin_settings={"auth_sasl": {"plain.users.file": users_file,
                                       "connection.failed.authentication.delay.ms": 0}})
        for i in (1, 2, 3)]


def _replicated_to_all(brokers: list[EmbeddedBroker], topic: str, count: int) -> None:
    acked = _produce(_bootstrap(brokers), topic, [f"v{i}".encode() for i in range(count)])
    assert len(acked) == count
    for b in brokers:
        _wait(f"broker {b.broker.config.broker_id}'s replica to have {count} records",
              lambda b=b: _replica(b, topic).log.log_end_offset == count)


def test_followers_log_in_with_plain_over_sasl_plaintext(
        zk_broker_factory: Factory, users_file: str) -> None:
    brokers = _secured_cluster(
        zk_broker_factory, users_file, "SASL_PLAINTEXT", "PLAIN",
        PLAIN_LOGIN.format(user=BROKER_USER, password=BROKER_PASSWORD))
    _create_topic(brokers, "sasl-replicated", min_isr=3)
    _replicated_to_all(brokers, "sasl-replicated", 100)


def test_followers_log_in_with_scram_over_sasl_ssl(
        zk_broker_factory: Factory, users_file: str, pki: Pki) -> None:
    brokers = _secured_cluster(
        zk_broker_factory, users_file, "SASL_SSL", "SCRAM-SHA-512",
        SCRAM_LOGIN.format(user="replicator", password="replicator-secret"),
        **{"ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server"),
           "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca")})
    # The SCRAM user exists before any follower needs it: created over PLAINTEXT, kept
    # in ZooKeeper where every broker reads it.
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    upsert = UserScramCredentialUpsertion(
        "replicator", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        b"replicator-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)
    _create_topic(brokers, "scram-replicated", min_isr=3)
    _replicated_to_all(brokers, "scram-replicated", 100)


def test_a_wrong_password_keeps_followers_out(zk_broker_factory: Factory,
                                              users_file: str) -> None:
    brokers = _secured_cluster(
        zk_broker_factory, users_file, "SASL_PLAINTEXT", "PLAIN",
        PLAIN_LOGIN.format(user=BROKER_USER, password="not-the-password"))
    _create_topic(brokers, "kept-out", min_isr=1)
    acked = _produce(_bootstrap(brokers), "kept-out", [b"only-on-the-leader"], acks="1")
    assert len(acked) == 1
    leader = next(b for b in brokers if _replica(b, "kept-out").is_leader)

    def failed_logins() -> float:
        assert leader.broker is not None
        text = generate_latest(leader.broker.metrics.registry).decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("kafkernel_failed_authentication_total"))

    _wait("the leader to refuse the followers' logins", lambda: failed_logins() >= 2)
    assert all(_replica(b, "kept-out").log.log_end_offset == 0
               for b in brokers if b is not leader)
