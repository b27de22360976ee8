"""Entity writers compiled from kio's schema classes: the same bytes as
``kio.serial.entity_writer``, in fewer calls.

kio's writers are pure Python: one call per field, each value checked by its phantom
type, every varint written a byte at a time. A response's encoding was half the time
the dispatcher spends on a small request (ListOffsets: 13 of 26 us). Here each entity
class gets one generated function: consecutive fixed-width fields are packed by one
``struct.Struct``, lengths are encoded inline, and nested entities call their own
compiled writers. The schema stays kio's: the fields, their Kafka types, nullability,
flexibility and tags are read from kio's dataclasses with kio's own introspection, and
tagged fields are written by kio's field writers (rare, and never on a hot path).

A value above the buffer's ``BY_REFERENCE_BYTES`` (records) is still handed to
``write`` on its own, so a response frame keeps it by reference.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._serialize import get_field_writer
from kio.static.constants import uuid_zero

__all__ = ["compiled_writer"]

Writer = Callable[[Any, Any], None]

# Fixed-width Kafka types: struct code, and the expression turning the field's value
# into what struct packs (as kio's writers convert them).
_FIXED: dict[str, tuple[str, str]] = {
    "int8": ("b", "{}"), "int16": ("h", "{}"), "int32": ("i", "{}"), "int64": ("q", "{}"),
    "uint8": ("B", "{}"), "uint16": ("H", "{}"), "uint32": ("I", "{}"),
    "uint64": ("Q", "{}"), "float64": ("d", "{}"), "bool": ("?", "{}"),
    "error_code": ("h", "{}.value"),
    "timedelta_i32": ("i", "round({}.total_seconds() * 1000)"),
    "timedelta_i64": ("q", "round({}.total_seconds() * 1000)"),
    "datetime_i64": ("q", "round({}.timestamp() * 1000)"),
}
_SMALL_VARINTS = tuple(bytes([n]) for n in range(128))
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (7 bits a byte, least significant first)."""
    if value < 128:
        return _SMALL_VARINTS[value]
    out = bytearray()
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_bytes(value: str | bytes | None) -> tuple[bytes, bytes]:
    """(length prefix, data) of a compact string or bytes; None is length 0."""
    if value is None:
        return b"\x00", b""
    if isinstance(value, str):
        value = value.encode()
    return uvarint(len(value) + 1), value


def _legacy_string(value: str | None) -> tuple[bytes, bytes]:
    if value is None:
        return _I16.pack(-1), b""
    data = value.encode()
    return _I16.pack(len(data)), data


def _legacy_bytes(value: bytes | None) -> tuple[bytes, bytes]:
    if value is None:
        return _I32.pack(-1), b""
    return _I32.pack(len(value)), value


def _uuid(value: Any) -> bytes:
    return uuid_zero.bytes if value is None else value.bytes


def _string_encoder(kafka_type: str, flexible: bool) -> Callable[[Any], tuple[bytes, bytes]]:
    if flexible:
        return _compact_bytes
    return _legacy_string if kafka_type == "string" else _legacy_bytes


class _Source:
    """The generated function's lines and the names they refer to.

    Small values waiting to be written are kept as expressions and written by one call,
    concatenated: a response frame's ``write`` is a Python call, dearer than joining
    a few short bytes. Consecutive fixed-width fields among them are packed by one
    ``struct.Struct``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"uvarint": uvarint, "_uuid": _uuid}
        self.indent = "    "
        self._fixed: list[tuple[str, str]] = []  # pending (struct code, expression)
        self._small: list[str] = []  # pending bytes expressions, in order
        self._locals = 0

    def name(self, value: Any) -> str:
        key = f"_n{len(self.names)}"
        self.names[key] = value
        return key

    def local(self) -> str:
        self._locals += 1
        return f"v{self._locals}"

    def fixed(self, code: str, expression: str) -> None:
        self._fixed.append((code, expression))

    def small(self, expression: str) -> None:
        """A short bytes value, written with its neighbours."""
        self._pack()
        self._small.append(expression)

    def _pack(self) -> None:
        if self._fixed:
            packer = self.name(struct.Struct(">" + "".join(c for c, _ in self._fixed)))
            args = ", ".join(e for _, e in self._fixed)
            self._small.append(f"{packer}.pack({args})")
            self._fixed = []

    def flush(self) -> None:
        self._pack()
        if self._small:
            self.lines.append(f"{self.indent}w({' + '.join(self._small)})")
            self._small = []

    def before(self, text: str) -> None:
        """A statement that only reads the entity: it may run before the pending
        writes."""
        self.lines.append(self.indent + text)

    def line(self, text: str) -> None:
        self.flush()
        self.lines.append(self.indent + text)


@contextmanager
def _array(src: _Source, value: str, flexible: bool) -> Iterator[None]:
    """Its length, then a loop over its elements ``x``: what the block emits is the
    loop's body."""
    if flexible:
        src.small(f"(b'\\x00' if {value} is None else uvarint(len({value}) + 1))")
    else:
        src.small(f"_I32.pack(-1 if {value} is None else len({value}))")
    src.line(f"for x in {value} or ():")
    outer, src.indent = src.indent, src.indent + "    "
    yield
    src.flush()
    src.indent = outer


def _primitive(src: _Source, kafka_type: str, flexible: bool, optional: bool,
               value: str) -> None:
    if kafka_type in _FIXED and not optional:
        code, expression = _FIXED[kafka_type]
        src.fixed(code, expression.format(value))
    elif kafka_type == "datetime_i64":  # nullable
        src.small(f"_I64.pack(-1 if {value} is None else round({value}.timestamp() * 1000))")
    elif kafka_type == "uuid":
        src.small(f"_uuid({value})")
    elif kafka_type in ("string", "bytes", "records"):
        encode = src.name(_string_encoder(kafka_type, flexible))
        if not optional:
            src.before(f"if {value} is None: raise TypeError('Unexpectedly received None "
                       "value')")
        prefix, data = src.local(), src.local()
        src.before(f"{prefix}, {data} = {encode}({value})")
        src.small(prefix)
        if kafka_type == "string":
            src.small(data)
        else:  # its own write: records stay by reference in a response frame
            src.line(f"if {data}: w({data})")
    else:
        raise NotImplementedError(f"no writer for {kafka_type!r} ({optional=})")


def _generate(entity_type: type) -> Writer:
    src = _Source()
    src.names.update(_I32=_I32, _I64=struct.Struct(">q"))
    flexible = entity_type.__flexible__
    is_request_header = entity_type.__name__ == "RequestHeader"
    tagged: list[tuple[int, dataclasses.Field[Any], Writer, Any]] = []
    for field in dataclasses.fields(entity_type):
        tag = get_field_tag(field)
        if tag is not None:
            writer = get_field_writer(field, flexible=flexible,
                                      is_request_header=is_request_header, is_tag=True)
            tagged.append((tag, field, writer, get_tagged_field_default(field)))
            continue
        value = f"e.{field.name}"
        if is_request_header and field.name == "client_id":  # always a legacy string
            prefix, data = src.local(), src.local()
            src.before(f"{prefix}, {data} = {src.name(_legacy_string)}({value})")
            src.small(f"{prefix} + {data}")
            continue
        optional = is_optional(field)
        kind = classify_field(field)
        match kind:
            case PrimitiveField():
                _primitive(src, get_schema_field_type(field), flexible, optional, value)
            case PrimitiveTupleField():
                with _array(src, value, flexible):
                    _primitive(src, get_schema_field_type(field), flexible, False, "x")
            case EntityField(field_type):
                nested = src.name(compiled_writer(field_type))
                if optional:  # KIP-893: a nullable struct's int8 marker
                    src.line(f"if {value} is None: w(b'\\xff')")
                    src.line(f"else: w(b'\\x01'); {nested}(buffer, {value})")
                else:
                    src.line(f"{nested}(buffer, {value})")
            case EntityTupleField(field_type):
                nested = src.name(compiled_writer(field_type))
                with _array(src, value, flexible):
                    src.line(f"{nested}(buffer, x)")
    if flexible:
        if tagged:
            src.line(f"{src.name(_tag_section(sorted(tagged, key=lambda t: t[0])))}"
                     "(buffer, e)")
        else:
            src.small("b'\\x00'")
    src.flush()
    body = "\n".join(src.lines) or "    pass"
    code = f"def write(buffer, e):\n    w = buffer.write\n{body}\n"
    namespace = dict(src.names)
    exec(compile(code, f"<writer {entity_type.__module__}.{entity_type.__name__}>", "exec"),
         namespace)
    write: Writer = namespace["write"]
    return write


def _tag_section(tagged: list[tuple[int, dataclasses.Field[Any], Writer, Any]]) -> Writer:
    """kio's tagged fields: those not at their default, by tag, each prefixed with its
    tag and size, after their count."""

    def write_tags(buffer: Any, entity: Any) -> None:
        parts: list[bytes] = []
        for tag, field, writer, implicit_default in tagged:
            value = getattr(entity, field.name)
            if value == field.default or (
                field.default is dataclasses.MISSING and value == implicit_default
            ):
                continue
            encoded = io.BytesIO()
            writer(encoded, value)
            data = encoded.getvalue()
            parts += (uvarint(tag), uvarint(len(data)), data)
        buffer.write(uvarint(len(parts) // 3))
        for part in parts:
            buffer.write(part)

    return write_tags


@cache
def compiled_writer(entity_type: type) -> Writer:
    """``write(buffer, entity)`` for ``entity_type``, byte for byte kio's."""
    return _generate(entity_type)
