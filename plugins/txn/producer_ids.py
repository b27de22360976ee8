"""This broker's producer ids: handed out one by one from the block the metadata backend
allocated last, as Kafka's RPCProducerIdManager does with AllocateProducerIds blocks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["ProducerIdManager"]


class ProducerIdManager:
    """Owner of the current block. The next block is asked for when this one is used
    up, by one caller at a time: others wait for it rather than each taking a block.

    :param allocate: the metadata backend's ``allocate_producer_ids``.
    """

    def __init__(self, allocate: Callable[[], Awaitable[range]]) -> None:
        self._allocate = allocate
        self._block = range(0)
        self._next = 0
        self._allocating = asyncio.Lock()

    async def generate_producer_id(self) -> int:
        """A producer id no broker handed out before. Raises ``KafkaError`` when the
        metadata backend cannot allocate a block."""
        while self._next >= self._block.stop:
            async with self._allocating:
                if self._next >= self._block.stop:  # nobody allocated while we waited
                    self._block = await self._allocate()
                    self._next = self._block.start
        producer_id = self._next
        self._next += 1
        return producer_id
