"""Run a real Kafkernel broker inside a test process; run a coordinator runtime without
one over :mod:`kernel.testing.partition_writer`.

``EmbeddedBroker`` is imported on first use: the pytest plugin of this package is loaded
by every pytest run where Kafkernel is installed, and must not import the broker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernel.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker"]


def __getattr__(name: str) -> Any:
    if name == "EmbeddedBroker":
        from kernel.testing.embedded import EmbeddedBroker

        return EmbeddedBroker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
