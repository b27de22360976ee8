"""The segments whose files are open, across every log of a broker, least recently used
first, and capped.

Kafka keeps a descriptor per segment of every partition and leaves the rest to the
operator's ``ulimit -n``. Here a partition at rest holds no descriptor: its segments open
their files on first use (an append, a read, retention reading a timestamp) and join
this list, and once more segments are open than the budget allows (a share of
RLIMIT_NOFILE, see :mod:`kernel.network.descriptors`), the least recently used one
closes its files (:meth:`LogSegment.close_files`) and opens them again when next used.
So the broker's open log files are bounded, whatever number of partitions it hosts.

Only the event loop's thread evicts: segments are appended to and read there between
awaits, so a segment it closes is not in the middle of a call. Logs opened in worker
threads (start-up, created topics) close their files before the loop sees them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernel.log.segment import LogSegment

# Fewer than this and a fetch of a few partitions would close what the next one reopens.
MIN_OPEN_SEGMENTS = 16


class OpenSegments:
    """``capacity``: segments that may keep their files open at once (None: no bound)."""

    def __init__(self, capacity: int | None = None) -> None:
        self._lru: OrderedDict[LogSegment, None] = OrderedDict()
        self._capacity = capacity
        self._owner = threading.get_ident()
        self.evictions = 0  # segments closed for the budget, for tests and metrics

    @property
    def capacity(self) -> int | None:
        return self._capacity

    @capacity.setter
    def capacity(self, capacity: int | None) -> None:
        self._capacity = None if capacity is None else max(capacity, MIN_OPEN_SEGMENTS)
        self._evict()

    def bind_to_current_thread(self) -> None:
        """The thread that may close other segments' files: the event loop's."""
        self._owner = threading.get_ident()

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, segment: object) -> bool:
        return segment in self._lru

    def opened(self, segment: LogSegment) -> None:
        """``segment`` opened a file: it is the most recently used; over the budget, the
        least recently used ones close theirs. From another thread (a log being loaded
        or created there), nothing: its owner closes what it opened."""
        if threading.get_ident() != self._owner:
            return
        self._lru[segment] = None
        self._lru.move_to_end(segment)
        self._evict()

    def touch(self, segment: LogSegment) -> None:
        """``segment`` is used (an append, a read): one dict move on the hot path."""
        try:
            self._lru.move_to_end(segment)
        except KeyError:
            if segment.files_open:  # opened where nobody was told (a worker thread)
                self.opened(segment)

    def closed(self, segment: LogSegment) -> None:
        """``segment`` closed its files (or was closed for good)."""
        self._lru.pop(segment, None)

    def _evict(self) -> None:
        capacity = self._capacity
        if capacity is None:
            return
        lru = self._lru
        while len(lru) > capacity:
            segment, _ = lru.popitem(last=False)
            self.evictions += 1
            segment.close_files()
