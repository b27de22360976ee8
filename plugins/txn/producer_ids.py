"""This broker's producer ids: handed out one by one from the block the metadata backend
allocated last, as Kafka's RPCProducerIdManager does with AllocateProducerIds blocks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["PREFETCH_THRESHOLD", "ProducerIdManager"]

# Kafka's RPCProducerIdManager asks for the next block once 90% of the current one is
# handed out, so InitProducerId rarely waits for the metadata log.
PREFETCH_THRESHOLD = 0.9


class ProducerIdManager:
    """Owner of the current block and of the next one, fetched ahead. One allocation is in
    flight at a time: callers that run out wait for it rather than each taking a block.

    :param allocate: the metadata backend's ``allocate_producer_ids``.
    """

    def __init__(self, allocate: Callable[[], Awaitable[range]]) -> None:
        self._allocate = allocate
        self._block = range(0)
        self._next = 0
        self._prefetched: range | None = None
        self._pending: asyncio.Task[None] | None = None

    async def generate_producer_id(self) -> int:
        """A producer id no broker handed out before. Raises ``KafkaError`` when the
        metadata backend cannot allocate a block."""
        while self._next >= self._block.stop:
            if self._prefetched is None:
                await self._fetch_next_block()
            if self._next >= self._block.stop and self._prefetched is not None:
                self._block, self._prefetched = self._prefetched, None
                self._next = self._block.start
        producer_id = self._next
        self._next += 1
        block = self._block
        if (self._prefetched is None and self._pending is None
                and producer_id >= block.start + PREFETCH_THRESHOLD * len(block)):
            # A failed prefetch is retried by the caller that runs out.
            self._fetch_next_block().add_done_callback(
                lambda t: t.cancelled() or t.exception())
        return producer_id

    def _fetch_next_block(self) -> asyncio.Task[None]:
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._fill())
        return self._pending

    async def _fill(self) -> None:
        try:
            self._prefetched = await self._allocate()
        finally:
            self._pending = None

    async def close(self) -> None:
        """Stop a prefetch in flight (the broker is shutting down)."""
        if self._pending is not None:
            self._pending.cancel()
            await asyncio.gather(self._pending, return_exceptions=True)
