"""The cleaner's offset map in C (kernel/log/_cleaner.c) against the Python one it stands
in for (kernel/log/offset_map.py): with the same salt, the map's build and the records a
clean keeps are the same for any section; the C walk never accepts a section the Python
walk refuses; the digest is MD5 of salt and key; the table stays within the dedupe
buffer's bytes."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.log import offset_map as offset_map_module
from kernel.log.offset_map import SLOT_BYTES, OffsetMap, SkimpyOffsetMap
from kernel.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    SimpleRecord,
    build_batch,
    walk_section,
)

SALT = bytes(range(16))
BASE_OFFSET = 1000
FIRST_TIMESTAMP = 1_700_000_000_000


def c_map(memory: int, salt: bytes = SALT) -> OffsetMap:
    cls: Any = offset_map_module._COffsetMap
    if cls is None:
        pytest.fail("kernel/log/_cleaner.c is not built: `pip install -e .` needs a C "
                    "compiler (gcc); without it the cleaner walks records in Python")
    built: OffsetMap = cls(memory, salt)
    return built


record = st.builds(
    SimpleRecord,
    value=st.one_of(st.none(), st.binary(max_size=40)),
    key=st.one_of(st.none(), st.sampled_from([b"", b"a", b"b", b"c", b"d" * 70])),
    headers=st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(
        max_size=8))), max_size=2),
    timestamp=st.integers(FIRST_TIMESTAMP - 10**6, FIRST_TIMESTAMP + 10**9),
)


def section(records: list[SimpleRecord]) -> bytes:
    batch = build_batch(records, base_offset=BASE_OFFSET,
                        base_timestamp=FIRST_TIMESTAMP)
    return batch[RECORD_BATCH_OVERHEAD:]


def outcome(call: Any) -> Any:
    try:
        return call()
    except ValueError:
        return ValueError


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=8), st.lists(record, max_size=8),
       st.integers(BASE_OFFSET - 1, BASE_OFFSET + 8), st.integers(0, 5),
       st.integers(BASE_OFFSET - 1, BASE_OFFSET + 20), st.booleans(),
       st.one_of(st.none(), st.integers(FIRST_TIMESTAMP - 10**6, FIRST_TIMESTAMP + 10**9)),
       st.one_of(st.none(), st.integers(FIRST_TIMESTAMP - 10**6, FIRST_TIMESTAMP + 10**9)))
def test_c_and_python_maps_agree(
    first: list[SimpleRecord], second: list[SimpleRecord], start: int, max_entries: int,
    latest: int, keep_tombstones: bool, base: int | None, tombstone_base: int | None,
) -> None:
    maps: list[OffsetMap] = [c_map(SLOT_BYTES * 64), SkimpyOffsetMap(SLOT_BYTES * 64, SALT)]
    built = [m.put_records(section(first), len(first), BASE_OFFSET, start, max_entries)
             for m in maps]
    assert built[0] == built[1]
    assert maps[0].size == maps[1].size
    for key in (b"", b"a", b"b", b"c", b"d" * 70, b"absent"):
        assert maps[0].get(key) == maps[1].get(key), key
    for m in maps:
        m.latest_offset = latest
    data = section(second) if second else b""
    kept = [m.retain_records(data, len(second), BASE_OFFSET, FIRST_TIMESTAMP,
                             keep_tombstones, base, tombstone_base) for m in maps]
    assert kept[0] == kept[1]
    count, _invalid, tombstones, body, new_base, _max_ts = kept[0]
    if base is None and tombstones and tombstone_base is not None:
        assert body is not None and new_base == tombstone_base  # stamped: always rebuilt
    if body is not None:  # the kept records decode to the originals' fields and times
        originals = {BASE_OFFSET + i: r for i, r in enumerate(second)}
        for offset_delta, ts_delta, key, value, headers in walk_section(body, count):
            original = originals[BASE_OFFSET + offset_delta]
            assert (key, value, headers) == (original.key, original.value,
                                              tuple(original.headers))
            assert new_base + ts_delta == original.timestamp


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=5), st.integers(-1, 1), st.data())
def test_c_never_accepts_a_section_python_refuses(
    records: list[SimpleRecord], count_shift: int, data: st.DataObject,
) -> None:
    """Sections with bytes changed, cut or appended, and a record count one off: where
    C answers, Python answers the same (C may refuse more: it reads sizes as Kafka
    does, at most 5 varint bytes)."""
    mutated = bytearray(section(records))
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF,
                                                  mutated[at] ^ 0x02]))
    cut = data.draw(st.integers(0, len(mutated)))
    bad = bytes(mutated[:cut]) + data.draw(st.binary(max_size=6))
    count = len(records) + count_shift
    maps: list[OffsetMap] = [c_map(SLOT_BYTES * 64), SkimpyOffsetMap(SLOT_BYTES * 64, SALT)]
    put = [outcome(lambda m=m: m.put_records(bad, count, BASE_OFFSET, 0, 10)) for m in maps]
    if put[0] is not ValueError:
        assert put[0] == put[1]
    retained = [outcome(lambda m=m: m.retain_records(bad, count, BASE_OFFSET,
                                                     FIRST_TIMESTAMP, True, None, None))
                for m in maps]
    if retained[0] is not ValueError:
        assert retained[0] == retained[1]


@pytest.mark.parametrize("length", [0, 1, 15, 16, 39, 40, 47, 48, 55, 56, 63, 64, 65, 200])
def test_the_digest_is_md5_of_salt_and_key(length: int) -> None:
    salt = os.urandom(16)
    key = os.urandom(length)
    assert c_map(SLOT_BYTES * 8, salt).digest(key) == hashlib.md5(salt + key).digest()  # type: ignore[attr-defined]


def test_the_table_stays_within_the_dedupe_buffer() -> None:
    memory = SLOT_BYTES * 50_000
    m = c_map(memory)
    assert m.slots == 50_000
    # every slot: the table grows from its small start to all of it
    for first in range(0, 50_000, 1000):
        keys = section([SimpleRecord(b"v", key=b"key-%d" % i)
                        for i in range(first, first + 1000)])
        assert m.put_records(keys, 1000, first, 0, 10**6) == (1000, False)
    allocated: int = m.allocated_bytes  # type: ignore[attr-defined]
    assert m.size == 50_000 and allocated <= memory
    assert all(m.get(b"key-%d" % i) == i for i in range(0, 50_000, 997))
    one_more = section([SimpleRecord(b"v", key=b"one more")])
    assert m.put_records(one_more, 1, 0, 0, 10**6) == (0, True)  # no slot left
    update = section([SimpleRecord(b"v", key=b"key-7")])
    assert m.put_records(update, 1, 70, 0, 10**6) == (1, False)  # an update takes none
    assert m.get(b"key-7") == 70
    m.clear()
    assert m.size == 0 and m.get(b"key-7") == -1
    assert m.allocated_bytes < allocated  # type: ignore[attr-defined]


def test_a_kept_tombstone_stamps_its_batch_even_when_the_base_stays() -> None:
    """The horizon a first clean stamps can equal the batch's first timestamp
    (delete.retention.ms=0 in the batch's millisecond): the batch is still rebuilt, or
    its tombstone would never get a horizon and never go."""
    tombstone = section([SimpleRecord(None, key=b"gone", timestamp=FIRST_TIMESTAMP)])
    for m in (c_map(SLOT_BYTES * 8), SkimpyOffsetMap(SLOT_BYTES * 8, SALT)):
        m.put_records(tombstone, 1, BASE_OFFSET, 0, 8)
        m.latest_offset = BASE_OFFSET
        kept, _, tombstones, body, base, _ = m.retain_records(
            tombstone, 1, BASE_OFFSET, FIRST_TIMESTAMP, True, None, FIRST_TIMESTAMP)
        assert (kept, tombstones, base) == (1, True, FIRST_TIMESTAMP)
        assert body == tombstone


def test_put_records_stops_where_the_map_is_full() -> None:
    records = [SimpleRecord(b"v", key=b"k%d" % (i % 5)) for i in range(12)]
    for m in (c_map(SLOT_BYTES * 64), SkimpyOffsetMap(SLOT_BYTES * 64, SALT)):
        # as Kafka's buildOffsetMapForSegment: a full map stops the build at the next
        # keyed record, even one of a key it holds
        assert m.put_records(section(records), 12, BASE_OFFSET, 0, 6) == (12, False)
        m.clear()
        assert m.put_records(section(records), 12, BASE_OFFSET, 0, 5) == (5, True)
        m.clear()
        assert m.put_records(section(records), 12, BASE_OFFSET, 0, 4) == (4, True)
        assert m.size == 4
