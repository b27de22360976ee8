"""Tests with a real ZooKeeper (metadata_zk, replication between brokers)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
