"""The metadata log on disk: ``<metadata.log.dir>/__cluster_metadata-0/``.

One append-only file of record batches (framing in ``jsonlog``). Every append is
fsynced before it returns, so a change is published only once it survives a crash.
Opening the log reads every intact batch and truncates a torn or corrupt tail, which
is what a crash in the middle of a write leaves behind; batches before it are kept.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel.api.config import ConfigError
from kernel.api.errors import ErrorCode, KafkaError

from .jsonlog import CorruptBatchError, MetadataRecord, decode_batch, encode_batch
from .properties import fsync_directory

METADATA_PARTITION_DIR = "__cluster_metadata-0"  # Kafka's metadata topic-partition
LOG_FILE = "metadata.records"


class MetadataLog:
    """Owner of the metadata log file. Not safe for concurrent appends: the controller
    serialises them."""

    def __init__(self, metadata_log_dir: Path, logger: Any) -> None:
        self.directory = Path(metadata_log_dir) / METADATA_PARTITION_DIR
        self.path = self.directory / LOG_FILE
        self._log = logger
        self._fd: int | None = None
        self._size = 0
        self._next_offset = 0
        # Set when a failed write could not be undone: the file may end in a partial
        # batch, and appending after it would hide the later batches from replay.
        self._failure: str | None = None

    @property
    def next_offset(self) -> int:
        """Offset the next appended record gets."""
        return self._next_offset

    def open(self) -> list[tuple[int, list[MetadataRecord]]]:
        """Open (creating) the log and return its batches as (base offset, records).
        Blocking: run it off the event loop."""
        self.directory.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            try:
                # One writer per log: a second broker (or test) on the same directory
                # would interleave batches.
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(
                    f"{self.path}: the metadata log is in use by another broker"
                ) from None
            if created:
                fsync_directory(self.directory)
            batches = self._read(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return batches

    def _read(self, fd: int) -> list[tuple[int, list[MetadataRecord]]]:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
        batches: list[tuple[int, list[MetadataRecord]]] = []
        pos = 0
        expected = 0
        while pos < len(data):
            try:
                base_offset, records, end = decode_batch(data, pos)
                if base_offset != expected:
                    raise CorruptBatchError(f"base offset {base_offset}, expected {expected}")
            except CorruptBatchError as e:
                self._log.warning(
                    "truncating the metadata log at its first invalid batch",
                    path=str(self.path), position=pos, dropped_bytes=len(data) - pos,
                    next_offset=expected, reason=str(e),
                )
                os.ftruncate(fd, pos)
                os.fsync(fd)
                break
            batches.append((base_offset, records))
            expected += len(records)
            pos = end
        self._size = pos
        self._next_offset = expected
        return batches

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        """Append one batch and fsync it (in a worker thread, so the event loop keeps
        serving); returns its base offset. Raises KafkaError(KAFKA_STORAGE_ERROR)."""
        if self._fd is None:
            raise RuntimeError("metadata log is not open")
        if self._failure is not None:
            raise KafkaError(ErrorCode.kafka_storage_error, self._failure)
        base_offset = self._next_offset
        loop = asyncio.get_running_loop()
        # Encoded in the worker too: a topic of thousands of partitions is thousands of
        # records, and the event loop keeps serving meanwhile.
        data = await loop.run_in_executor(None, self._encode_and_write, self._fd,
                                          base_offset, records)
        self._size += len(data)
        self._next_offset += len(records)
        return base_offset

    def _encode_and_write(self, fd: int, base_offset: int,
                          records: Sequence[MetadataRecord]) -> bytes:
        data = encode_batch(base_offset, records)
        self._write(fd, data)
        return data

    def _write(self, fd: int, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as e:
            try:
                os.ftruncate(fd, self._size)
                os.fsync(fd)
            except OSError as undo:
                self._failure = (
                    f"{self.path}: write failed ({e}) and could not be undone ({undo}); "
                    "restart the broker to recover the log"
                )
                raise KafkaError(ErrorCode.kafka_storage_error, self._failure) from e
            raise KafkaError(
                ErrorCode.kafka_storage_error, f"{self.path}: write failed: {e}"
            ) from e

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # also releases the flock
            self._fd = None
