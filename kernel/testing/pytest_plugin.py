"""pytest plugin published as ``kafkernel``: a real broker for users' test suites.

Fixtures:
- ``kafkernel_broker``: bootstrap address (``host:port``) of a broker started for the
  test session on a free port with a temporary data directory.
- ``kafkernel_broker_factory``: call it with settings (Kafka names) to start more
  brokers; they stop at the end of the test.

Installing Kafkernel registers this plugin in every pytest run of the environment, so it
imports nothing of the broker until a fixture is used: the broker and kio (whose
hypothesis strategies a suite that has hypothesis would build) cost seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kernel.testing.embedded import EmbeddedBroker


@pytest.fixture(scope="session")
def kafkernel_broker() -> Iterator[str]:
    from kernel.testing.embedded import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@pytest.fixture
def kafkernel_broker_factory() -> Iterator[Callable[..., EmbeddedBroker]]:
    started: list[EmbeddedBroker] = []

    def factory(settings: dict[str, Any] | None = None, **kwargs: Any) -> EmbeddedBroker:
        from kernel.testing.embedded import EmbeddedBroker

        broker = EmbeddedBroker(settings, **kwargs).start()
        started.append(broker)
        return broker

    yield factory
    for broker in reversed(started):
        broker.stop()
