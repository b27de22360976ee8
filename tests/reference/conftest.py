"""The differential pair: the session's reference Kafka and a Kafkernel broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.reference.diff import Pair, kafka_side, kafkernel_side

# What the reference Kafka runs with that Kafkernel's defaults differ from.
SHARED_PLUGIN_SETTINGS = {"coordinator": {"group.initial.rebalance.delay.ms": 0}}


@pytest.fixture
def pair(reference_kafka: ReferenceKafka, broker: EmbeddedBroker) -> Pair:
    return Pair(kafka_side(reference_kafka), kafkernel_side(broker))


@pytest.fixture(scope="session")
def shared_kafkernel() -> Iterator[EmbeddedBroker]:
    """One Kafkernel broker for the conformance tests, as the reference Kafka is one:
    tests create uniquely named topics and groups."""
    with EmbeddedBroker(plugin_settings=SHARED_PLUGIN_SETTINGS) as broker:
        yield broker


@pytest.fixture
def shared(request: pytest.FixtureRequest, reference_kafka: ReferenceKafka,
           shared_kafkernel: EmbeddedBroker) -> Iterator[Pair]:
    """The session's two brokers; an error the Kafkernel broker logged during the test
    fails it unless it is marked ``broker_errors``, as the ``broker`` fixture does."""
    assert shared_kafkernel.broker is not None
    errors = shared_kafkernel.broker.recent_errors
    errors.clear()
    yield Pair(kafka_side(reference_kafka), kafkernel_side(shared_kafkernel))
    logged = list(errors)
    errors.clear()
    if logged and request.node.get_closest_marker("broker_errors") is None:
        pytest.fail("the broker logged errors:\n" + "\n".join(logged), pytrace=False)
