"""Work that grows with a request or with the number of logs, done in slices that give
the event loop back, so that one big request or walk never stalls every other client
(Kafka spreads such work over its ``num.io.threads`` and background threads)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


# A request naming more entries than this has its per-entry work done in slices that
# give the event loop back (``in_slices``); smaller ones are answered in one go, as
# before, at no cost. 2,000 entries take 10-40 ms of a handler's time.
BIG_REQUEST_ENTRIES = 2_000
# How long one slice may hold the loop: other clients wait at most about this long.
SLICE_SECONDS = 0.01
_CHECK_EVERY = 64  # entries between two looks at the clock


async def in_slices(entries: Iterable[T], check_every: int = _CHECK_EVERY) -> list[T]:
    """``list(entries)``, where ``entries`` is a generator doing a big request's work
    entry by entry: the event loop is given back every ``SLICE_SECONDS`` so that other
    connections are answered meanwhile (Kafka spreads such work over its
    ``num.io.threads``). What the generator reads may change between two slices, as it
    may between two of Kafka's handler threads. ``check_every``: entries between two
    looks at the clock (fewer where one entry may take a millisecond)."""
    done: list[T] = []
    append = done.append
    until = time.perf_counter() + SLICE_SECONDS
    for n, entry in enumerate(entries, 1):
        append(entry)
        if n % check_every == 0 and time.perf_counter() >= until:
            await asyncio.sleep(0)
            until = time.perf_counter() + SLICE_SECONDS
    return done
