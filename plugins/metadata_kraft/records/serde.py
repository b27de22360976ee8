"""Metadata records in the log as Kafka's KRaft writes them: v2 record batches whose
``partitionLeaderEpoch`` is the Raft epoch and whose producer fields are unset.

- A metadata record has a null key and the value
  ``uvarint frame_version(=1) | uvarint apiKey | uvarint version | message``
  (``AbstractApiMessageSerde``).
- A control batch (attribute bit 5) holds control records: key
  ``int16 version(=0) | int16 type``, value the control message (kio's models), in the
  version given in ``CONTROL_TYPES``. One controller operation is one batch.
"""

from __future__ import annotations

import enum
import io
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.voters_record.v0.data import VotersRecord
from kio.serial import entity_reader, entity_writer

from kernel.api.errors import KafkaError
from kernel.api.records import (
    BatchHeader,
    SimpleRecord,
    build_batch,
    iter_batches,
    iter_records,
)

from .codec import (
    RecordDecodeError,
    decode,
    encode_into,
    read_uvarint,
    record_type,
    write_uvarint,
)
from .schema import Message

FRAME_VERSION = 1  # AbstractApiMessageSerde.DEFAULT_FRAME_VERSION
CONTROL_KEY = struct.Struct(">hh")  # ControlRecordType key: version, type


class KRaftControlType(enum.IntEnum):
    """``ControlRecordType`` values a metadata log holds (0 and 1 are transaction
    markers, never in it)."""

    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


ControlMessage = (LeaderChangeMessage | SnapshotHeaderRecord | SnapshotFooterRecord
                  | KRaftVersionRecord | VotersRecord)

# Control type -> kio class; each is written and read at version 0, as Kafka 4.3.1's
# ControlRecordUtils does (a newer message carries its own ``version`` field).
CONTROL_TYPES: Mapping[KRaftControlType, type[Any]] = MappingProxyType({
    KRaftControlType.LEADER_CHANGE: LeaderChangeMessage,
    KRaftControlType.SNAPSHOT_HEADER: SnapshotHeaderRecord,
    KRaftControlType.SNAPSHOT_FOOTER: SnapshotFooterRecord,
    KRaftControlType.KRAFT_VERSION: KRaftVersionRecord,
    KRaftControlType.KRAFT_VOTERS: VotersRecord,
})
_CONTROL_BY_CLASS: Mapping[type[Any], KRaftControlType] = MappingProxyType(
    {cls: kind for kind, cls in CONTROL_TYPES.items()})


@dataclass(frozen=True, slots=True)
class ApiMessageAndVersion:
    """A metadata record and the version it is (to be) written in, as Kafka's class of
    the same name."""

    message: Message
    version: int


# --- one record's value --------------------------------------------------------------------


def encode_value(record: ApiMessageAndVersion) -> bytes:
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, record.message.API_KEY)
    write_uvarint(out, record.version)
    encode_into(out, record.message, record.version)
    return bytes(out)


def decode_value(value: bytes | bytearray | memoryview) -> ApiMessageAndVersion:
    view = memoryview(value)
    frame, pos = read_uvarint(view, 0)
    if frame != FRAME_VERSION:
        raise RecordDecodeError(f"metadata record frame version {frame}, expected "
                                f"{FRAME_VERSION}")
    api_key, pos = read_uvarint(view, pos)
    version, pos = read_uvarint(view, pos)
    message, end = decode(record_type(api_key), version, view, pos)
    if end != len(view):
        raise RecordDecodeError(f"{type(message).__name__} v{version}: {len(view) - end} "
                                "bytes after the message")
    return ApiMessageAndVersion(message, version)


def encode_control(message: ControlMessage) -> tuple[bytes, bytes]:
    """A control record's (key, value)."""
    kind = _CONTROL_BY_CLASS.get(type(message))
    if kind is None:
        raise TypeError(f"{type(message).__name__} is not a KRaft control record")
    out = io.BytesIO()
    entity_writer(type(message))(out, message)
    return CONTROL_KEY.pack(0, kind), out.getvalue()


def decode_control(key: bytes | None, value: bytes | None) -> ControlMessage:
    if key is None or len(key) != CONTROL_KEY.size or value is None:
        raise RecordDecodeError("control record without a 4-byte key and a value")
    _version, kind = CONTROL_KEY.unpack(key)
    try:
        cls = CONTROL_TYPES[KRaftControlType(kind)]
    except ValueError:
        raise RecordDecodeError(f"control record type {kind} is not KRaft's") from None
    try:
        message, size = entity_reader(cls)(value, 0)
    except Exception as e:  # kio's native reader: truncated or malformed
        raise RecordDecodeError(f"{cls.__name__}: {e}") from None
    if size != len(value):
        raise RecordDecodeError(f"{cls.__name__}: {len(value) - size} bytes after it")
    return message


# --- batches -----------------------------------------------------------------------------


def build_metadata_batch(records: Sequence[ApiMessageAndVersion], *, base_offset: int,
                         epoch: int, append_time_ms: int) -> bytes:
    """One v2 batch of metadata records at ``base_offset``, stamped with the Raft epoch."""
    return build_batch([SimpleRecord(value=encode_value(r)) for r in records],
                       base_offset=base_offset, base_timestamp=append_time_ms,
                       partition_leader_epoch=epoch)


def build_control_batch(messages: Sequence[ControlMessage], *, base_offset: int,
                        epoch: int, append_time_ms: int) -> bytes:
    """One control batch (LeaderChange, SnapshotHeader/Footer, KRaftVersion, Voters)."""
    records = []
    for message in messages:
        key, value = encode_control(message)
        records.append(SimpleRecord(key=key, value=value))
    return build_batch(records, base_offset=base_offset, base_timestamp=append_time_ms,
                       partition_leader_epoch=epoch, is_control=True)


@dataclass(frozen=True, slots=True)
class MetadataBatch:
    """One decoded batch: metadata records, or control messages when ``is_control``."""

    header: BatchHeader
    records: tuple[ApiMessageAndVersion | ControlMessage, ...]

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def epoch(self) -> int:
        return self.header.partition_leader_epoch

    @property
    def append_time_ms(self) -> int:
        return self.header.first_timestamp

    @property
    def is_control(self) -> bool:
        return self.header.is_control


def decode_batch(batch: bytes | bytearray | memoryview) -> MetadataBatch:
    """Decode one whole v2 batch of the metadata log (its CRC is the log's to check)."""
    try:
        header, _ = next(iter(iter_batches(batch, allow_partial_tail=False)))
        raw = list(iter_records(batch))
    except KafkaError as e:  # the kernel's walkers: CORRUPT_MESSAGE, not magic v2
        raise RecordDecodeError(f"record batch: {e}") from None
    records: list[ApiMessageAndVersion | ControlMessage] = []
    for record in raw:
        if header.is_control:
            records.append(decode_control(record.key, record.value))
        elif record.value is None:
            raise RecordDecodeError(f"metadata record at offset {record.offset} has no value")
        else:
            records.append(decode_value(record.value))
    return MetadataBatch(header, tuple(records))


def decode_batches(data: bytes | bytearray | memoryview, *,
                   allow_partial_tail: bool = True) -> list[MetadataBatch]:
    """Every batch of a segment or snapshot file, in order; a torn last batch is left
    out unless ``allow_partial_tail`` is False."""
    try:
        batches = [bytes(batch) for _, batch in
                   iter_batches(data, allow_partial_tail=allow_partial_tail)]
    except KafkaError as e:
        raise RecordDecodeError(f"record batches: {e}") from None
    return [decode_batch(batch) for batch in batches]


def iter_metadata_records(batches: Iterable[MetadataBatch]) -> Iterable[ApiMessageAndVersion]:
    """The metadata records of ``batches``, control batches skipped."""
    for batch in batches:
        for record in batch.records:
            if isinstance(record, ApiMessageAndVersion):
                yield record
