"""The JSON-framed metadata log that earlier releases wrote (``metadata.records``); now
only read, by the one-time converter to Kafka's format (``convert.py``).

The records mirror KRaft's metadata record types: same names, api keys and meaning
(RegisterBrokerRecord 0, TopicRecord 2, PartitionRecord 3, ConfigRecord 4,
PartitionChangeRecord 5, RemoveTopicRecord 9, UserScramCredentialRecord 11,
ClientQuotaRecord 14, ProducerIdsRecord 15, AccessControlEntryRecord 18,
RemoveAccessControlEntryRecord 19, RemoveUserScramCredentialRecord 22). The controller
changes state only by appending records, and the log is replayed at startup to rebuild
the cluster image.

Framing, big-endian. One batch holds every record of one controller change, so a change
is replayed whole or not at all, as KRaft's atomic batches::

    base_offset   int64   offset of the first record (the log numbers records from 0)
    length        int32   bytes after this field
    crc           uint32  CRC-32C of the bytes after this field
    record_count  int32
    record_count times:
        api_key   int16   record type
        version   int16   record version
        size      int32   bytes of the body
        body      UTF-8 JSON object keyed by the record's field names (bytes in base64)

Bodies are JSON rather than Kafka's binary schemas: the log is small, and a hex dump of
it stays readable when debugging.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import struct
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import crc32c

from .image import ConfigResourceType, SecurityProtocol

BATCH_HEADER = struct.Struct(">qiI")  # base_offset, length, crc
RECORD_COUNT = struct.Struct(">i")
RECORD_HEADER = struct.Struct(">hhi")  # api_key, version, size
# length counts the CRC and the record count at least.
MIN_BATCH_LENGTH = 4 + RECORD_COUNT.size

# PartitionChangeRecord.leader: the leader did not change (KRaft's NO_LEADER_CHANGE).
NO_LEADER_CHANGE = -2


class CorruptBatchError(Exception):
    """The bytes at this position are not a whole, intact batch: a torn write or
    corruption. Replay truncates the log here."""


class MetadataLogError(Exception):
    """An intact batch (its CRC matches) that cannot be replayed: a record type or
    version this broker does not know, or a record that contradicts the state. Startup
    stops rather than truncating records another version of Kafkernel could read."""


@dataclass(frozen=True, slots=True)
class BrokerEndpointRecord:
    """One entry of RegisterBrokerRecord's EndPoints (Name, Host, Port, SecurityProtocol)."""

    name: str
    host: str
    port: int
    security_protocol: SecurityProtocol


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """Version 1 holds every advertised endpoint, as KRaft's record; version 0 held one
    (listener_name, host, port) and is read as an endpoints array of that one."""

    API_KEY: ClassVar[int] = 0
    VERSION: ClassVar[int] = 1

    broker_id: int
    # A new incarnation per process start; the broker epoch is the offset of this
    # record, as KRaft assigns it.
    incarnation_id: uuid.UUID
    broker_epoch: int
    end_points: tuple[BrokerEndpointRecord, ...]
    rack: str | None = None


def _register_broker_v0(data: dict[str, Any]) -> dict[str, Any]:
    # v0 did not store the security protocol: the listener's name when it is one (the
    # broker's next registration states it anyway).
    name = data.pop("listener_name", None)
    host = data.pop("host", None)
    port = data.pop("port", None)
    protocol = (SecurityProtocol[name] if name in SecurityProtocol.__members__
                else SecurityProtocol.PLAINTEXT)
    data["end_points"] = [{"name": name, "host": host, "port": port,
                           "security_protocol": protocol.value}]
    return data


# (api key, version) -> rewrites an older body into the current version's fields.
UPGRADES: Mapping[tuple[int, int], Any] = MappingProxyType({
    (RegisterBrokerRecord.API_KEY, 0): _register_broker_v0,
})


@dataclass(frozen=True, slots=True)
class TopicRecord:
    API_KEY: ClassVar[int] = 2
    VERSION: ClassVar[int] = 0

    name: str
    topic_id: uuid.UUID
    # Kafka derives this from the name; stored because NewTopic states it explicitly.
    internal: bool = False


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    API_KEY: ClassVar[int] = 3
    VERSION: ClassVar[int] = 0

    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    API_KEY: ClassVar[int] = 4
    VERSION: ClassVar[int] = 0

    resource_type: ConfigResourceType
    # Topic name, or broker id as a string ("" for the cluster-wide default).
    resource_name: str
    name: str
    value: str | None  # None deletes the config


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A change of one partition. As in KRaft the epochs are not stored: replay bumps
    the partition epoch on every change and the leader epoch when the leader changes."""

    API_KEY: ClassVar[int] = 5
    VERSION: ClassVar[int] = 0

    topic_id: uuid.UUID
    partition: int
    isr: tuple[int, ...] | None = None  # None: unchanged
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None  # None: unchanged


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    API_KEY: ClassVar[int] = 9
    VERSION: ClassVar[int] = 0

    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """A block of producer ids handed to a broker (KRaft's AllocateProducerIds): ids
    below ``next_producer_id`` are taken, so no id is handed out twice, restarts
    included."""

    API_KEY: ClassVar[int] = 15
    VERSION: ClassVar[int] = 0

    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512):
    salted and iterated, as Kafka stores it; the password itself is never written."""

    API_KEY: ClassVar[int] = 11
    VERSION: ClassVar[int] = 0

    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord:
    API_KEY: ClassVar[int] = 22
    VERSION: ClassVar[int] = 0

    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """One ACL, with Kafka's codes (see kernel.api.cluster.AclBinding)."""

    API_KEY: ClassVar[int] = 18
    VERSION: ClassVar[int] = 0

    id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    API_KEY: ClassVar[int] = 19
    VERSION: ClassVar[int] = 0

    id: uuid.UUID


@dataclass(frozen=True, slots=True)
class QuotaEntityData:
    entity_type: str
    entity_name: str | None  # None: the type's default


@dataclass(frozen=True, slots=True)
class ClientQuotaRecord:
    """One quota key of one entity set (value) or removed (remove), as Kafka's."""

    API_KEY: ClassVar[int] = 14
    VERSION: ClassVar[int] = 0

    entity: tuple[QuotaEntityData, ...]
    key: str
    value: float
    remove: bool


MetadataRecord = (
    RegisterBrokerRecord | TopicRecord | PartitionRecord | ConfigRecord
    | PartitionChangeRecord | RemoveTopicRecord | ProducerIdsRecord
    | UserScramCredentialRecord | RemoveUserScramCredentialRecord
    | AccessControlEntryRecord | RemoveAccessControlEntryRecord | ClientQuotaRecord
)

RECORD_TYPES: Mapping[int, type[MetadataRecord]] = MappingProxyType({
    cls.API_KEY: cls
    for cls in (RegisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord,
                PartitionChangeRecord, RemoveTopicRecord, ProducerIdsRecord,
                UserScramCredentialRecord, RemoveUserScramCredentialRecord,
                AccessControlEntryRecord, RemoveAccessControlEntryRecord, ClientQuotaRecord)
})

# Resolved once: replay decodes every record of the log at startup.
FIELD_TYPES: Mapping[int, Mapping[str, Any]] = MappingProxyType({
    api_key: MappingProxyType({
        f.name: typing.get_type_hints(cls)[f.name] for f in dataclasses.fields(cls)
    })
    for api_key, cls in RECORD_TYPES.items()
})


# ---------------------------------------------------------------------------
# bodies
# ---------------------------------------------------------------------------


def _encode_value(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_encode_value(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode_value(getattr(value, f.name))
                for f in dataclasses.fields(value)}
    return value


def encode_body(record: MetadataRecord) -> bytes:
    body = {f.name: _encode_value(getattr(record, f.name)) for f in dataclasses.fields(record)}
    return json.dumps(body, separators=(",", ":")).encode()


def _decode_value(tp: Any, value: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if value is None:
            return None
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if tp is uuid.UUID:
        return uuid.UUID(value)
    if typing.get_origin(tp) is tuple and dataclasses.is_dataclass(typing.get_args(tp)[0]):
        if not isinstance(value, list):
            raise TypeError(f"expected a list, got {value!r}")
        return tuple(_decode_struct(typing.get_args(tp)[0], v) for v in value)
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, list) or not all(type(x) is int for x in value):
            raise TypeError(f"expected a list of integers, got {value!r}")
        return tuple(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if tp is bytes:
        if not isinstance(value, str):
            raise TypeError(f"expected base64 bytes, got {value!r}")
        return base64.b64decode(value, validate=True)
    if tp in (int, str, bool) and type(value) is not tp:
        raise TypeError(f"expected {tp.__name__}, got {value!r}")
    return value


def _decode_struct(cls: Any, value: Any) -> Any:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {value!r}")
    hints = typing.get_type_hints(cls)
    unknown = set(value) - set(hints)
    if unknown:
        raise TypeError(f"unknown fields {sorted(unknown)}")
    return cls(**{k: _decode_value(hints[k], v) for k, v in value.items()})


def decode_body(api_key: int, version: int, body: bytes | memoryview) -> MetadataRecord:
    cls = RECORD_TYPES.get(api_key)
    if cls is None:
        raise MetadataLogError(f"unknown metadata record type {api_key}")
    if version > cls.VERSION:
        raise MetadataLogError(
            f"{cls.__name__} version {version} is newer than this broker reads "
            f"(up to {cls.VERSION})"
        )
    try:
        data = json.loads(bytes(body))
        if not isinstance(data, dict):
            raise TypeError("body is not a JSON object")
        upgrade = UPGRADES.get((api_key, version))
        if upgrade is not None:
            data = upgrade(data)
        hints = FIELD_TYPES[api_key]
        unknown = set(data) - set(hints)
        if unknown:
            raise TypeError(f"unknown fields {sorted(unknown)}")
        return cls(**{k: _decode_value(hints[k], v) for k, v in data.items()})
    except (ValueError, TypeError) as e:
        raise MetadataLogError(f"unreadable {cls.__name__}: {e}") from None


# ---------------------------------------------------------------------------
# batches
# ---------------------------------------------------------------------------


def encode_batch(base_offset: int, records: Sequence[MetadataRecord]) -> bytes:
    parts = [RECORD_COUNT.pack(len(records))]
    for record in records:
        body = encode_body(record)
        parts.append(RECORD_HEADER.pack(record.API_KEY, record.VERSION, len(body)))
        parts.append(body)
    payload = b"".join(parts)
    return BATCH_HEADER.pack(base_offset, 4 + len(payload), crc32c.crc32c(payload)) + payload


def decode_batch(data: bytes | memoryview, pos: int) -> tuple[int, list[MetadataRecord], int]:
    """Read the batch at ``pos``: (base offset, records, position after the batch).

    Raises CorruptBatchError when the bytes are not an intact batch and
    MetadataLogError when an intact batch holds records this broker cannot read."""
    view = memoryview(data)
    if len(view) - pos < BATCH_HEADER.size:
        raise CorruptBatchError(f"{len(view) - pos} bytes, shorter than a batch header")
    base_offset, length, crc = BATCH_HEADER.unpack_from(view, pos)
    if length < MIN_BATCH_LENGTH:
        raise CorruptBatchError(f"batch length {length} is too small")
    end = pos + BATCH_HEADER.size - 4 + length
    if end > len(view):
        raise CorruptBatchError(f"batch of {length} bytes runs past the end of the log")
    payload = view[pos + BATCH_HEADER.size:end]
    if crc32c.crc32c(payload) != crc:
        raise CorruptBatchError("CRC-32C mismatch")
    # From here the bytes are what was written: any problem is not a torn write.
    (count,) = RECORD_COUNT.unpack_from(payload, 0)
    records: list[MetadataRecord] = []
    at = RECORD_COUNT.size
    for _ in range(count):
        if len(payload) - at < RECORD_HEADER.size:
            raise MetadataLogError(f"batch at offset {base_offset} ends inside a record")
        api_key, version, size = RECORD_HEADER.unpack_from(payload, at)
        at += RECORD_HEADER.size
        if size < 0 or at + size > len(payload):
            raise MetadataLogError(f"batch at offset {base_offset} ends inside a record")
        records.append(decode_body(api_key, version, payload[at:at + size]))
        at += size
    if count < 0 or at != len(payload):
        raise MetadataLogError(f"batch at offset {base_offset} has a bad record count")
    return base_offset, records, end
