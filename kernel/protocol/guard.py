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

A second walk, only for a frame kio then refuses (``request_guard(cls, mend=True)``),
also replaces what is not UTF-8 in its strings by U+FFFD, as Kafka's Java reads every
string: Kafka answers a Metadata request for a topic name that is not UTF-8 with
INVALID_TOPIC_EXCEPTION, where kio's reader refuses the whole frame.

A frame that fails is refused before kio sees it; the connection is closed, as Kafka
closes it on a request it cannot parse. The walk follows kio's wire interpretation
(``kio.serial._introspect``, the helpers its native schema compiler calls), and was
checked against the kio version pinned in pyproject.toml.

Each struct of a schema becomes one generated Python function with its fields inlined:
the walk runs for every request, and a produce request to hundreds of partitions would
otherwise pay several calls per partition.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any, NoReturn

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from kernel.protocol.writer import uvarint

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


def _room(what: str, length: int, pos: int, end: int) -> NoReturn:
    raise MalformedFrame(
        f"{what} of {length} at byte {pos} is more than the {end - pos} bytes left"
    )


def _short(pos: int) -> NoReturn:
    raise MalformedFrame(f"frame ends before byte {pos}")


def _bad_length(what: str, n: int, pos: int) -> NoReturn:
    raise MalformedFrame(f"{what} length {n} at byte {pos}")


def _null_array(pos: int) -> NoReturn:
    # kio would hand the handler None; Kafka refuses the request.
    raise MalformedFrame(f"a non-nullable array is null at byte {pos}")


def _mend_string(buf: Buffer, at: int, start: int, stop: int, flexible: bool,
                 edits: list[Edit]) -> None:
    """The string at [start, stop), its length at ``at``: if it is not UTF-8, an edit
    that replaces it, length included, by its decoding with U+FFFD re-encoded."""
    raw = bytes(buf[start:stop])
    try:
        raw.decode()
    except UnicodeDecodeError:
        mended = raw.decode(errors="replace").encode()
        length = uvarint(len(mended) + 1) if flexible else _I16.pack(len(mended))
        edits.append((at, stop, length + mended))


def _tagged_fields(tagged: dict[int, Walk]) -> Walk:
    """The tagged fields of a flexible struct that has some (the generated code skips
    an empty section itself)."""
    def walk(buf: Buffer, pos: int, end: int, edits: list[Edit]) -> int:
        count_at = pos
        n, pos = _uvarint(buf, pos, end)
        if 2 * n > end - pos:
            _room("a tagged-field count", n, pos, end)
        count_end = pos
        kept = n
        unknown: list[Edit] = []
        for _ in range(n):
            field_at = pos
            tag, size_at = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, size_at, end)
            if pos + size > end:
                _room(f"tagged field {tag}", size, pos, end)
            known = tagged.get(tag)
            if known is None:
                unknown.append((field_at, pos + size, b""))
                kept -= 1
            else:
                inner = len(edits)
                if known(buf, pos, pos + size, edits) != pos + size:
                    raise MalformedFrame(
                        f"tagged field {tag} at byte {field_at} is not {size} bytes")
                if len(edits) > inner:  # edited inside: its size follows
                    grown = sum(len(new) - (stop - start) for start, stop, new in edits[inner:])
                    edits.append((size_at, pos, uvarint(size + grown)))
            pos += size
        if unknown:
            edits.append((count_at, count_end, uvarint(kept)))
            edits.extend(unknown)
        return pos

    return walk


# -- code generation -----------------------------------------------------------------
#
# Generated functions take (buf, pos, end, edits) and return the position after their
# struct. Helpers and the functions of nested structs are reached through the names
# the generator binds in the function's globals.


_HELPERS: dict[str, Any] = {
    "_uvarint": _uvarint, "_room": _room, "_short": _short, "_bad_length": _bad_length,
    "_null_array": _null_array, "_I16": _I16, "_I32": _I32, "_mend_string": _mend_string,
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Compiled:
    walk: Walk
    min_size: int
    fixed: int | None  # the size when every value has it


class _Source:
    """Lines of one generated function, and the names its globals need."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}
        self._pending_fixed = 0

    def emit(self, line: str, depth: int = 1) -> None:
        self.flush_fixed()
        self.lines.append("    " * depth + line)

    def fixed(self, size: int) -> None:
        self._pending_fixed += size

    def flush_fixed(self) -> None:
        if self._pending_fixed:
            size, self._pending_fixed = self._pending_fixed, 0
            self.lines.append(f"    pos += {size}")
            self.lines.append("    if pos > end: _short(pos)")

    def bind(self, value: Any) -> str:
        name = f"_n{len(self.names)}"
        self.names[name] = value
        return name


def _emit_primitive(src: _Source, kafka_type: str, flexible: bool,
                    mend: bool = False) -> tuple[int, int | None]:
    """Inline code for one primitive field; (smallest wire size, fixed size or None).
    ``mend``: strings that are not UTF-8 get an edit (``_mend_string``)."""
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        src.fixed(size)
        return size, size
    if kafka_type not in ("string", "bytes", "records"):
        raise TypeError(f"no wire walk for kafka type {kafka_type!r}")
    mend = mend and kafka_type == "string"
    if mend:
        src.emit("at = pos")
    if flexible:  # compact: uvarint length + 1, 0 for null
        src.emit("if pos >= end: _short(pos + 1)")
        src.emit("n = buf[pos]")
        src.emit("if n < 0x80: pos += 1")
        src.emit("else: n, pos = _uvarint(buf, pos, end)")
        src.emit("if n > 1:")
        src.emit("pos += n - 1", 2)
        src.emit("if pos > end: _room('a string', n - 1, pos - n + 1, end)", 2)
        if mend:
            src.emit("_mend_string(buf, at, pos - n + 1, pos, True, edits)", 2)
        return 1, None
    width, unpack = (2, "_I16") if kafka_type == "string" else (4, "_I32")
    src.emit(f"if pos + {width} > end: _short(pos + {width})")
    src.emit(f"n = {unpack}.unpack_from(buf, pos)[0]")
    src.emit(f"pos += {width}")
    src.emit("if n > 0:")
    src.emit("pos += n", 2)
    src.emit("if pos > end: _room('a string', n, pos - n, end)", 2)
    if mend:
        src.emit("_mend_string(buf, at, pos - n, pos, False, edits)", 2)
    src.emit(f"elif n < -1: _bad_length('string', n, pos - {width})")
    return width, None


def _emit_array(src: _Source, element: _Compiled, flexible: bool, nullable: bool) -> None:
    src.emit("at = pos")
    if flexible:
        src.emit("if pos >= end: _short(pos + 1)")
        src.emit("n = buf[pos]")
        src.emit("if n < 0x80: pos += 1")
        src.emit("else: n, pos = _uvarint(buf, pos, end)")
        src.emit("n -= 1")  # -1: null
    else:
        src.emit("if pos + 4 > end: _short(pos + 4)")
        src.emit("n = _I32.unpack_from(buf, pos)[0]")
        src.emit("pos += 4")
        src.emit("if n < -1: _bad_length('array', n, at)")
    if not nullable:
        src.emit("if n < 0: _null_array(at)")
    src.emit("if n > 0:")
    src.emit(f"if n * {element.min_size} > end - pos: _room('an array', n, pos, end)", 2)
    if element.fixed is not None:
        src.emit(f"pos += n * {element.fixed}", 2)
    else:
        walk = src.bind(element.walk)
        src.emit("for _ in range(n):", 2)
        src.emit(f"pos = {walk}(buf, pos, end, edits)", 3)


def _emit_field(src: _Source, f: dataclasses.Field[Any], flexible: bool,
                header: bool, mend: bool) -> tuple[int, int | None]:
    """Mirrors kio's native ``build_field_schema``; (smallest size, fixed size or None)."""
    if header and f.name == "client_id":
        return _emit_primitive(src, "string", False)  # nullable legacy in every header
    kind = classify_field(f)
    is_array = isinstance(kind, PrimitiveTupleField | EntityTupleField)
    if isinstance(kind, EntityField | EntityTupleField):
        nullable = isinstance(kind, EntityField) and is_optional(f)
        inner = _entity(kind.type_, nullable, mend=mend)
        if not is_array:
            src.emit(f"pos = {src.bind(inner.walk)}(buf, pos, end, edits)")
            return inner.min_size, inner.fixed
    else:
        kafka_type = get_schema_field_type(f)
        if not is_array:
            return _emit_primitive(src, kafka_type, flexible, mend)
        inner = _primitive_element(kafka_type, flexible, mend)
    _emit_array(src, inner, flexible, is_optional(f))
    return (1 if flexible else 4), None


@cache
def _primitive_element(kafka_type: str, flexible: bool, mend: bool) -> _Compiled:
    """A primitive as an array element."""
    src = _Source()
    low, fixed = _emit_primitive(src, kafka_type, flexible, mend)
    return _Compiled(_build(src, f"element_{kafka_type}"), low, fixed)


def _build(src: _Source, name: str) -> Walk:
    src.flush_fixed()
    body = "\n".join(src.lines) or "    pass"
    code = f"def {name}(buf, pos, end, edits):\n{body}\n    return pos\n"
    namespace: dict[str, Any] = {**_HELPERS, **src.names}
    exec(compile(code, f"<guard {name}>", "exec"), namespace)
    return namespace[name]  # type: ignore[no-any-return]


@cache
def _entity(cls: type, nullable: bool, header: bool = False, mend: bool = False) -> _Compiled:
    flexible: bool = cls.__flexible__  # type: ignore[attr-defined]
    src = _Source()
    if nullable:
        src.emit("if pos >= end: _short(pos + 1)")
        src.emit("if buf[pos] == 0xFF: return pos + 1")  # -1: null
        src.fixed(1)
    tagged: dict[int, Walk] = {}
    low = 1 if flexible else 0
    fixed: int | None = 0
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        if tag is not None:
            field_src = _Source()
            _emit_field(field_src, f, flexible, header, mend)
            tagged[int(tag)] = _build(field_src, f"tag_{f.name}")
            continue
        field_low, field_fixed = _emit_field(src, f, flexible, header, mend)
        low += field_low
        fixed = None if fixed is None or field_fixed is None else fixed + field_fixed
    if flexible:
        tags = src.bind(_tagged_fields(tagged))
        src.emit("if pos < end and buf[pos] == 0: pos += 1")  # none: nearly every request
        src.emit(f"else: pos = {tags}(buf, pos, end, edits)")
        fixed = None
    walk = _build(src, cls.__name__)
    if nullable:
        return _Compiled(walk, 1, None)
    return _Compiled(walk, low, fixed)


@cache
def request_guard(request_cls: type,
                  mend: bool = False) -> Callable[[Buffer], tuple[Buffer, int]]:
    """The guard for one request schema (one API key and version): returns the frame,
    or a copy without the tagged fields the schema does not know (and, with ``mend``,
    with the body's strings that are not UTF-8 replaced), and where the body starts in
    it (the header's end); raises MalformedFrame."""
    header = _entity(request_cls.__header_schema__, False, True).walk  # type: ignore[attr-defined]
    body = _entity(request_cls, False, mend=mend).walk

    def guard(frame: Buffer) -> tuple[Buffer, int]:
        end = len(frame)
        edits: list[Edit] = []
        body_at = header(frame, 0, end, edits)
        in_header = len(edits)
        body(frame, body_at, end, edits)
        if not edits:
            return frame, body_at
        # The header's own cuts move the body's start.
        body_at -= sum(stop - start - len(new) for start, stop, new in edits[:in_header])
        return _apply(frame, edits), body_at

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
