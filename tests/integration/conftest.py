"""Fixtures the integration tests share beyond the top-level ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.groups import PolledMember


@pytest.fixture
def members() -> Iterator[list[PolledMember]]:
    """Group members a test starts; each leaves its group when the test ends."""
    started: list[PolledMember] = []
    yield started
    for m in started:
        m.leave()
