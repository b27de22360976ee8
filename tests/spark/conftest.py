"""Spark's own Kafka connector (spark-sql-kafka-0-10, resolved by Spark through Ivy)
against Kafkernel. A Spark JVM takes seconds to start, so the tests share one
SparkSession (local mode, two cores) and one broker per module, each test on topics of
its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kernel.testing.embedded import EmbeddedBroker
from spark.session import PysparkMissing, build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the whole test session. A missing pyspark or connector
    fails the tests: Spark compatibility is never skipped silently."""
    try:
        session = build_session("local[2]", "kafkernel-tests", {
            # Few shuffle partitions: the tests' data is small.
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
        })
    except PysparkMissing as e:
        pytest.fail(str(e), pytrace=False)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def kafkernel() -> Iterator[EmbeddedBroker]:
    """One broker per module; one that logged an error fails the module's last test."""
    broker = EmbeddedBroker(plugin_settings={
        "coordinator": {"offsets.topic.num.partitions": 1},
        "txn": {"transaction.state.log.num.partitions": 1},
    }).start()
    yield broker
    broker.stop()
    if broker.logged_errors:
        pytest.fail("the broker logged errors:\n" + "\n".join(broker.logged_errors),
                    pytrace=False)


@pytest.fixture
def topic_name() -> str:
    return "spark-" + uuid.uuid4().hex[:8]
