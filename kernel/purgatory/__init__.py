"""Purgatory: requests that wait for a condition or a timeout (acks=all Produce, Fetch
long poll, group joins), on a hierarchical timing wheel driven by the event loop."""

from kernel.purgatory.delayed import DelayedOperation, DelayedResponse, Purgatory
from kernel.purgatory.timing_wheel import (
    Timer,
    TimerTask,
    TimerTaskEntry,
    TimerTaskList,
    TimingWheel,
    monotonic_ms,
)

__all__ = [
    "DelayedOperation",
    "DelayedResponse",
    "Purgatory",
    "Timer",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
    "monotonic_ms",
]
