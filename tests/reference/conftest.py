"""The differential pair: the session's reference Kafka and a Kafkernel broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernel.testing.embedded import EmbeddedBroker
from reference import kafka as reference_launcher
from reference.kafka import ReferenceKafka
from tests.reference.diff import Pair, kafka_side, kafkernel_side

# The SASL pair's users (sasl_kafka, sasl_kafkernel): admin is the super user.
SASL_USERS = {"admin": "admin-secret", "alice": "alice-secret"}

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


# A pair for the security APIs: SASL_PLAINTEXT with PLAIN and SCRAM, an authorizer, the
# super user admin, on Kafka and on Kafkernel configured the same way.
@pytest.fixture(scope="module")
def sasl_kafka() -> Iterator[str]:
    try:
        k = reference_launcher.start(sasl_users=SASL_USERS)
    except reference_launcher.KafkaNotFetched as e:
        pytest.fail(str(e), pytrace=False)
    yield k.bootstrap
    k.stop()


@pytest.fixture(scope="module")
def sasl_kafkernel() -> Iterator[str]:
    with EmbeddedBroker(
        {"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"],
         "inter.broker.listener.name": "SASL_PLAINTEXT"},
        plugins=["metadata_kraft", "coordinator", "txn", "auth_sasl", "acl"],
        plugin_settings={
            "auth_sasl": {"plain.users": [f"{u}:{p}" for u, p in SASL_USERS.items()],
                          "connection.failed.authentication.delay.ms": 0},
            "acl": {"super.users": "User:admin"},
            "coordinator": {"group.initial.rebalance.delay.ms": 0},
        },
    ) as broker:
        yield broker.bootstrap
