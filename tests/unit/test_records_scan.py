"""The C record walk (kernel/log/_scan.c) against the Python one it stands in for: for
any section, count and flags, C says "valid" exactly when ``walk_records`` raises
nothing. On "invalid" the broker walks again in Python, so the two must never differ
in the other direction either: a C "valid" that Python refuses would let a bad batch in.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.log import validator
from kernel.log.validator import walk_records
from kernel.protocol.errors import KafkaError
from kernel.protocol.records import RECORD_BATCH_OVERHEAD, SimpleRecord, build_batch


def c_walk() -> object:
    if validator._records_valid is None:
        pytest.fail("kernel/log/_scan.c is not built: `pip install -e .` needs a C compiler "
                    "(gcc); without it every compressed append walks its records in Python")
    return validator._records_valid


def python_says_valid(data: bytes, count: int, check_offsets: bool, compacted: bool) -> bool:
    try:
        walk_records(data, count, check_offsets=check_offsets, compacted=compacted)
    except KafkaError:
        return False
    return True


def agree(data: bytes, count: int, check_offsets: bool, compacted: bool) -> None:
    expected = python_says_valid(data, count, check_offsets, compacted)
    got = c_walk()(data, count, check_offsets, compacted)  # type: ignore[operator]
    assert got is expected, (data.hex(), count, check_offsets, compacted)


record = st.builds(
    SimpleRecord,
    value=st.one_of(st.none(), st.binary(max_size=200)),
    key=st.one_of(st.none(), st.binary(max_size=150)),
    headers=st.lists(st.tuples(st.text(max_size=70), st.one_of(st.none(), st.binary(
        max_size=140))), max_size=3),
    timestamp=st.integers(min_value=0, max_value=2**62),
)


def section(batch: list[SimpleRecord]) -> bytes:
    return build_batch(batch)[RECORD_BATCH_OVERHEAD:]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=6), st.booleans(), st.booleans(),
       st.integers(-1, 1), st.data())
def test_c_and_python_agree_on_encoded_and_mutated_sections(
    batch: list[SimpleRecord], check_offsets: bool, compacted: bool, count_shift: int,
    data: st.DataObject,
) -> None:
    """Sections as a producer writes them, then with bytes changed, cut, or appended,
    and a record count one off."""
    good = section(batch)
    agree(good, len(batch), check_offsets, compacted)
    mutated = bytearray(good)
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF,
                                                  mutated[at] ^ 0x02]))
    cut = data.draw(st.integers(0, len(mutated)))
    tail = data.draw(st.binary(max_size=6))
    agree(bytes(mutated[:cut]) + tail, len(batch) + count_shift, check_offsets, compacted)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.integers(-2, 5), st.booleans(), st.booleans())
def test_c_and_python_agree_on_arbitrary_bytes(
    data: bytes, count: int, check_offsets: bool, compacted: bool,
) -> None:
    agree(data, count, check_offsets, compacted)


def varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def one_record(body: bytes) -> bytes:
    return varint(len(body)) + body


@pytest.mark.parametrize("body", [
    # attributes, timestamp delta, offset delta, key, value, headers
    b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(0),
    b"\x00" + b"\xff" * 9 + b"\x01" + varint(0) + varint(-1) + varint(-1) + varint(0),
    b"\x00" + b"\xff" * 10 + varint(0) + varint(-1) + varint(-1) + varint(0),  # varlong > 10
    b"\x00" + varint(0) + b"\xff" * 5 + varint(-1) + varint(-1) + varint(0),  # varint > 5
    b"\x00" + varint(0) + varint(0) + varint(-2) + varint(-1) + varint(0),  # key size -2
    b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-7) + varint(0),  # value size -7
    b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(-1),  # headers -1
    # a header with a null value, one with a negative key size, one past the record
    b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(1) + varint(1) + b"h"
    + varint(-1),
    b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(1) + varint(-3)
    + varint(0),
    b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(2) + varint(9) + b"h",
    b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(2**33) + varint(0)
    + varint(-5) + varint(0) + varint(-5),
    b"\x00" + varint(0) + varint(0) + varint(2**34 - 1) + varint(-1) + varint(0),
    b"\x00" + varint(0) + varint(1) + varint(1) + b"k" + varint(-1) + varint(0),  # delta 1
    b"\x00",
])
@pytest.mark.parametrize("flags", [(True, False), (False, True), (False, False)])
def test_c_and_python_agree_on_edge_records(body: bytes, flags: tuple[bool, bool]) -> None:
    agree(one_record(body), 1, *flags)
    agree(one_record(body) + one_record(body), 2, *flags)
    agree(varint(2**34) + body, 1, *flags)
