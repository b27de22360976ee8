"""Encode and decode metadata records by the tables of ``schema.py``, as Kafka's generated
``*Record`` classes do in their (always flexible) versions.

The wire rules (KIP-482): fixed-width numbers big-endian; strings and bytes compact
(unsigned varint length + 1, 0 for null); arrays compact likewise; every struct ends
with its tagged fields: a count, then (tag, size, value) in ascending tag order. A tagged
field is written only when it differs from its default. Writing a non-default value in a
version that lacks the field is an error, as in Kafka (UnsupportedVersionException).

Each (message type, version) compiles once, when this module loads, to a plan of
per-field readers and writers; the plans are read-only afterwards.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kio.serial.readers import read_unsigned_varint

from .schema import METADATA_RECORDS, FieldSpec, Message, kafka_fields

Writer = Callable[[bytearray, Any], None]
Reader = Callable[[memoryview, int], tuple[Any, int]]


class RecordDecodeError(ValueError):
    """Bytes that are not a valid record of the type and version they claim."""


class UnsupportedVersionError(ValueError):
    """A record or field that this version cannot carry."""


def write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    try:
        value, size = read_unsigned_varint(buf, pos)
    except Exception as e:  # kio's native reader: out of bounds or an overlong varint
        raise RecordDecodeError(f"bad unsigned varint at byte {pos}: {e}") from None
    return value, pos + size


# --- primitives --------------------------------------------------------------------------


def _fixed(fmt: str) -> tuple[Writer, Reader]:
    packer = struct.Struct(fmt)
    size = packer.size

    def write(out: bytearray, value: Any) -> None:
        try:
            out += packer.pack(value)
        except struct.error:
            raise ValueError(f"{value!r} does not fit a {fmt} field") from None

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        end = pos + size
        if end > len(buf):
            raise RecordDecodeError(f"record ends inside a {fmt} at byte {pos}")
        return packer.unpack_from(buf, pos)[0], end

    return write, read


def _write_uuid(out: bytearray, value: uuid.UUID) -> None:
    out += value.bytes


def _read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise RecordDecodeError(f"record ends inside a uuid at byte {pos}")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def _bool_reader(buf: memoryview, pos: int) -> tuple[bool, int]:
    if pos >= len(buf):
        raise RecordDecodeError(f"record ends inside a bool at byte {pos}")
    return buf[pos] != 0, pos + 1


def _length(buf: memoryview, pos: int, nullable: bool, what: str) -> tuple[int, int]:
    """A compact length: -1 for null (refused unless nullable)."""
    raw, pos = read_uvarint(buf, pos)
    if raw == 0 and not nullable:
        raise RecordDecodeError(f"non-nullable {what} at byte {pos - 1} is null")
    return raw - 1, pos


def _blob(nullable: bool, text: bool) -> tuple[Writer, Reader]:
    what = "string" if text else "bytes"

    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise UnsupportedVersionError(f"null in a non-nullable {what} field")
            out.append(0)
            return
        data = value.encode() if text else value
        write_uvarint(out, len(data) + 1)
        out += data

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        length, pos = _length(buf, pos, nullable, what)
        if length < 0:
            return None, pos
        end = pos + length
        if end > len(buf):
            raise RecordDecodeError(f"{what} of {length} bytes runs past the record")
        data = bytes(buf[pos:end])
        if not text:
            return data, end
        try:
            return data.decode(), end
        except UnicodeDecodeError:
            raise RecordDecodeError(f"string at byte {pos} is not UTF-8") from None

    return write, read


_PRIMITIVES: Mapping[str, tuple[Writer, Reader]] = MappingProxyType({
    "int8": _fixed(">b"), "int16": _fixed(">h"), "int32": _fixed(">i"),
    "int64": _fixed(">q"), "uint16": _fixed(">H"), "float64": _fixed(">d"),
    "bool": (_fixed(">?")[0], _bool_reader), "uuid": (_write_uuid, _read_uuid),
})


def _array(item: tuple[Writer, Reader], nullable: bool) -> tuple[Writer, Reader]:
    write_item, read_item = item

    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise UnsupportedVersionError("null in a non-nullable array field")
            out.append(0)
            return
        write_uvarint(out, len(value) + 1)
        for element in value:
            write_item(out, element)

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        length, pos = _length(buf, pos, nullable, "array")
        if length < 0:
            return None, pos
        if length > len(buf) - pos:  # every element takes a byte at least
            raise RecordDecodeError(f"array of {length} runs past the record")
        items = []
        for _ in range(length):
            element, pos = read_item(buf, pos)
            items.append(element)
        return tuple(items), pos

    return write, read


# --- plans -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    attr: str
    spec: FieldSpec
    default: Any
    write: Writer
    read: Reader


@dataclass(frozen=True, slots=True)
class Plan:
    """How one message type is laid out in one version."""

    cls: type[Message]
    version: int
    fields: tuple[_Field, ...]  # untagged, in order
    tagged: Mapping[int, _Field]  # by tag
    absent: tuple[_Field, ...]  # fields this version lacks


def _codec(spec: FieldSpec, version: int, plans: Mapping[Any, Plan]) -> tuple[Writer, Reader]:
    nullable = spec.is_nullable(version)
    element = spec.element
    if element is None:
        if spec.type in ("string", "bytes"):
            return _blob(nullable, spec.type == "string")
        return _PRIMITIVES[spec.type]
    if spec.struct is not None:
        item = _struct_codec(plans[spec.struct, version])
    elif element in ("string", "bytes"):
        item = _blob(False, element == "string")
    else:
        item = _PRIMITIVES[element]
    return _array(item, nullable)


def _plan(cls: type[Message], version: int, plans: Mapping[Any, Plan]) -> Plan:
    defaults = {f: cls.__dataclass_fields__[f].default for f, _ in kafka_fields(cls)}
    fields, tagged, absent = [], {}, []
    for attr, spec in kafka_fields(cls):
        write, read = _codec(spec, version, plans)
        entry = _Field(attr, spec, defaults[attr], write, read)
        if not spec.present(version):
            absent.append(entry)
        elif spec.is_tagged(version):
            assert spec.tag is not None
            tagged[spec.tag] = entry
        else:
            fields.append(entry)
    return Plan(cls, version, tuple(fields), MappingProxyType(dict(sorted(tagged.items()))),
                tuple(absent))


def _build_plans() -> Mapping[Any, Plan]:
    plans: dict[Any, Plan] = {}
    for cls in METADATA_RECORDS.values():
        low, high = cls.VERSIONS
        for version in range(low, high + 1):
            # nested structs first: a struct's plan is at its record's version
            for _, spec in kafka_fields(cls):
                if spec.struct is not None:
                    plans[spec.struct, version] = _plan(spec.struct, version, plans)
            plans[cls, version] = _plan(cls, version, plans)
    return MappingProxyType(plans)


def _struct_codec(plan: Plan) -> tuple[Writer, Reader]:
    return (lambda out, value: _write(out, plan, value)), (lambda buf, pos: _read(buf, pos, plan))


# --- encode / decode ---------------------------------------------------------------------


def _write(out: bytearray, plan: Plan, message: Any) -> None:
    for entry in plan.absent:
        if getattr(message, entry.attr) != entry.default:
            raise UnsupportedVersionError(
                f"{plan.cls.__name__} v{plan.version} has no {entry.spec.name}: "
                "cannot write a non-default value")
    for entry in plan.fields:
        entry.write(out, getattr(message, entry.attr))
    tags: list[tuple[int, bytes]] = list(message.unknown_tags)
    for tag, entry in plan.tagged.items():
        value = getattr(message, entry.attr)
        if value != entry.default:
            body = bytearray()
            entry.write(body, value)
            tags.append((tag, bytes(body)))
    tags.sort(key=lambda pair: pair[0])
    write_uvarint(out, len(tags))
    for tag, body in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(body))
        out += body


def _read(buf: memoryview, pos: int, plan: Plan) -> tuple[Any, int]:
    values: dict[str, Any] = {}
    for entry in plan.fields:
        values[entry.attr], pos = entry.read(buf, pos)
    count, pos = read_uvarint(buf, pos)
    unknown: list[tuple[int, bytes]] = []
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise RecordDecodeError(f"{plan.cls.__name__}: tagged field {tag} runs past the record")
        entry = plan.tagged.get(tag)
        if entry is None:
            unknown.append((tag, bytes(buf[pos:end])))
        else:
            values[entry.attr], at = entry.read(buf[:end], pos)
            if at != end:
                raise RecordDecodeError(
                    f"{plan.cls.__name__}: tagged field {entry.spec.name} is {size} bytes "
                    f"but its value takes {at - pos}")
        pos = end
    return plan.cls(unknown_tags=tuple(unknown), **values), pos


PLANS: Mapping[Any, Plan] = _build_plans()


def plan_for(cls: type[Message], version: int) -> Plan:
    plan = PLANS.get((cls, version))
    if plan is None:
        low, high = cls.VERSIONS
        raise UnsupportedVersionError(
            f"{cls.__name__} has versions {low}-{high}, not {version}")
    return plan


def encode(message: Message, version: int) -> bytes:
    """The message's bytes at ``version`` (without the record frame)."""
    out = bytearray()
    _write(out, plan_for(type(message), version), message)
    return bytes(out)


def encode_into(out: bytearray, message: Message, version: int) -> None:
    _write(out, plan_for(type(message), version), message)


def decode(cls: type[Message], version: int, data: bytes | bytearray | memoryview,
           pos: int = 0) -> tuple[Message, int]:
    """Read one ``cls`` at ``version`` from ``data[pos:]``: (message, position after)."""
    return _read(memoryview(data), pos, plan_for(cls, version))


def record_type(api_key: int) -> type[Message]:
    cls = METADATA_RECORDS.get(api_key)
    if cls is None:
        raise RecordDecodeError(f"unknown metadata record type {api_key}")
    return cls
