"""Kafka's kafka-acls adds, lists and removes ACLs on a Kafkernel broker with the acl
plugin, over SASL_PLAINTEXT as a super user authenticated with PLAIN; the ACLs it adds
are enforced on a confluent-kafka producer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.testing.embedded import EmbeddedBroker
from reference import tools
from tests.java.test_cli_tools import ok


def test_kafka_acls_adds_lists_and_removes_acls(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\nalice:alice-secret\n")
    b = broker_factory({"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"],
                        "inter.broker.listener.name": "SASL_PLAINTEXT"},
                       plugins=["metadata_kraft", "coordinator", "txn", "auth_sasl", "acl"],
                       plugin_settings={"auth_sasl": {"plain.users.file": str(users)},
                                        "acl": {"super.users": "User:admin"}})
    admin = tmp_path / "admin.properties"
    admin.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n')
    base = ("--bootstrap-server", b.bootstrap, "--command-config", str(admin))
    sasl = {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN"}
    client = AdminClient({**sasl, "sasl.username": "admin", "sasl.password": "admin-secret"})
    for future in client.create_topics([NewTopic("orders", 1, 1)]).values():
        future.result(timeout=15)

    def alice_writes() -> KafkaError | None:
        errors: list[KafkaError | None] = []
        producer = Producer({**sasl, "sasl.username": "alice",
                             "sasl.password": "alice-secret", "message.timeout.ms": 10000})
        producer.produce("orders", b"v", on_delivery=lambda err, _: errors.append(err))
        producer.flush(15)
        return errors[0]

    refused = alice_writes()
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    out = ok(tools.run(tools.ACL_COMMAND, *base, "--add", "--allow-principal", "User:alice",
                       "--producer", "--topic", "ord", "--resource-pattern-type", "prefixed"))
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ord, " \
           "patternType=PREFIXED)`" in out
    assert alice_writes() is None

    listed = ok(tools.run(tools.ACL_COMMAND, *base, "--list", "--topic", "orders",
                          "--resource-pattern-type", "match"))
    # --producer is WRITE, DESCRIBE and CREATE on the topic pattern
    for operation in ("WRITE", "DESCRIBE", "CREATE"):
        assert (f"(principal=User:alice, host=*, operation={operation}, "
                "permissionType=ALLOW)") in listed, listed

    ok(tools.run(tools.ACL_COMMAND, *base, "--remove", "--force", "--allow-principal",
                 "User:alice", "--producer", "--topic", "ord",
                 "--resource-pattern-type", "prefixed"))
    listed = ok(tools.run(tools.ACL_COMMAND, *base, "--list"))
    assert "User:alice" not in listed, listed
    refused = alice_writes()
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_java_console_clients_can_do_what_their_acls_allow_and_nothing_else(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    """Kafka's Java producer (idempotent by default: KIP-679 lets WRITE on the topic do)
    and a Java consumer in a group, as a user with WRITE and READ on one topic and READ
    on one group."""
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\nalice:alice-secret\n")
    b = broker_factory({"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"],
                        "inter.broker.listener.name": "SASL_PLAINTEXT"},
                       plugins=["metadata_kraft", "coordinator", "txn", "auth_sasl", "acl"],
                       plugin_settings={"auth_sasl": {"plain.users.file": str(users)},
                                        "acl": {"super.users": "User:admin"}})
    admin = tmp_path / "admin.properties"
    admin.write_text(_sasl_properties("admin", "admin-secret"))
    alice = tmp_path / "alice.properties"
    alice.write_text(_sasl_properties("alice", "alice-secret"))
    base = ("--bootstrap-server", b.bootstrap, "--command-config", str(admin))
    ok(tools.run(tools.TOPIC_COMMAND, "--bootstrap-server", b.bootstrap, "--command-config",
                 str(admin), "--create", "--topic", "orders", "--partitions", "1"))
    ok(tools.run(tools.ACL_COMMAND, *base, "--add", "--allow-principal", "User:alice",
                 "--operation", "Write", "--operation", "Read", "--topic", "orders"))
    ok(tools.run(tools.ACL_COMMAND, *base, "--add", "--allow-principal", "User:alice",
                 "--operation", "Read", "--group", "orders-app"))

    client = ("--bootstrap-server", b.bootstrap, "--command-config", str(alice))
    ok(tools.run(tools.CONSOLE_PRODUCER, *client, "--topic", "orders",
                 stdin="first\nsecond\n"))
    consumed = ok(tools.run(tools.CONSOLE_CONSUMER, *client, "--topic", "orders",
                            "--group", "orders-app", "--from-beginning", "--max-messages",
                            "2", "--timeout-ms", "20000"))
    assert consumed.splitlines() == ["first", "second"]

    refused = tools.run(tools.CONSOLE_CONSUMER, *client, "--topic", "orders", "--group",
                        "other-app", "--from-beginning", "--max-messages", "1",
                        "--timeout-ms", "10000")
    # (the console consumer logs the error and exits 0, as against Kafka)
    assert "GroupAuthorizationException: Not authorized to access group: other-app" \
        in refused.stderr, refused.describe()
    assert refused.stdout == ""
    refused = tools.run(tools.TOPIC_COMMAND, *client, "--create", "--topic", "not-hers",
                        "--partitions", "1")
    assert refused.returncode != 0
    assert "TopicAuthorizationException" in refused.stdout + refused.stderr, \
        refused.describe()


def _sasl_properties(user: str, password: str) -> str:
    return ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
            f'required username="{user}" password="{password}";\n')
