"""KRaft snapshots (KIP-630) as Kafka writes them in ``__cluster_metadata-0/``.

A snapshot is named ``%020d-%010d.checkpoint`` after its id: the end offset (the first
offset it does not hold) and the epoch of its last record (Kafka's ``Snapshots``). Its
record batches start at offset 0: a control batch with ``SnapshotHeaderRecord`` (plus
``KRaftVersionRecord`` and ``VotersRecord`` at kraft.version 1), the metadata records
that rebuild the image, and a control batch with ``SnapshotFooterRecord``, as
``RecordsSnapshotWriter`` lays them out. It is written to ``.checkpoint.part``, fsynced
and renamed, so a crash leaves a whole snapshot or a ``.part`` that startup removes; an
old one is renamed ``.checkpoint.deleted`` before it is unlinked. ``0-0`` is the
bootstrap snapshot ``kafka-storage format`` writes for a dynamic quorum.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.voters_record.v0.data import VotersRecord

from .log import MetadataLogError
from .properties import fsync_directory
from .records.codec import RecordDecodeError, UnsupportedVersionError
from .records.serde import (
    ApiMessageAndVersion,
    ControlMessage,
    build_control_batch,
    build_metadata_batch,
    decode_batches,
    encode_value,
)

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETE_SUFFIX = ".checkpoint.deleted"
_NAME = re.compile(r"^(\d{20})-(\d{10})(\.checkpoint(?:\.part|\.deleted)?)$")
# KafkaRaftClient.MAX_BATCH_SIZE_BYTES: the records of a snapshot are cut into batches
# of at most this many bytes, as the log's are.
MAX_BATCH_BYTES = 8 * 1024 * 1024
# Per-record overhead in a v2 batch at the most (attributes, varint deltas, lengths).
_RECORD_OVERHEAD = 21


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """Kafka's OffsetAndEpoch of a snapshot: it holds every record below ``end_offset``;
    ``epoch`` is the epoch of the last of them."""

    end_offset: int
    epoch: int

    @property
    def filename(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


BOOTSTRAP_SNAPSHOT = SnapshotId(0, 0)


def parse_name(name: str) -> tuple[SnapshotId, str] | None:
    """(id, suffix) of a snapshot file name, None for any other file."""
    match = _NAME.match(name)
    if match is None:
        return None
    return SnapshotId(int(match[1]), int(match[2])), match[3]


def _files(directory: Path) -> Iterator[tuple[Path, SnapshotId, str]]:
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        parsed = parse_name(entry.name)
        if parsed is not None:
            yield Path(entry.path), parsed[0], parsed[1]


def list_snapshots(directory: Path) -> list[SnapshotId]:
    """The whole snapshots of ``directory``, oldest first."""
    return sorted(sid for _, sid, suffix in _files(directory) if suffix == SUFFIX)


def latest_snapshot(directory: Path) -> SnapshotId | None:
    snapshots = list_snapshots(directory)
    return snapshots[-1] if snapshots else None


def remove_leftovers(directory: Path) -> list[Path]:
    """Remove what a crash left: ``.part`` (a snapshot being written) and ``.deleted``
    files (Kafka's ``Snapshots.deleteIfExists`` at startup). Returns them."""
    removed = []
    for path, _, suffix in _files(directory):
        if suffix != SUFFIX:
            path.unlink(missing_ok=True)
            removed.append(path)
    if removed:
        fsync_directory(directory)
    return removed


def delete_snapshot(directory: Path, sid: SnapshotId) -> None:
    """Rename to ``.checkpoint.deleted`` (readers stop seeing it at once), then unlink."""
    path = directory / sid.filename
    doomed = directory / (path.name[: -len(SUFFIX)] + DELETE_SUFFIX)
    os.replace(path, doomed)
    fsync_directory(directory)
    doomed.unlink()


def snapshot_size(directory: Path, sid: SnapshotId) -> int:
    return (directory / sid.filename).stat().st_size


def last_contained_log_timestamp(directory: Path, sid: SnapshotId) -> int:
    """The header's timestamp, from the first batch alone (retention by age)."""
    path = directory / sid.filename
    with open(path, "rb") as f:
        head = f.read(64 * 1024)
    try:
        batches = decode_batches(head)
    except (RecordDecodeError, UnsupportedVersionError) as e:
        raise MetadataLogError(f"{path}: cannot be read: {e}") from None
    if not batches or not isinstance(batches[0].records[0], SnapshotHeaderRecord):
        raise MetadataLogError(f"{path}: does not start with a SnapshotHeaderRecord")
    return batches[0].records[0].last_contained_log_timestamp


def _record_batches(records: Sequence[ApiMessageAndVersion],
                    max_batch_bytes: int) -> Iterator[list[ApiMessageAndVersion]]:
    batch: list[ApiMessageAndVersion] = []
    size = 0
    for record in records:
        record_size = len(encode_value(record)) + _RECORD_OVERHEAD
        if batch and size + record_size > max_batch_bytes:
            yield batch
            batch, size = [], 0
        batch.append(record)
        size += record_size
    if batch:
        yield batch


def write_snapshot(
    directory: Path, sid: SnapshotId, records: Sequence[ApiMessageAndVersion], *,
    last_contained_log_timestamp: int, voters: VotersRecord | None = None,
    kraft_version: int = 0, append_time_ms: int | None = None,
    max_batch_bytes: int = MAX_BATCH_BYTES, name: str | None = None,
) -> Path:
    """Write snapshot ``sid`` (blocking): ``.part``, fsync, rename, fsync of the
    directory. ``voters`` (with ``kraft_version`` >= 1) go in the header batch, as
    RecordsSnapshotWriter writes them for a dynamic quorum. ``name`` replaces the
    snapshot's file name (``bootstrap.checkpoint``, written through ``.tmp``)."""
    if (voters is None) != (kraft_version == 0):
        raise ValueError("voters are written exactly when kraft.version is 1 or more")
    now = int(time.time() * 1000) if append_time_ms is None else append_time_ms
    header: list[ControlMessage] = [SnapshotHeaderRecord(
        version=0, last_contained_log_timestamp=last_contained_log_timestamp)]
    if voters is not None:
        header += [KRaftVersionRecord(version=0, k_raft_version=kraft_version), voters]
    final = directory / (name or sid.filename)
    part = (directory / (name + ".tmp") if name
            else directory / (final.name[: -len(SUFFIX)] + PARTIAL_SUFFIX))
    offset = 0
    with open(part, "wb") as f:
        f.write(build_control_batch(header, base_offset=offset, epoch=sid.epoch,
                                    append_time_ms=now))
        offset += len(header)
        for batch in _record_batches(records, max_batch_bytes):
            f.write(build_metadata_batch(batch, base_offset=offset, epoch=sid.epoch,
                                         append_time_ms=now))
            offset += len(batch)
        f.write(build_control_batch([SnapshotFooterRecord(version=0)], base_offset=offset,
                                    epoch=sid.epoch, append_time_ms=now))
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, final)
    fsync_directory(directory)
    return final


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot read back: its header fields, voters and metadata records."""

    id: SnapshotId | None  # None: bootstrap.checkpoint
    last_contained_log_timestamp: int
    kraft_version: int
    voters: VotersRecord | None
    records: tuple[ApiMessageAndVersion, ...]


def read_snapshot(path: Path) -> Snapshot:
    """Read and check a whole snapshot, or ``bootstrap.checkpoint`` (the same format):
    header first, footer last. Raises MetadataLogError naming the file."""
    parsed = parse_name(path.name)
    try:
        batches = decode_batches(path.read_bytes(), allow_partial_tail=False)
    except (RecordDecodeError, UnsupportedVersionError, OSError) as e:
        raise MetadataLogError(f"{path}: cannot be read: {e}") from None
    controls: list[Any] = [m for b in batches if b.is_control for m in b.records]
    if not controls or not isinstance(controls[0], SnapshotHeaderRecord):
        raise MetadataLogError(f"{path}: does not start with a SnapshotHeaderRecord")
    if not batches[-1].is_control or not isinstance(batches[-1].records[-1],
                                                    SnapshotFooterRecord):
        raise MetadataLogError(f"{path}: does not end with a SnapshotFooterRecord")
    kraft_version = 0
    voters = None
    for message in controls:
        if isinstance(message, KRaftVersionRecord):
            kraft_version = message.k_raft_version
        elif isinstance(message, VotersRecord):
            voters = message
    records = tuple(r for b in batches if not b.is_control for r in b.records
                    if isinstance(r, ApiMessageAndVersion))
    return Snapshot(parsed[0] if parsed else None, controls[0].last_contained_log_timestamp,
                    kraft_version, voters, records)
