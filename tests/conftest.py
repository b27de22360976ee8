"""Shared fixtures: real brokers started in-process on free ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernel.testing.embedded import EmbeddedBroker


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
