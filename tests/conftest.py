"""Shared fixtures: real brokers started in-process on free ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kernel.testing.embedded import EmbeddedBroker


@pytest.fixture
def broker_factory() -> Iterator[Callable[..., EmbeddedBroker]]:
    started: list[EmbeddedBroker] = []

    def factory(settings: dict[str, Any] | None = None, **kwargs: Any) -> EmbeddedBroker:
        b = EmbeddedBroker(settings, **kwargs).start()
        started.append(b)
        return b

    yield factory
    for b in reversed(started):
        b.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    return broker_factory()
