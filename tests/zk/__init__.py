"""Tests with a real ZooKeeper (metadata_zk, replication between brokers)."""

from collections.abc import Callable
from typing import Any

from tests.cluster import harness

__all__ = ["wait_until"]


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """The harness's wait, polling faster: these brokers run in-process, and some tests
    act in the moment between two states."""
    return harness.wait_until(condition, what, timeout, interval=0.05)
