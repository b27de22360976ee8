"""Delayed operations and the purgatory that holds them until they complete or expire.

A Produce with ``acks=all`` waits for the ISR to reach its offsets; a Fetch waits for
``min_bytes`` or ``max_wait_ms``. Each such request becomes a ``DelayedOperation`` parked
in a ``Purgatory``, watched under keys (a ``(topic, partition)`` tuple, a group id, any
hashable) and put in a ``Timer`` with the request's timeout. Whoever changes the state an
operation waits on (an append, a high watermark move) calls ``check_and_complete(key)``;
the timer expires the rest.

Everything runs on the broker's single event-loop thread, so unlike Kafka there are no
locks, no ``safeTryComplete`` and no sharded watcher lists: ``try_complete``,
``on_complete`` and ``check_and_complete`` can never run concurrently.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Collection, Hashable
from typing import Any, Generic, TypeVar

from kernel.purgatory.timing_wheel import Timer, TimerTask

__all__ = ["DelayedOperation", "DelayedResponse", "Purgatory"]


class DelayedOperation(TimerTask):
    """A request that may answer later, within ``delay_ms`` (its timeout).

    ``on_complete`` runs exactly once, either from ``try_complete`` (the condition is met)
    or from the timer (the timeout passed, then ``on_expiration`` runs too); the first of
    the two to call ``force_complete`` wins and the other is a no-op.
    """

    __slots__ = ("_completed", "_purgatory")

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self._completed = False
        # The purgatory whose timer holds this operation, so its num_delayed stays exact.
        self._purgatory: Purgatory[Any] | None = None

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now unless already completed; True only for the caller that completed.

        Used by ``try_complete`` once the condition holds, and by the timer on expiry.
        """
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        self.on_complete()
        return True

    def cancel(self) -> None:
        """Stop the timeout without completing the operation."""
        super().cancel()
        purgatory = self._purgatory
        if purgatory is not None:
            self._purgatory = None
            purgatory._num_delayed -= 1

    def run(self) -> None:
        """Timer expiry: complete the operation as it stands, then account the expiration."""
        if self.force_complete():
            self.on_expiration()

    @abstractmethod
    def try_complete(self) -> bool:
        """Check whether the operation can complete now; if so return
        ``self.force_complete()``, else False. Must not block or await."""

    @abstractmethod
    def on_complete(self) -> None:
        """Send the response; called exactly once, by ``force_complete``."""

    @abstractmethod
    def on_expiration(self) -> None:
        """Called after ``on_complete`` when the timeout caused completion (metrics)."""


class DelayedResponse(DelayedOperation):
    """A delayed operation that a request handler awaits (``wait_in``): its completion,
    by its condition or by its timeout, resolves ``done``; the handler then answers."""

    __slots__ = ("done",)

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_complete(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def on_expiration(self) -> None:
        pass

    async def wait_in(self, purgatory: Purgatory[Any], keys: Collection[Hashable]) -> None:
        """Watch on ``keys`` unless it completes at once, then wait for completion. A
        cancelled wait (the connection went away) stops the timeout too."""
        if purgatory.try_complete_else_watch(self, keys):
            return
        try:
            await self.done
        except asyncio.CancelledError:
            self.cancel()
            raise


T = TypeVar("T", bound=DelayedOperation)


class Purgatory(Generic[T]):
    """Delayed operations of one kind (e.g. "Produce", "Fetch"), by watch key and by time.

    Completed operations are not looked up in every watch list at completion (the
    operation does not know its keys); like Kafka they are dropped lazily, when their key
    is checked or when about ``purge_interval`` completed ones may have accumulated.

    ``timer`` may be shared by all purgatories of a broker (one event-loop wakeup for all);
    without one the purgatory creates and owns its own (reporting failures to ``logger``).
    """

    def __init__(
        self,
        name: str,
        timer: Timer | None = None,
        *,
        purge_interval: int = 1000,
        logger: Any | None = None,
    ) -> None:
        self.name = name
        self._owns_timer = timer is None
        self._timer = Timer(logger=logger) if timer is None else timer
        self._purge_interval = purge_interval
        # key -> {id(op): op}: insertion-ordered, O(1) removal, and operations need not be
        # hashable (a dataclass subclass with eq=True is not).
        self._watchers_by_key: dict[Hashable, dict[int, T]] = {}
        self._watched_count = 0
        self._num_delayed = 0
        # Operations ever watched since the last purge (Kafka's estimatedTotalOperations);
        # minus num_delayed it estimates completed operations still in watch lists.
        self._estimated_total = 0
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"Purgatory({self.name!r}, delayed={self._num_delayed}, watched={self._watched_count})"
        )

    @property
    def timer(self) -> Timer:
        return self._timer

    @property
    def num_delayed(self) -> int:
        """Operations waiting in the timer (not yet completed or expired)."""
        return self._num_delayed

    @property
    def watched_count(self) -> int:
        """Entries in all watch lists, an operation counted once per key; includes
        completed operations not yet purged (Kafka's ``watched`` gauge)."""
        return self._watched_count

    def watched(self, key: Hashable) -> int:
        """Entries in the watch list of ``key``."""
        watchers = self._watchers_by_key.get(key)
        return 0 if watchers is None else len(watchers)

    def try_complete_else_watch(self, operation: T, watch_keys: Collection[Hashable]) -> bool:
        """Complete ``operation`` now if it can; else watch it on every key and start its
        timeout. Returns True if it completed here (the caller answers at once).

        Kafka tries again after watching because another thread may have completed the
        condition meanwhile; on one event-loop thread nothing changes in between, so one
        try (each parked Fetch checks its partitions once, not twice) is enough.
        """
        if self._closed:
            raise RuntimeError(f"purgatory {self.name} is shut down")
        if not watch_keys:
            raise ValueError("the watch key list can't be empty")
        if operation.try_complete():
            return True
        for key in watch_keys:
            self._watch(key, operation)
        self._estimated_total += 1
        if not operation.is_completed:
            operation._purgatory = self
            self._num_delayed += 1
            self._timer.add(operation)  # may expire it at once if delay_ms <= 0
        self._maybe_purge()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete the operations watched on ``key``; returns how many completed.

        Completed operations leave this key's list. Safe against re-entry: an
        ``on_complete`` may itself call ``check_and_complete`` or watch new operations.
        """
        watchers = self._watchers_by_key.get(key)
        if watchers is None:
            return 0
        completed = 0
        for op_id, op in list(watchers.items()):
            if not op.is_completed:
                if not op.try_complete():
                    continue
                completed += 1
            if watchers.pop(op_id, None) is not None:
                self._watched_count -= 1
        if not watchers and self._watchers_by_key.get(key) is watchers:
            del self._watchers_by_key[key]
        return completed

    def purge_completed(self) -> int:
        """Drop completed operations from every watch list; returns entries removed."""
        purged = 0
        for key, watchers in list(self._watchers_by_key.items()):
            done = [op_id for op_id, op in watchers.items() if op.is_completed]
            for op_id in done:
                del watchers[op_id]
            purged += len(done)
            if not watchers:
                del self._watchers_by_key[key]
        self._watched_count -= purged
        return purged

    def shutdown(self) -> None:
        """Stop all timeouts and forget every operation; none is completed or expired
        (the broker is going away with the connections that would get the answers)."""
        self._closed = True
        for watchers in self._watchers_by_key.values():
            for op in watchers.values():
                op.cancel()
        self._watchers_by_key.clear()
        self._watched_count = 0
        self._estimated_total = 0
        if self._owns_timer:
            self._timer.shutdown()

    # -- internals ---------------------------------------------------------------------

    def _watch(self, key: Hashable, operation: T) -> None:
        watchers = self._watchers_by_key.get(key)
        if watchers is None:
            watchers = self._watchers_by_key[key] = {}
        op_id = id(operation)
        if op_id not in watchers:
            watchers[op_id] = operation
            self._watched_count += 1

    def _maybe_purge(self) -> None:
        # Kafka's reaper does this on its poll loop; here new operations are what brings
        # completed ones in, so checking on each new delayed operation bounds the garbage.
        if self._estimated_total - self._num_delayed > self._purge_interval:
            self._estimated_total = self._num_delayed
            self.purge_completed()
