"""pytest plugin published as ``kafkernel``: a real broker for users' test suites.

Fixtures:
- ``kafkernel_broker``: bootstrap address (``host:port``) of a broker started for the
  test session on a free port with a temporary data directory.
- ``kafkernel_broker_factory``: call it with settings (Kafka names) to start more
  brokers; they stop at the end of the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernel.testing.embedded import EmbeddedBroker


@pytest.fixture(scope="session")
def kafkernel_broker() -> Iterator[str]:
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@pytest.fixture
def kafkernel_broker_factory() -> Iterator[Callable[..., EmbeddedBroker]]:
    started: list[EmbeddedBroker] = []

    def factory(settings: dict[str, Any] | None = None, **kwargs: Any) -> EmbeddedBroker:
        broker = EmbeddedBroker(settings, **kwargs).start()
        started.append(broker)
        return broker

    yield factory
    for broker in reversed(started):
        broker.stop()
