"""A plugin-owned log on the kernel's storage: Kafka's segments, indexes and
``leader-epoch-checkpoint`` in a directory the plugin names, as Kafka hosts its KRaft
metadata log (``KafkaMetadataLog``) on a ``UnifiedLog``. The surface is what a Raft
replica needs of its log: append built batches as leader or follower, read, flush,
truncate, and the epoch of an offset. Blocking calls (file I/O): a plugin runs them off
the event loop, one at a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kernel.log import AppendOrigin, Log, LogConfig
from kernel.log.file_records import FileRecords

__all__ = ["PluginLog", "PluginLogConfig", "open_plugin_log"]


@dataclass(frozen=True, slots=True)
class PluginLogConfig:
    """Segment settings of a plugin-owned log (Kafka's ``metadata.log.segment.bytes``,
    ``metadata.log.segment.ms`` defaults; 8 MiB batches, KafkaRaftClient's limit)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    max_batch_bytes: int = 8 * 1024 * 1024


class PluginLog(Protocol):
    """One plugin-owned partition log (offsets, epochs and batches as Kafka's)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def latest_epoch(self) -> int | None: ...

    def append_as_leader(self, batch: bytes, epoch: int) -> tuple[int, int]:
        """Append a built batch at the log end, stamped with ``epoch``: (first, last)
        offset. Raises KafkaError (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE,
        KAFKA_STORAGE_ERROR)."""
        ...

    def append_as_follower(self, batches: bytes) -> tuple[int, int]:
        """Append batches whose offsets and epochs the leader assigned."""
        ...

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``start_offset`` (at least one)."""
        ...

    def flush(self) -> None:
        """fsync everything appended (segments and the leader epoch checkpoint)."""
        ...

    def truncate_to(self, offset: int) -> bool: ...

    def delete_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (at most the log end) and delete
        the segments wholly below it, never the active one, as Kafka's metadata log does
        below its latest snapshot. Returns the log start offset."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch``, its end offset); (-1, -1) when unknown."""
        ...

    def close(self) -> None: ...


class _KernelPluginLog:
    """:class:`PluginLog` over the kernel's :class:`kernel.log.Log`."""

    def __init__(self, log: Log) -> None:
        self._log = log

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def latest_epoch(self) -> int | None:
        return self._log.latest_epoch

    def append_as_leader(self, batch: bytes, epoch: int) -> tuple[int, int]:
        # Kafka's RAFT_LEADER origin: control batches allowed, no client-only checks.
        info = self._log.append_as_leader(batch, epoch, int(time.time() * 1000),
                                          origin=AppendOrigin.COORDINATOR)
        return info.first_offset, info.last_offset

    def append_as_follower(self, batches: bytes) -> tuple[int, int]:
        info = self._log.append_as_follower(batches)
        return info.first_offset, info.last_offset

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        records = self._log.read(start_offset, max_bytes).records  # not zero-copy
        assert not isinstance(records, FileRecords)
        return bytes(records)

    def flush(self) -> None:
        self._log.flush()

    def truncate_to(self, offset: int) -> bool:
        return self._log.truncate_to(offset)

    def delete_before(self, offset: int) -> int:
        return self._log.delete_records_before(min(offset, self._log.log_end_offset))

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._log.end_offset_for_epoch(epoch)

    def close(self) -> None:
        self._log.close()


def open_plugin_log(directory: Path, config: PluginLogConfig | None = None) -> PluginLog:
    """Open (creating) the log in ``directory``, recovering every segment: a torn or
    corrupt tail (a crash mid-write) is truncated, whole batches before it are kept."""
    config = config or PluginLogConfig()
    log_config = LogConfig(segment_bytes=config.segment_bytes, segment_ms=config.segment_ms,
                           max_message_bytes=config.max_batch_bytes)
    return _KernelPluginLog(Log.open(directory, log_config, recovery_point=0,
                                     had_clean_shutdown=False))
