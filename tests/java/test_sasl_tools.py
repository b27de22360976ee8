"""Kafka's kafka-configs creates and deletes SCRAM users on a Kafkernel broker
with the auth_sasl plugin, over SASL_PLAINTEXT as an admin authenticated with PLAIN."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ScramMechanism

from kernel.testing.embedded import EmbeddedBroker
from reference import tools
from tests.java.test_cli_tools import ok


def test_kafka_configs_creates_scram_users(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\n")
    b = broker_factory({"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"],
                        "inter.broker.listener.name": "SASL_PLAINTEXT"},
                       plugins=["metadata_kraft", "coordinator", "txn", "auth_sasl"],
                       plugin_settings={"auth_sasl": {"plain.users.file": str(users)}})
    admin = tmp_path / "admin.properties"
    admin.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n')
    base = ("--bootstrap-server", b.bootstrap, "--command-config", str(admin))
    sasl = {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "admin",
            "sasl.password": "admin-secret"}
    user = ("--entity-type", "users", "--entity-name", "carol")
    # One mechanism per request: Kafka's ScramControlManager refuses a user twice in one
    # AlterUserScramCredentials (DUPLICATE_RESOURCE), and so does Kafkernel.
    for config in ("SCRAM-SHA-256=[iterations=8192,password=carol-secret]",
                   "SCRAM-SHA-512=[password=carol-secret]"):
        out = ok(tools.run(tools.CONFIG_COMMAND, *base, "--alter", *user,
                           "--add-config", config))
        assert out.strip() == "Completed updating config for user carol."
    # (kafka-configs --describe of users also lists client quotas, which Kafkernel does
    # not serve: the AdminClient lists the credentials.)
    assert described(sasl) == {(ScramMechanism.SCRAM_SHA_256, 8192),
                               (ScramMechanism.SCRAM_SHA_512, 4096)}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        producer = Producer({**sasl, "sasl.mechanism": mechanism,
                             "sasl.username": "carol", "sasl.password": "carol-secret"})
        assert producer.list_topics(timeout=10).brokers
    ok(tools.run(tools.CONFIG_COMMAND, *base, "--alter", *user, "--delete-config",
                 "SCRAM-SHA-512"))
    assert described(sasl) == {(ScramMechanism.SCRAM_SHA_256, 8192)}


def described(conf: dict[str, str]) -> set[tuple[ScramMechanism, int]]:
    admin = AdminClient(conf)
    result = admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=15)
    return {(c.mechanism, c.iterations) for c in result.scram_credential_infos}
