"""Run a real Kafkernel broker inside a test process; run a coordinator runtime without
one over :mod:`kernel.testing.partition_writer`."""

from kernel.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker"]
