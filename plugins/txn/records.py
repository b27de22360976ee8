"""Kafka's own ``__transaction_state`` record format (TransactionLogKey v0,
TransactionLogValue v0, as Kafka writes them while ``transaction.version`` is below 2),
so Kafka tooling can read our log.

Key: int16 version 0, then the transactional id (int16-length string). Value: int16
version 0, producer id (int64), producer epoch (int16), timeout (int32), state (int8),
partitions (nullable int32-length array of (topic, int32-length array of int32); null
when Empty), last update and start timestamps (int64). A None value is a tombstone.

Also here: :func:`partition_for`, the partition that owns a transactional id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "RecordDecodeError",
    "TransactionLogValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "partition_for",
]

KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMESTAMPS = struct.Struct(">qq")


class RecordDecodeError(ValueError):
    """Bytes that are not a TransactionLog record this coordinator can read."""


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    """Kafka's ``TransactionState`` id."""
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int


def _string(s: str) -> bytes:
    data = s.encode()
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version != KEY_VERSION:
            raise RecordDecodeError(f"transaction log key version {version}")
        (length,) = _I16.unpack_from(data, 2)
        if length < 0 or 4 + length > len(data):
            raise RecordDecodeError("transaction log key: bad transactional id length")
        return data[4:4 + length].decode()
    except (struct.error, UnicodeDecodeError) as e:
        raise RecordDecodeError(f"transaction log key: {e}") from None


def encode_value(value: TransactionLogValue) -> bytes:
    parts = [_VALUE_HEAD.pack(VALUE_VERSION, value.producer_id, value.producer_epoch,
                              value.timeout_ms, value.state)]
    if value.state == 0:  # Empty: Kafka writes a null partition list
        parts.append(_I32.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in value.partitions:
            by_topic.setdefault(topic, []).append(partition)
        parts.append(_I32.pack(len(by_topic)))
        for topic, indexes in by_topic.items():
            parts.append(_string(topic))
            parts.append(_I32.pack(len(indexes)))
            parts.extend(_I32.pack(i) for i in sorted(indexes))
    parts.append(_TIMESTAMPS.pack(value.last_update_ms, value.start_ms))
    return b"".join(parts)


def decode_value(data: bytes) -> TransactionLogValue:
    try:
        version, producer_id, epoch, timeout_ms, state = _VALUE_HEAD.unpack_from(data, 0)
        if version != VALUE_VERSION:
            raise RecordDecodeError(f"transaction log value version {version}")
        pos = _VALUE_HEAD.size
        (topics,) = _I32.unpack_from(data, pos)
        pos += 4
        partitions: list[tuple[str, int]] = []
        for _ in range(max(0, topics)):
            (length,) = _I16.unpack_from(data, pos)
            topic = data[pos + 2:pos + 2 + length].decode()
            pos += 2 + length
            (count,) = _I32.unpack_from(data, pos)
            pos += 4
            for _ in range(count):
                partitions.append((topic, _I32.unpack_from(data, pos)[0]))
                pos += 4
        last_update_ms, start_ms = _TIMESTAMPS.unpack_from(data, pos)
    except (struct.error, UnicodeDecodeError) as e:
        raise RecordDecodeError(f"transaction log value: {e}") from None
    return TransactionLogValue(producer_id, epoch, timeout_ms, state, tuple(partitions),
                               last_update_ms, start_ms)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % partitions`` (``Utils.abs`` maps
    Integer.MIN_VALUE to 0)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
