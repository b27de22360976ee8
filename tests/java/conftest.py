"""Kafka's Java client and Kafka's own command-line tools against a Kafkernel broker.

Every check here starts a JVM (reference/tools.py), about 1.5 s each on a small machine,
so one tool run is made to answer several questions where that reads naturally."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernel.cluster import ClusterImage
from kernel.testing.embedded import EmbeddedBroker
from reference import tools
from reference.kafka import KafkaNotFetched, ReferenceKafka
from tests.integration.groups import GROUP_SETTINGS

HERE = Path(__file__).resolve().parent
CLIENT_CHECK = "KafkaClientCheck"


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    """Two partitions for an auto-created topic, so two group members split each one;
    quick rebalances."""
    return broker_factory({"num.partitions": 2}, plugin_settings={"coordinator": GROUP_SETTINGS})


@pytest.fixture(scope="session")
def client_check() -> Path:
    """tests/java/KafkaClientCheck.java, compiled once (and not again while unchanged)."""
    try:
        return tools.compile_java([HERE / f"{CLIENT_CHECK}.java"], "client-check")
    except KafkaNotFetched as e:  # missing jars or JDK fail, never skip
        pytest.fail(str(e), pytrace=False)


# A Kafkernel of the transactional Kafka's shape (few transaction and offsets partitions).
TRANSACTIONAL_KAFKERNEL = {"txn": {"transaction.state.log.num.partitions": 3},
                           "coordinator": {"offsets.topic.num.partitions": 3}}


@pytest.fixture(params=["kafka", "kafkernel"])
def transactional_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """The transactional reference Kafka (tests/conftest.py), or a fresh Kafkernel."""
    if request.param == "kafka":
        kafka: ReferenceKafka = request.getfixturevalue("transactional_kafka")
        yield kafka.bootstrap
    else:
        factory: Callable[..., EmbeddedBroker] = request.getfixturevalue("broker_factory")
        yield factory(plugin_settings=TRANSACTIONAL_KAFKERNEL).bootstrap


def image(broker: EmbeddedBroker) -> ClusterImage:
    assert broker.broker is not None
    return broker.broker.metadata.image


def lines(output: str, event: str) -> list[dict[str, str]]:
    """The ``event key=value ...`` lines of KafkaClientCheck's output, as dicts."""
    found = []
    for line in output.splitlines():
        head, *pairs = line.split(" ")
        if head == event:
            found.append(dict(p.split("=", 1) for p in pairs))
    return found
