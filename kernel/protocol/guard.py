"""A walk over a request frame before kio's native reader decodes it.

kio's reader sizes each array from its declared length before reading an element
(``Vec::with_capacity``): a 25-byte Metadata request whose compact array claims 2^32-2
topics makes it ask for 34 GB, and the process aborts. It also refuses tagged fields it
does not know, which KIP-482 says a receiver must skip. This walk reads the frame with
the same schema, field by field, allocating nothing:

- every collection must fit in the bytes left: its count times the smallest size its
  element can have on the wire; every string, bytes and tagged-field length likewise;
- tagged fields the schema does not know are cut out of the frame (the only case that
  copies it), so kio then reads it as if they were never sent;
- a known tagged field must be exactly as long as its declared size;
- an array the schema does not allow to be null is not null (kio would pass None to
  the handler; Kafka refuses the request).

A frame that fails is refused before kio sees it; the connection is closed, as Kafka
closes it on a request it cannot parse. The walk follows kio's wire interpretation
(``kio.serial._introspect``, the helpers its native schema compiler calls), and was
checked against the kio version pinned in pyproject.toml.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

Buffer = bytes | bytearray | memoryview
# An edit of the frame: replace bytes [start, end) with ``replacement``.
Edit = tuple[int, int, bytes]
# Walks one value that starts at ``pos``; returns where it ends.
Walk = Callable[[Buffer, int, int, list[Edit]], int]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_FIXED_SIZES = {
    "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
    "uint64": 8, "float64": 8, "bool": 1, "uuid": 16, "error_code": 2,
    "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8,
}


class MalformedFrame(ValueError):
    """The frame cannot be what its schema says; the text says where and why."""


def _uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it): Kafka's unsigned varint, at most 5 bytes."""
    if pos >= end:
        raise MalformedFrame(f"frame ends at byte {pos} inside a varint")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    for i in range(pos + 1, min(pos + 5, end)):
        b = buf[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i + 1
        shift += 7
    raise MalformedFrame(f"bad varint at byte {pos}")


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _room(what: str, length: int, pos: int, end: int) -> None:
    raise MalformedFrame(
        f"{what} of {length} at byte {pos} is more than the {end - pos} bytes left"
    )


# -- primitives ------------------------------------------------------------------


def _fixed(size: int) -> Walk:
    def walk(buf: Buffer, pos: int, end: int, edits: list[Edit]) -> int:
        pos += size
        if pos > end:
            raise MalformedFrame(f"frame ends inside a {size}-byte field")
        return pos

    return walk


def _compact_bytes(buf: Buffer, pos: int, end: int, edits: list[Edit]) -> int:
    n, pos = _uvarint(buf, pos, end)
    if n > 1:
        n -= 1
        if pos + n > end:
            _room("a string", n, pos, end)
        return pos + n
    return pos  # null (kio refuses it where it is not nullable) or empty


def _legacy_string(buf: Buffer, pos: int, end: int, edits: list[Edit]) -> int:
    if pos + 2 > end:
        raise MalformedFrame("frame ends inside a string length")
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n > 0:
        if pos + n > end:
            _room("a string", n, pos, end)
        return pos + n
    if n < -1:
        raise MalformedFrame(f"string length {n} at byte {pos - 2}")
    return pos


def _legacy_bytes(buf: Buffer, pos: int, end: int, edits: list[Edit]) -> int:
    if pos + 4 > end:
        raise MalformedFrame("frame ends inside a bytes length")
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n > 0:
        if pos + n > end:
            _room("a bytes field", n, pos, end)
        return pos + n
    if n < -1:
        raise MalformedFrame(f"bytes length {n} at byte {pos - 4}")
    return pos


def _primitive(kafka_type: str, flexible: bool) -> tuple[Walk, int, int | None]:
    """(walk, smallest wire size, fixed size or None)."""
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _fixed(size), size, size
    if kafka_type == "string":
        return (_compact_bytes, 1, None) if flexible else (_legacy_string, 2, None)
    if kafka_type in ("bytes", "records"):
        return (_compact_bytes, 1, None) if flexible else (_legacy_bytes, 4, None)
    raise TypeError(f"no wire walk for kafka type {kafka_type!r}")


# -- collections -------------------------------------------------------------------


def _array(element: Walk, element_min: int, element_fixed: int | None,
           flexible: bool, nullable: bool) -> Walk:
    def count(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
        if flexible:
            n, pos = _uvarint(buf, pos, end)
            return n - 1, pos  # -1: null
        if pos + 4 > end:
            raise MalformedFrame("frame ends inside an array length")
        (n,) = _I32.unpack_from(buf, pos)
        if n < -1:
            raise MalformedFrame(f"array length {n} at byte {pos}")
        return n, pos + 4

    def walk(buf: Buffer, pos: int, end: int, edits: list[Edit]) -> int:
        at = pos
        n, pos = count(buf, pos, end)
        if n <= 0:
            if n < 0 and not nullable:
                # kio would hand the handler None; Kafka refuses the request.
                raise MalformedFrame(f"a non-nullable array is null at byte {at}")
            return pos
        if n * element_min > end - pos:
            _room("an array", n, pos, end)
        if element_fixed is not None:
            return pos + n * element_fixed
        for _ in range(n):
            pos = element(buf, pos, end, edits)
        return pos

    return walk


# -- entities ----------------------------------------------------------------------


def _tagged_fields(tagged: dict[int, Walk]) -> Walk:
    def walk(buf: Buffer, pos: int, end: int, edits: list[Edit]) -> int:
        if pos < end and buf[pos] == 0:
            return pos + 1  # none: nearly every request
        count_at = pos
        n, pos = _uvarint(buf, pos, end)
        if 2 * n > end - pos:
            _room("a tagged-field count", n, pos, end)
        count_end = pos
        kept = n
        unknown: list[Edit] = []
        for _ in range(n):
            field_at = pos
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            if pos + size > end:
                _room(f"tagged field {tag}", size, pos, end)
            known = tagged.get(tag)
            if known is None:
                unknown.append((field_at, pos + size, b""))
                kept -= 1
            elif known(buf, pos, pos + size, edits) != pos + size:
                raise MalformedFrame(f"tagged field {tag} at byte {field_at} is not {size} bytes")
            pos += size
        if unknown:
            edits.append((count_at, count_end, _uvarint_bytes(kept)))
            edits.extend(unknown)
        return pos

    return walk


def _merge_fixed(parts: list[tuple[Walk, int | None]]) -> list[Walk]:
    """Consecutive fixed-size fields become one skip."""
    out: list[Walk] = []
    run = 0
    for walk, fixed in parts:
        if fixed is not None:
            run += fixed
            continue
        if run:
            out.append(_fixed(run))
            run = 0
        out.append(walk)
    if run:
        out.append(_fixed(run))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class _Compiled:
    walk: Walk
    min_size: int
    fixed: int | None


def _field(f: dataclasses.Field[Any], flexible: bool, header: bool, tagged: bool) -> _Compiled:
    """Mirrors kio's native ``build_field_schema``."""
    if header and f.name == "client_id":
        return _Compiled(_legacy_string, 2, None)  # nullable legacy in every header version
    kind = classify_field(f)
    if isinstance(kind, EntityField | EntityTupleField):
        nullable = isinstance(kind, EntityField) and is_optional(f)
        inner = _entity(kind.type_, nullable)
    else:
        walk, low, fixed = _primitive(get_schema_field_type(f), flexible)
        inner = _Compiled(walk, low, fixed)
    if isinstance(kind, PrimitiveTupleField | EntityTupleField):
        walk = _array(inner.walk, inner.min_size, inner.fixed, flexible, is_optional(f))
        return _Compiled(walk, 1 if flexible else 4, None)
    return inner


@cache
def _entity(cls: type, nullable: bool, header: bool = False) -> _Compiled:
    flexible: bool = cls.__flexible__  # type: ignore[attr-defined]
    parts: list[tuple[Walk, int | None]] = []
    tagged: dict[int, Walk] = {}
    low = 1 if flexible else 0
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        compiled = _field(f, flexible, header, tag is not None)
        if tag is not None:
            tagged[int(tag)] = compiled.walk
        else:
            parts.append((compiled.walk, compiled.fixed))
            low += compiled.min_size
    fixed = sum(p[1] for p in parts) if all(p[1] is not None for p in parts) else None
    if flexible:
        parts.append((_tagged_fields(tagged), None))
        fixed = None
    steps = tuple(_merge_fixed(parts))

    def walk(buf: Buffer, pos: int, end: int, edits: list[Edit]) -> int:
        for step in steps:
            pos = step(buf, pos, end, edits)
        return pos

    if not nullable:
        return _Compiled(walk, low, fixed)

    def walk_nullable(buf: Buffer, pos: int, end: int, edits: list[Edit]) -> int:
        if pos >= end:
            raise MalformedFrame("frame ends inside a struct")
        if buf[pos] == 0xFF:  # -1: null
            return pos + 1
        return walk(buf, pos + 1, end, edits)

    return _Compiled(walk_nullable, 1, None)


@cache
def request_guard(request_cls: type) -> Callable[[Buffer], Buffer]:
    """The guard for one request schema (one API key and version): returns the frame,
    or a copy without the tagged fields the schema does not know; raises
    MalformedFrame."""
    header = _entity(request_cls.__header_schema__, False, True).walk  # type: ignore[attr-defined]
    body = _entity(request_cls, False).walk

    def guard(frame: Buffer) -> Buffer:
        end = len(frame)
        edits: list[Edit] = []
        body(frame, header(frame, 0, end, edits), end, edits)
        if not edits:
            return frame
        return _apply(frame, edits)

    return guard


def _apply(frame: Buffer, edits: list[Edit]) -> bytes:
    out = bytearray()
    at = 0
    for start, stop, replacement in sorted(edits):
        out += frame[at:start]
        out += replacement
        at = stop
    out += frame[at:]
    return bytes(out)
