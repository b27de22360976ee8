"""The cleaner's key -> last offset map (Kafka's SkimpyOffsetMap).

Keys are stored as their MD5 digest, as Kafka does: the map's size depends on the
number of keys, never on their length, and two keys colliding on 16 bytes is left to
chance as Kafka leaves it. Its capacity in entries is Kafka's: the dedupe buffer's
bytes over (digest + offset) bytes per slot; the cleaner stops adding keys at the load
factor and cleans up to where the map got.
"""

from __future__ import annotations

import hashlib

HASH_SIZE = 16  # MD5
_SLOT_BYTES = HASH_SIZE + 8  # digest + offset, as Kafka's bytesPerEntry


class SkimpyOffsetMap:
    """Owned by one cleaner thread; cleared before each log's map is built."""

    def __init__(self, memory: int) -> None:
        self.slots = memory // _SLOT_BYTES
        if self.slots <= 0:
            raise ValueError(
                f"the offset map needs at least {_SLOT_BYTES} bytes, got {memory}")
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        self._map[hashlib.md5(key, usedforsecurity=False).digest()] = offset

    def get(self, key: bytes) -> int:
        """The last offset of ``key``, -1 when absent."""
        return self._map.get(hashlib.md5(key, usedforsecurity=False).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return len(self._map)

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots
