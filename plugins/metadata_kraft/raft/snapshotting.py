"""Snapshots of a quorum node's committed state (Kafka's ``SnapshotGenerator`` on a
controller): once ``metadata.log.max.record.bytes.between.snapshots`` of committed
batches were replayed after the latest snapshot, the state after the last of them is
written as ``<end offset>-<epoch>.checkpoint`` beside the log segments (off the event
loop), and the Raft log learns it, so the leader answers Fetch with its id and serves
it by FetchSnapshot. Log cleaning below snapshots is not done here yet.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..image_records import MetadataState, image_records
from ..log import versioned
from ..records.serde import MetadataBatch
from ..snapshots import SnapshotId, write_snapshot
from .kafka_log import KafkaRaftLog

__all__ = ["QuorumSnapshotter"]

# The backend's UNASSIGNED_DIR: a replica's directory until its broker assigns it.
_UNASSIGNED_DIR = uuid.UUID(int=1)
# A v2 batch's length field leaves out the base offset and itself.
_BATCH_OVERHEAD = 12


class QuorumSnapshotter:
    def __init__(self, raft_log: KafkaRaftLog, max_record_bytes_between_snapshots: int,
                 logger: Any) -> None:
        self._raft_log = raft_log
        self._threshold = max_record_bytes_between_snapshots
        self._log = logger
        self._bytes_since = 0
        self._task: asyncio.Task[None] | None = None

    def on_replayed(self, batches: Sequence[MetadataBatch],
                    state: Callable[[], MetadataState]) -> None:
        """Committed ``batches`` were just replayed; ``state`` builds the state after
        them (only called when a snapshot is due). On the event loop."""
        if not batches:
            return
        self._bytes_since += sum(b.header.batch_length + _BATCH_OVERHEAD for b in batches)
        if self._bytes_since < self._threshold or self._task is not None:
            return
        last = batches[-1].header
        sid = SnapshotId(last.base_offset + last.last_offset_delta + 1,
                         last.partition_leader_epoch)
        if (sid.end_offset, sid.epoch) == self._raft_log.latest_snapshot():
            return
        self._bytes_since = 0
        self._task = asyncio.get_running_loop().create_task(
            self._write(sid, state(), last.max_timestamp), name="raft-snapshot")

    async def _write(self, sid: SnapshotId, state: MetadataState, timestamp: int) -> None:
        directory = self._raft_log.directory
        try:
            if directory is None:
                return
            def write() -> Path:  # in a worker thread: the state is immutable
                records = [versioned(r)
                           for r in image_records(state, lambda _: _UNASSIGNED_DIR)]
                return write_snapshot(directory, sid, records,
                                      last_contained_log_timestamp=timestamp)

            path = await asyncio.get_running_loop().run_in_executor(None, write)
            self._raft_log.add_snapshot(sid)
            self._log.info("wrote a metadata snapshot", path=path.name,
                           records_below=sid.end_offset)
        except Exception as e:  # the log still holds everything: retried when due again
            self._log.error("metadata snapshot failed", snapshot=sid.filename, error=str(e))
        finally:
            self._task = None

    async def stop(self) -> None:
        if self._task is not None:
            await asyncio.wait([self._task])  # a snapshot ends before the log closes
