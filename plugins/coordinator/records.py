"""Kafka's own ``__consumer_offsets`` record formats, so Kafka tooling can read our log.

Every key and value starts with an int16 schema version. Key versions 0 and 1 are an
offset commit (group, topic, partition), key version 2 is group metadata (group); higher
key versions belong to the newer group types (consumer, share, streams) that this
coordinator does not host. Values up to version 3 are plain big-endian with int16-length
strings and int32-length bytes; version 4 of both values is "flexible" (compact lengths
and tagged fields, KIP-915), which we read but do not write, as Kafka itself still
writes version 3. A value of ``None`` is a tombstone: compaction drops the key.

Also here: :func:`partition_for`, the ``__consumer_offsets`` partition that owns a group.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "GroupMemberMetadata",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "Record",
    "RecordDecodeError",
    "UnknownRecordType",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_value",
    "encode_key",
    "encode_offset_commit_value",
    "group_metadata_record",
    "java_string_hash",
    "offset_commit_record",
    "partition_for",
]

Record = tuple[bytes, bytes | None]
"""(key, value) of one ``__consumer_offsets`` record; value None is a tombstone."""

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
# What Kafka writes today: offset commit value v3 (v1 only when the commit carries an
# explicit expire timestamp, OffsetCommit v2-v4 retention_time), group metadata v3.
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
_MAX_VALUE_VERSION = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordDecodeError(ValueError):
    """Bytes that do not follow the schema they claim."""


class UnknownRecordType(RecordDecodeError):
    """A key version this coordinator does not host (newer group types); replay skips it,
    like Kafka's loader skips unknown record types."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    """-1 when unknown (and always in value versions 0-2)."""
    expire_timestamp: int = -1
    """Only value version 1 has it; -1 means the retention config decides."""


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class GroupMemberMetadata:
    """One member inside a GroupMetadataValue (Kafka's ``MemberMetadata`` struct)."""

    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    """The member's metadata for the group's selected protocol."""
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[GroupMemberMetadata, ...] = ()
    current_state_timestamp: int = -1


# --------------------------------------------------------------------------- primitives


class _Writer:
    __slots__ = ("_buf", "_flexible")

    def __init__(self, version: int, flexible: bool) -> None:
        self._buf = bytearray(_I16.pack(version))
        self._flexible = flexible

    def int16(self, value: int) -> None:
        self._buf += _I16.pack(value)

    def int32(self, value: int) -> None:
        self._buf += _I32.pack(value)

    def int64(self, value: int) -> None:
        self._buf += _I64.pack(value)

    def uvarint(self, value: int) -> None:
        while value >= 0x80:
            self._buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self._buf.append(value)

    def string(self, value: str | None) -> None:
        if value is None:
            if self._flexible:
                self.uvarint(0)
            else:
                self.int16(-1)
            return
        data = value.encode()
        if self._flexible:
            self.uvarint(len(data) + 1)
        else:
            self.int16(len(data))
        self._buf += data

    def bytes_(self, value: bytes) -> None:
        if self._flexible:
            self.uvarint(len(value) + 1)
        else:
            self.int32(len(value))
        self._buf += value

    def array_length(self, n: int) -> None:
        if self._flexible:
            self.uvarint(n + 1)
        else:
            self.int32(n)

    def no_tagged_fields(self) -> None:
        if self._flexible:
            self.uvarint(0)

    def getvalue(self) -> bytes:
        return bytes(self._buf)


class _Reader:
    __slots__ = ("_data", "_flexible", "_pos")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._flexible = False

    def set_flexible(self, flexible: bool) -> None:
        self._flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self._pos + n > len(self._data):
            raise RecordDecodeError(
                f"record ends after {len(self._data)} bytes, needed {self._pos + n}"
            )
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordDecodeError("varint longer than 5 bytes")

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1 if self._flexible else self.int16()
        if n == -1:
            return None
        try:
            return bytes(self._take(n)).decode()
        except UnicodeDecodeError as exc:
            raise RecordDecodeError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordDecodeError("null in a non-nullable string field")
        return value

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self._flexible else self.int32()
        if n == -1:
            raise RecordDecodeError("null in a non-nullable bytes field")
        return bytes(self._take(n))

    def array_length(self) -> int:
        n = self.uvarint() - 1 if self._flexible else self.int32()
        if n < 0:
            raise RecordDecodeError("null in a non-nullable array field")
        return n

    def skip_tagged_fields(self) -> None:
        # Unknown tagged fields are how newer writers extend flexible versions; skip them.
        if self._flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())


def _version_of(reader: _Reader, what: str, lowest: int, highest: int) -> int:
    version = reader.int16()
    if not lowest <= version <= highest:
        raise RecordDecodeError(f"unknown {what} version {version}")
    return version


# --------------------------------------------------------------------------------- keys


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        w = _Writer(OFFSET_COMMIT_KEY_VERSION, flexible=False)
        w.string(key.group)
        w.string(key.topic)
        w.int32(key.partition)
    else:
        w = _Writer(GROUP_METADATA_KEY_VERSION, flexible=False)
        w.string(key.group)
    return w.getvalue()


def decode_key(data: bytes | bytearray | memoryview) -> OffsetCommitKey | GroupMetadataKey:
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(group=r.string(), topic=r.string(), partition=r.int32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(group=r.string())
    raise UnknownRecordType(f"__consumer_offsets key version {version} is not a classic group")


# ------------------------------------------------------------------------------- values


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """Kafka's choice of version unless one is forced: v1 carries an explicit expire
    timestamp (and loses the leader epoch, as in Kafka), v3 otherwise."""
    if version is None:
        version = 1 if value.expire_timestamp >= 0 else OFFSET_COMMIT_VALUE_VERSION
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"offset commit value version {version} does not exist")
    w = _Writer(version, flexible=version >= 4)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp)
    if version == 1:
        w.int64(value.expire_timestamp)
    w.no_tagged_fields()
    return w.getvalue()


def decode_offset_commit_value(data: bytes | bytearray | memoryview) -> OffsetCommitValue:
    r = _Reader(data)
    version = _version_of(r, "offset commit value", 0, _MAX_VALUE_VERSION)
    r.set_flexible(version >= 4)
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.skip_tagged_fields()
    return OffsetCommitValue(
        offset=offset,
        metadata=metadata,
        commit_timestamp=commit_timestamp,
        leader_epoch=leader_epoch,
        expire_timestamp=expire_timestamp,
    )


def encode_group_metadata_value(
    value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION
) -> bytes:
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"group metadata value version {version} does not exist")
    w = _Writer(version, flexible=version >= 4)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.int64(value.current_state_timestamp)
    w.array_length(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.no_tagged_fields()
    w.no_tagged_fields()
    return w.getvalue()


def decode_group_metadata_value(data: bytes | bytearray | memoryview) -> GroupMetadataValue:
    r = _Reader(data)
    version = _version_of(r, "group metadata value", 0, _MAX_VALUE_VERSION)
    r.set_flexible(version >= 4)
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        group_instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session_timeout_or_rebalance = r.int32()
        if version >= 1:
            rebalance_timeout, session_timeout = session_timeout_or_rebalance, r.int32()
        else:
            # v0 had no rebalance timeout; Kafka then used the session timeout for both.
            rebalance_timeout = session_timeout = session_timeout_or_rebalance
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tagged_fields()
        members.append(
            GroupMemberMetadata(
                member_id=member_id,
                group_instance_id=group_instance_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout=rebalance_timeout,
                session_timeout=session_timeout,
                subscription=subscription,
                assignment=assignment,
            )
        )
    r.skip_tagged_fields()
    return GroupMetadataValue(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        members=tuple(members),
        current_state_timestamp=current_state_timestamp,
    )


# ------------------------------------------------------------------------------ records


def offset_commit_record(
    group: str, topic: str, partition: int, value: OffsetCommitValue | None
) -> Record:
    key = encode_key(OffsetCommitKey(group=group, topic=topic, partition=partition))
    return key, None if value is None else encode_offset_commit_value(value)


def group_metadata_record(group: str, value: GroupMetadataValue | None) -> Record:
    key = encode_key(GroupMetadataKey(group=group))
    return key, None if value is None else encode_group_metadata_value(value)


# -------------------------------------------------------------------------- partitioning


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, wrapping at
    32 bits, as a signed int."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group, exactly as Kafka computes it:
    ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``.

    Kafka's ``Utils.abs`` is ``n == Integer.MIN_VALUE ? 0 : Math.abs(n)``: a true absolute
    value, not the ``n & 0x7fffffff`` of ``Utils.toPositive`` (the producer partitioner's).
    The two differ for every negative hash, so using the wrong one would send clients to
    a coordinator that does not own their group.
    """
    if num_partitions <= 0:
        raise ValueError(f"__consumer_offsets needs at least one partition, got {num_partitions}")
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
