"""Run a real Kafkernel broker inside a test process."""

from kernel.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker"]
