"""Offset and time indexes: lookups (warm section included), full, truncate, reload."""

from __future__ import annotations

import bisect
from pathlib import Path

import pytest

from kernel.log.index import (
    WARM_SECTION_BYTES,
    CorruptIndexError,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
)

BASE = 1_000


def filled_offset_index(path: Path, n: int, max_size: int = 1 << 20) -> OffsetIndex:
    index = OffsetIndex(path, BASE, max_size)
    for i in range(n):
        index.append(BASE + 10 * i + 5, 100 * i + 100)
    return index


def reference_lookup(n: int, target: int) -> OffsetPosition:
    offsets = [BASE + 10 * i + 5 for i in range(n)]
    slot = bisect.bisect_right(offsets, target) - 1
    if slot < 0:
        return OffsetPosition(BASE, 0)
    return OffsetPosition(offsets[slot], 100 * slot + 100)


def test_lookup_matches_a_plain_binary_search_in_and_out_of_the_warm_section(
    tmp_path: Path,
) -> None:
    n = 3 * WARM_SECTION_BYTES // 8  # the warm section is the last third
    index = filled_offset_index(tmp_path / "a.index", n)
    first_hot = n - 1 - WARM_SECTION_BYTES // 8
    interesting = {0, 1, n - 1, first_hot - 1, first_hot, first_hot + 1, n // 2}
    targets = {BASE - 1, BASE, BASE + 5, BASE + 10 * n + 100}
    for slot in interesting:
        offset = BASE + 10 * slot + 5
        targets.update({offset - 1, offset, offset + 1})
    targets.update(range(BASE, BASE + 10 * n, 37))
    for target in sorted(targets):
        assert index.lookup(target) == reference_lookup(n, target), target


def test_empty_index_maps_everything_to_the_segment_start(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "e.index", BASE, 4096)
    assert index.lookup(BASE + 50) == OffsetPosition(BASE, 0)
    assert index.entries == 0 and not index.is_full()


def test_appends_must_increase(tmp_path: Path) -> None:
    index = filled_offset_index(tmp_path / "a.index", 3)
    with pytest.raises(ValueError):
        index.append(BASE + 25, 9_999)
    with pytest.raises(ValueError):
        index.append(BASE + 2**32 + 1, 9_999)  # beyond a relative u32


def test_full_index(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "f.index", BASE, 8 * 4)
    for i in range(4):
        assert not index.is_full()
        index.append(BASE + i + 1, i + 1)
    assert index.is_full() and index.max_entries == 4
    with pytest.raises(ValueError):
        index.append(BASE + 10, 10)


def test_truncate_to_drops_entries_at_and_after_the_offset(tmp_path: Path) -> None:
    index = filled_offset_index(tmp_path / "t.index", 100)
    index.truncate_to(BASE + 10 * 50 + 5)  # exactly entry 50
    assert index.entries == 50 and index.last_offset == BASE + 10 * 49 + 5
    index.truncate_to(BASE + 10 * 20 + 7)  # between entries 20 and 21
    assert index.entries == 21
    assert index.lookup(BASE + 10_000) == OffsetPosition(BASE + 10 * 20 + 5, 2_100)
    index.append(BASE + 10 * 21 + 5, 2_200)  # appends continue after a truncation
    index.truncate_to(BASE)
    assert index.entries == 0


def test_trimmed_index_reloads_with_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "r.index"
    index = filled_offset_index(path, 10)
    index.close()
    assert path.stat().st_size == 80
    again = OffsetIndex(path, BASE, -1)
    assert again.entries == 10 and again.lookup(BASE + 56) == OffsetPosition(BASE + 55, 600)
    again.sanity_check(log_size=2_000)
    with pytest.raises(CorruptIndexError):
        again.sanity_check(log_size=500)  # last entry points past the log


def test_untrimmed_index_of_a_crashed_run_counts_only_written_entries(tmp_path: Path) -> None:
    path = tmp_path / "c.index"
    index = filled_offset_index(path, 7, max_size=4096)
    index.flush()
    # no close: the file keeps its preallocated size, as after a crash
    assert path.stat().st_size == 4096
    again = OffsetIndex(path, BASE, 4096)
    assert again.entries == 7 and again.last_entry == OffsetPosition(BASE + 65, 700)


def test_resize_grows_back_for_appends(tmp_path: Path) -> None:
    index = filled_offset_index(tmp_path / "g.index", 3)
    index.trim_to_valid_size()
    assert index.is_full()
    index.resize(4096)
    index.append(BASE + 100, 5_000)
    assert index.entries == 4


def test_bad_file_size_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "bad.index"
    path.write_bytes(b"\x00" * 13)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, BASE, -1)


def test_time_index_appends_only_new_maxima(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", BASE, 12 * 100)
    index.maybe_append(50, BASE + 1)
    index.maybe_append(50, BASE + 5)  # not larger: ignored
    index.maybe_append(40, BASE + 6)
    index.maybe_append(80, BASE + 9)
    assert index.entries == 2
    assert index.lookup(10) == TimestampOffset(-1, BASE)
    assert index.lookup(50) == TimestampOffset(50, BASE + 1)
    assert index.lookup(79) == TimestampOffset(50, BASE + 1)
    assert index.lookup(1_000) == TimestampOffset(80, BASE + 9)
    with pytest.raises(ValueError):
        index.maybe_append(100, BASE + 2)  # offsets may not go back


def test_time_index_lookup_over_many_entries(tmp_path: Path) -> None:
    n = 3 * WARM_SECTION_BYTES // 12
    index = TimeIndex(tmp_path / "m.timeindex", BASE, 12 * (n + 10))
    for i in range(n):
        index.maybe_append(1_000 + 3 * i, BASE + 2 * i)
    stamps = [1_000 + 3 * i for i in range(n)]
    for target in range(990, 1_000 + 3 * n + 5, 7):
        slot = bisect.bisect_right(stamps, target) - 1
        expected = TimestampOffset(-1, BASE) if slot < 0 else TimestampOffset(
            stamps[slot], BASE + 2 * slot
        )
        assert index.lookup(target) == expected, target


def test_time_index_keeps_a_slot_for_the_final_entry(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "f.timeindex", BASE, 12 * 3)
    index.maybe_append(1, BASE + 1)
    index.maybe_append(2, BASE + 2)
    assert index.is_full()
    with pytest.raises(ValueError):
        index.maybe_append(3, BASE + 3)
    index.maybe_append(3, BASE + 3, skip_full_check=True)
    assert index.entries == 3


def test_time_index_truncate_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    index = TimeIndex(path, BASE, 12 * 100)
    for i in range(10):
        index.maybe_append(100 + i, BASE + 10 * i)
    index.truncate_to(BASE + 50)
    assert index.entries == 5 and index.last_entry == TimestampOffset(104, BASE + 40)
    index.truncate_to(BASE + 35)
    assert index.entries == 4
    index.close()
    again = TimeIndex(path, BASE, -1)
    assert again.entries == 4 and again.last_entry == TimestampOffset(103, BASE + 30)
    again.sanity_check()


def test_warm_lookups_never_read_the_cold_part(tmp_path: Path) -> None:
    """Tail lookups stay in the last 8 KB (Kafka's warm section): scribbling over the
    cold entries does not change their answers."""
    n = 4 * WARM_SECTION_BYTES // 8
    index = filled_offset_index(tmp_path / "w.index", n)
    first_hot = n - 1 - WARM_SECTION_BYTES // 8
    targets = [BASE + 10 * slot + 7 for slot in range(first_hot, n, 13)]
    expected = [index.lookup(t) for t in targets]
    mm = index._mmap
    assert mm is not None
    mm[0:first_hot * 8] = b"\xff" * (first_hot * 8)
    assert [index.lookup(t) for t in targets] == expected
