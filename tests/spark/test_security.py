"""Spark's Kafka connector over SASL_SSL: the ``kafka.security.protocol``,
``kafka.sasl.*`` and ``kafka.ssl.*`` options users know, against a Kafkernel SASL_SSL
listener (SCRAM-SHA-512, a PEM truststore as KIP-651 allows): a batch read, a write, the
export job, and a wrong password refused at once rather than retried."""

from __future__ import annotations

import time
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
from spark.export import start_query
from spark.options import ExportOptions
from spark.progress import exported_offsets
from tests.spark.kafka import consume_all, create_topic, expected, produce, rows

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
USER, PASSWORD = "spark", "spark-secret"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


def spark_options(ca: str, password: str = PASSWORD) -> dict[str, str]:
    """The source's and sink's options, as a Spark user writes them."""
    return {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config":
            f'{SCRAM_LOGIN} required username="{USER}" password="{password}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": ca,
    }


@pytest.fixture
def secured(broker_factory: Callable[..., EmbeddedBroker],
            tmp_path: Path) -> tuple[EmbeddedBroker, str, dict[str, Any]]:
    """A broker with only a SASL_SSL listener, the SCRAM user made by a PLAIN admin; the
    broker, the CA's PEM file and confluent-kafka's settings for the user."""
    pki = make_pki(tmp_path / "pki")
    users = tmp_path / "users"
    users.write_text(f"{ADMIN}:{ADMIN_PASSWORD}\n")
    b = broker_factory({
        "listeners": ["SASL_SSL://127.0.0.1:0"], "inter.broker.listener.name": "SASL_SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca"),
    }, plugins=["metadata_kraft", "coordinator", "txn", "auth_sasl"], plugin_settings={
        "auth_sasl": {"plain.users.file": str(users),
                      "connection.failed.authentication.delay.ms": 0},
        "coordinator": {"offsets.topic.num.partitions": 1},
        "txn": {"transaction.state.log.num.partitions": 1}})
    tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": pki.path("ca")}
    admin = AdminClient({"bootstrap.servers": b.bootstrap, **tls, "sasl.mechanism": "PLAIN",
                         "sasl.username": ADMIN, "sasl.password": ADMIN_PASSWORD})
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)
    return b, pki.path("ca"), {**tls, "sasl.mechanism": "SCRAM-SHA-512",
                               "sasl.username": USER, "sasl.password": PASSWORD}


def test_read_write_and_export_over_sasl_ssl(
        spark: Any, secured: tuple[EmbeddedBroker, str, dict[str, Any]], topic_name: str,
        tmp_path: Path) -> None:
    broker, ca, conf = secured
    create_topic(broker.bootstrap, topic_name, 2, conf)
    sent = produce(broker.bootstrap, topic_name, 20, 2, conf=conf)
    options = spark_options(ca)

    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic_name).option("includeHeaders", "true"))
    df = reader.options(**options).load()
    assert rows(df) == expected(topic_name, sent)

    copy = topic_name + "-copy"
    create_topic(broker.bootstrap, copy, 1, conf)
    (df.selectExpr("key", "value").write.format("kafka")
     .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", copy)
     .options(**options).save())
    got = consume_all(broker.bootstrap, copy, len(sent), conf=conf)
    assert sorted(m.value() for m in got) == sorted(s.value for s in sent)

    # The export job takes the same options through its kafka table (--kafka KEY=VALUE).
    export = ExportOptions(
        name="secure", path=str(tmp_path / "table"), bootstrap_servers=broker.bootstrap,
        topics=(topic_name,), master="local[2]",
        kafka={k.removeprefix("kafka."): v for k, v in options.items()})
    query = start_query(spark, export, available_now=True)
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    assert exported_offsets(export.checkpoint_location) == {
        (topic_name, 0): 10, (topic_name, 1): 10}
    assert spark.read.parquet(export.path).count() == len(sent)


def test_a_wrong_password_fails_the_read_at_once(
        spark: Any, secured: tuple[EmbeddedBroker, str, dict[str, Any]],
        topic_name: str) -> None:
    broker, ca, conf = secured
    create_topic(broker.bootstrap, topic_name, 1, conf)
    began = time.monotonic()
    with pytest.raises(Exception, match="Authentication failed"):
        (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", topic_name).options(**spark_options(ca, "wrong"))
         .load().collect())
    # Not retried until a timeout: SaslAuthenticationException is not retriable.
    assert time.monotonic() - began < 15
