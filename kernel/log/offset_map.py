"""The cleaner's key -> last offset map (Kafka's SkimpyOffsetMap) and the two walks of a
batch's records that use it: the map's build (``put_records``) and which records a clean
keeps (``retain_records``, Kafka's shouldRetainRecord, the kept records re-encoded from a
new base timestamp as Kafka's rebuilt batch has them).

Keys are stored as an MD5 digest, as Kafka does: the map's size depends on the number of
keys, never on their length. Each map salts the digest with 16 random bytes of its own,
so a producer who crafts MD5 collisions cannot aim one at another producer's key (a
collision makes the cleaner drop the older of the two keys' records). Its capacity in
keys is Kafka's: the dedupe buffer's bytes over 24 (digest + offset) per slot.

:func:`new_offset_map` gives the C map of kernel/log/_cleaner.c where it is built: its
table holds the digests in at most the dedupe buffer's bytes, and its walks run without
the GIL, so the event loop keeps serving while a cleaner thread walks a batch.
:class:`SkimpyOffsetMap` is the same in Python (a dict, several times the bytes per key)
for an install without a C compiler; tests/unit/test_offset_map.py keeps the two equal.
"""

from __future__ import annotations

import hashlib
import os
from typing import Protocol

from kernel.protocol.errors import KafkaError
from kernel.protocol.records import SimpleRecord, encode_record, walk_section

HASH_SIZE = 16  # MD5
SLOT_BYTES = HASH_SIZE + 8  # digest + offset, as Kafka's bytesPerEntry

# kept, invalid, tombstones kept, the kept records (None: all kept, base unchanged),
# the base timestamp, the kept records' max timestamp (-1: none kept)
Retained = tuple[int, int, bool, bytes | None, int, int]


class OffsetMap(Protocol):
    """What the cleaner needs of a map; owned by one cleaner thread."""

    latest_offset: int

    @property
    def size(self) -> int: ...

    @property
    def slots(self) -> int: ...

    def clear(self) -> None: ...

    def get(self, key: bytes) -> int: ...

    def put_records(self, records: bytes | memoryview, count: int, base_offset: int,
                    start: int, max_entries: int) -> tuple[int, bool]:
        """Every keyed record at or after ``start`` into the map, in order, until it holds
        ``max_entries`` keys; (records read, whether it filled)."""
        ...

    def retain_records(self, records: bytes | memoryview, count: int, base_offset: int,
                       first_timestamp: int, keep_tombstones: bool,
                       base_timestamp: int | None,
                       tombstone_base_timestamp: int | None) -> Retained:
        """The records a clean keeps: those past the map's latest offset, and the latest
        of each key, a tombstone only with ``keep_tombstones``. Kept records are
        re-encoded with timestamp deltas from a new base: ``base_timestamp`` (a batch's
        delete horizon) if given, else ``tombstone_base_timestamp`` if a tombstone is
        kept (the horizon a first clean stamps), else the first kept record's."""
        ...


class SkimpyOffsetMap:
    """The map in Python (the C one's stand-in); cleared before each log's map is built."""

    def __init__(self, memory: int, salt: bytes) -> None:
        self.slots = memory // SLOT_BYTES
        if self.slots <= 0:
            raise ValueError(
                f"the offset map needs at least {SLOT_BYTES} bytes, got {memory}")
        self._salt = salt
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def digest(self, key: bytes | memoryview) -> bytes:
        return hashlib.md5(self._salt + bytes(key), usedforsecurity=False).digest()

    def get(self, key: bytes) -> int:
        """The last offset of ``key``, -1 when absent."""
        return self._map.get(self.digest(key), -1)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return len(self._map)

    def put_records(self, records: bytes | memoryview, count: int, base_offset: int,
                    start: int, max_entries: int) -> tuple[int, bool]:
        read = 0
        try:
            for offset_delta, _ts, key, _value, _headers in walk_section(records, count):
                if key is not None and base_offset + offset_delta >= start:
                    if len(self._map) >= max_entries:
                        return read, True
                    self._map[self.digest(key)] = base_offset + offset_delta
                read += 1
        except KafkaError as e:
            raise ValueError(f"record {read} of the batch is malformed") from e
        return read, False

    def retain_records(self, records: bytes | memoryview, count: int, base_offset: int,
                       first_timestamp: int, keep_tombstones: bool,
                       base_timestamp: int | None,
                       tombstone_base_timestamp: int | None) -> Retained:
        try:
            walked = list(walk_section(records, count))
        except KafkaError as e:
            raise ValueError("a record of the batch is malformed") from e
        kept = []
        invalid = 0
        for record in walked:
            offset_delta, _ts, key, value, _headers = record
            offset = base_offset + offset_delta
            if offset > self.latest_offset:
                keep = True  # beyond what the map covers
            elif key is None:
                invalid += 1
                keep = False
            elif offset < self.get(key):
                keep = False  # a later record of the key exists
            else:
                keep = value is not None or keep_tombstones
            if keep:
                kept.append(record)
        tombstones = any(value is None for _, _, _, value, _ in kept)
        # a tombstone kept stamps the batch: rebuilt, even if its base happens not to move
        stamped = (base_timestamp is None and tombstones
                   and tombstone_base_timestamp is not None)
        if base_timestamp is not None:
            base = base_timestamp
        elif stamped:
            assert tombstone_base_timestamp is not None
            base = tombstone_base_timestamp
        else:
            base = first_timestamp + kept[0][1] if kept else first_timestamp
        max_timestamp = first_timestamp + max(r[1] for r in kept) if kept else -1
        if len(kept) == count and base == first_timestamp and not stamped:
            return count, invalid, tombstones, None, base, max_timestamp
        out = bytearray()
        for offset_delta, ts_delta, key, value, headers in kept:
            encode_record(out, SimpleRecord(value, key, headers), offset_delta,
                           first_timestamp + ts_delta - base)
        return len(kept), invalid, tombstones, bytes(out), base, max_timestamp


def new_offset_map(memory: int) -> OffsetMap:
    """The C map where it is built, else the Python one; a salt of its own."""
    salt = os.urandom(HASH_SIZE)
    if _COffsetMap is not None:
        c_map: OffsetMap = _COffsetMap(memory, salt)
        return c_map
    return SkimpyOffsetMap(memory, salt)


try:  # kernel/log/_cleaner.c
    from kernel.log._cleaner import OffsetMap as _COffsetMap
except ImportError:  # installed without a C compiler: the Python map alone
    _COffsetMap = None
