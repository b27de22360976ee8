"""The metadata log on disk: ``<metadata.log.dir>/__cluster_metadata-0/``, as Kafka's.

Kafka's segments (``00000000000000000000.log``, ``.index``, ``.timeindex``) and
``leader-epoch-checkpoint``, on the kernel's log (``kernel.api.log``). Each entry is a
v2 batch of Kafka metadata records (``records/serde.py``) whose partition leader epoch is
the Raft epoch. This node is the only voter, so it is the leader: each start begins a new
epoch with a LeaderChange control batch, as Kafka's standalone controller does. Every
append is fsynced before it returns, so a change is published only once it survives a
crash. Opening recovers the segments: a torn or corrupt tail (a crash mid-write) is
truncated, the batches before it are kept.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kio.schema.leader_change_message.v0.data import LeaderChangeMessage, Voter

from kernel.api.config import ConfigError
from kernel.api.errors import ErrorCode, KafkaError
from kernel.api.log import PluginLog, PluginLogConfig, open_plugin_log

from .records.codec import RecordDecodeError, UnsupportedVersionError
from .records.schema import Message
from .records.serde import (
    ApiMessageAndVersion,
    MetadataBatch,
    build_control_batch,
    build_metadata_batch,
    decode_batches,
)

METADATA_PARTITION_DIR = "__cluster_metadata-0"  # Kafka's metadata topic-partition
# Bytes read per step when replaying: many batches at a time, one segment at most.
_READ_BYTES = 16 * 1024 * 1024


def _segment_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


class MetadataLogError(Exception):
    """An intact batch that cannot be replayed: a record type or version this broker
    does not know, or a record that contradicts the state. Startup stops rather than
    truncating records another version could read."""


def versioned(message: Message) -> ApiMessageAndVersion:
    """A record at the version Kafka 4.3.1 writes on a new cluster: the highest
    (RegisterBrokerRecord v4, PartitionRecord v2, PartitionChangeRecord v2; the rest
    have only v0)."""
    return ApiMessageAndVersion(message, type(message).VERSIONS[1])


class MetadataLog:
    """Owner of the metadata log. Not safe for concurrent appends: the controller
    serialises them."""

    def __init__(self, metadata_log_dir: Path, node_id: int, logger: Any,
                 config: PluginLogConfig | None = None) -> None:
        self.directory = Path(metadata_log_dir) / METADATA_PARTITION_DIR
        self._config = config
        self.path = self.directory
        self._node_id = node_id
        self._log = logger
        self._plog: PluginLog | None = None
        self._lock_fd: int | None = None
        self._epoch = 0
        # Set when a failed write could not be undone: the log may end in a partial
        # batch, and appending after it would hide the later batches from replay.
        self._failure: str | None = None
        # Bytes of batches appended (or read at open) after the latest snapshot, and the
        # append time of the last batch: what the next snapshot is due on and holds.
        self.bytes_since_snapshot = 0
        self.last_append_time_ms = -1

    @property
    def next_offset(self) -> int:
        """Offset the next appended record gets."""
        return 0 if self._plog is None else self._plog.log_end_offset

    @property
    def epoch(self) -> int:
        """The Raft epoch this node leads (the partition leader epoch of its batches)."""
        return self._epoch

    def open(self, from_offset: int = 0) -> list[MetadataBatch]:
        """Open (creating) the log and return its batches from ``from_offset`` (the end
        of the snapshot replayed first). Blocking: run it off the event loop."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            try:
                # One writer per log: a second broker (or test) on the same directory
                # would interleave batches.
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(
                    f"{self.directory}: the metadata log is in use by another broker"
                ) from None
            before = _segment_bytes(self.directory)
            plog = open_plugin_log(self.directory, self._config)
            dropped = before - _segment_bytes(self.directory)
            if dropped > 0:
                self._log.warning(
                    "truncated the metadata log's torn or corrupt tail",
                    path=str(self.directory), dropped_bytes=dropped,
                    next_offset=plog.log_end_offset)
            try:
                if from_offset > plog.log_end_offset or (
                        plog.log_start_offset > from_offset and plog.log_end_offset > 0):
                    raise MetadataLogError(
                        f"{self.directory}: the log holds offsets [{plog.log_start_offset}, "
                        f"{plog.log_end_offset}), which do not continue the latest snapshot "
                        f"(end offset {from_offset})")
                batches = self._read(plog, from_offset)
            except BaseException:
                plog.close()
                raise
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd, self._plog = fd, plog
        return batches

    def _read(self, plog: PluginLog, from_offset: int) -> list[MetadataBatch]:
        batches: list[MetadataBatch] = []
        offset, end = max(plog.log_start_offset, from_offset), plog.log_end_offset
        while offset < end:
            data = plog.read(offset, _READ_BYTES)
            try:
                read = decode_batches(data, allow_partial_tail=False)
            except (RecordDecodeError, UnsupportedVersionError) as e:
                raise MetadataLogError(
                    f"{self.directory}: batch at offset {offset} cannot be read: {e}"
                ) from None
            read = [b for b in read if b.header.last_offset >= from_offset]
            if not read:
                break
            batches.extend(read)
            self.bytes_since_snapshot += sum(b.header.size for b in read)
            self.last_append_time_ms = read[-1].header.max_timestamp
            offset = read[-1].header.last_offset + 1
        return batches

    def reset(self) -> None:
        """Remove every batch (blocking)."""
        plog = self._open_log()
        plog.truncate_to(0)
        plog.flush()

    def begin_epoch(self, min_epoch: int = 0) -> int:
        """Start a new epoch (the last one + 1) with a LeaderChange control batch, fsynced:
        this node is the sole voter and leader. Blocking; returns the epoch."""
        plog = self._open_log()
        self._epoch = max(plog.latest_epoch or 0, min_epoch) + 1
        me = Voter(voter_id=self._node_id)
        now = int(time.time() * 1000)
        self._write(plog, build_control_batch(
            [LeaderChangeMessage(version=0, leader_id=self._node_id, voters=(me,),
                                 granting_voters=(me,))],
            base_offset=plog.log_end_offset, epoch=self._epoch, append_time_ms=now), now)
        return self._epoch

    def _open_log(self) -> PluginLog:
        if self._plog is None:
            raise RuntimeError("metadata log is not open")
        if self._failure is not None:
            raise KafkaError(ErrorCode.kafka_storage_error, self._failure)
        return self._plog

    async def append(self, records: Sequence[ApiMessageAndVersion]) -> int:
        """Append one batch and fsync it (in a worker thread, so the event loop keeps
        serving); returns its base offset. Raises KafkaError(KAFKA_STORAGE_ERROR)."""
        plog = self._open_log()
        base_offset = plog.log_end_offset
        # Encoded in the worker too: a topic of thousands of partitions is thousands of
        # records, and the event loop keeps serving meanwhile.
        await asyncio.get_running_loop().run_in_executor(
            None, self.append_blocking, records)
        return base_offset

    def append_blocking(self, records: Sequence[ApiMessageAndVersion],
                        append_time_ms: int | None = None) -> None:
        plog = self._open_log()
        now = int(time.time() * 1000) if append_time_ms is None else append_time_ms
        self._write(plog, build_metadata_batch(
            records, base_offset=plog.log_end_offset, epoch=self._epoch,
            append_time_ms=now), now)

    def delete_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (a snapshot's end) and delete the
        segments wholly below it (blocking); returns the new log start offset."""
        return self._open_log().delete_before(offset)

    @property
    def size_bytes(self) -> int:
        """Bytes of the log's segments."""
        return _segment_bytes(self.directory)

    def _write(self, plog: PluginLog, batch: bytes, append_time_ms: int) -> None:
        end = plog.log_end_offset
        try:
            plog.append_as_leader(batch, self._epoch)
            plog.flush()
            self.bytes_since_snapshot += len(batch)
            self.last_append_time_ms = append_time_ms
        except (KafkaError, OSError) as e:
            try:
                plog.truncate_to(end)
                plog.flush()
            except (KafkaError, OSError) as undo:
                self._failure = (
                    f"{self.directory}: write failed ({e}) and could not be undone "
                    f"({undo}); restart the broker to recover the log"
                )
                raise KafkaError(ErrorCode.kafka_storage_error, self._failure) from e
            raise KafkaError(
                ErrorCode.kafka_storage_error, f"{self.directory}: write failed: {e}"
            ) from e

    def close(self) -> None:
        if self._plog is not None:
            self._plog.close()
            self._plog = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # also releases the flock
            self._lock_fd = None
