"""Shared fixtures: real brokers started in-process on free ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernel.testing.embedded import EmbeddedBroker
from reference import kafka as reference_kafka_launcher


@pytest.fixture
def broker_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., EmbeddedBroker]]:
    """Brokers stopped after the test; one that logged an error fails the test unless it
    is marked ``broker_errors`` (a failure that was only logged is still a failure)."""
    started: list[EmbeddedBroker] = []

    def factory(settings: dict[str, Any] | None = None, **kwargs: Any) -> EmbeddedBroker:
        b = EmbeddedBroker(settings, **kwargs).start()
        started.append(b)
        return b

    yield factory
    for b in reversed(started):
        b.stop()
    errors = [e for b in started for e in b.logged_errors]
    if errors and request.node.get_closest_marker("broker_errors") is None:
        pytest.fail("the broker logged errors:\n" + "\n".join(errors), pytrace=False)


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    return broker_factory()


@pytest.fixture(scope="session")
def reference_kafka() -> Iterator[reference_kafka_launcher.ReferenceKafka]:
    """The real Apache Kafka (reference/kafka.py), started once per session. Missing jars
    fail the test: the reference is never skipped silently."""
    try:
        kafka = reference_kafka_launcher.start()
    except reference_kafka_launcher.KafkaNotFetched as e:
        missing = str(e)
    else:
        yield kafka
        kafka.stop()
        return
    pytest.fail(missing, pytrace=False)


# A second reference Kafka for the transaction tests: they leave __transaction_state behind,
# which the session's reference must not have (tests/reference/test_internal_topics.py),
# and they need timed-out transactions aborted within a second, not Kafka's 10 s.
TRANSACTIONAL_KAFKA = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    # the compaction conformance tests: the cleaner looks for work every 100 ms, not 15 s
    "log.cleaner.backoff.ms": "100",
}


@pytest.fixture(scope="session")
def transactional_kafka() -> Iterator[reference_kafka_launcher.ReferenceKafka]:
    """A real Apache Kafka for transactions (TRANSACTIONAL_KAFKA), started once per
    session; missing jars fail the test, as for ``reference_kafka``."""
    try:
        kafka = reference_kafka_launcher.start(heap="512m", overrides=TRANSACTIONAL_KAFKA)
    except reference_kafka_launcher.KafkaNotFetched as e:
        missing = str(e)
    else:
        yield kafka
        kafka.stop()
        return
    pytest.fail(missing, pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The session's reference Kafka is shared: tests marked ``reference_pristine`` run
    first, to see it as started (e.g. before a group made Kafka create
    __consumer_offsets); tests marked ``reference_destructive`` run last, as they change
    it for good (more partitions of __consumer_offsets, deleted internal topics)."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("reference_pristine") is not None:
            return 0
        return 2 if item.get_closest_marker("reference_destructive") is not None else 1

    items.sort(key=rank)
