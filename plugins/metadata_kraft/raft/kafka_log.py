"""The Raft log on disk (Kafka's ``KafkaMetadataLog``): a :class:`RaftLog` over the
kernel's plugin log (``kernel.api.log``), so ``__cluster_metadata-0`` holds Kafka's
segments, ``leader-epoch-checkpoint`` and v2 batches whose partition leader epoch is the
Raft epoch. The leader appends one batch per ``append`` (the records are encoded metadata
record values, ``records.serde.encode_value``) and a real LeaderChange control batch at
the start of its epoch; a follower appends the leader's batches as they are.

Appends, reads and truncations are synchronous page-cache writes, as Kafka's; ``flush``
(fsync) blocks and the driver runs it off the event loop, never at the same time as
another call on this log (the driver serialises them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from kio.schema.leader_change_message.v0.data import LeaderChangeMessage, Voter

from kernel.api.log import PluginLog, PluginLogConfig, open_plugin_log
from kernel.api.records import SimpleRecord, build_batch

from ..records.serde import build_control_batch
from ..snapshots import SnapshotId, list_snapshots, remove_leftovers
from .log import Validation, validate

__all__ = ["KafkaRaftLog"]


class KafkaRaftLog:
    """:class:`~.log.RaftLog` on a :class:`~kernel.api.log.PluginLog`."""

    def __init__(self, plog: PluginLog, directory: Path | None = None) -> None:
        self._plog = plog
        # What was recovered at open is on disk already (recovery read it back).
        self._flushed = plog.log_end_offset
        # Snapshots live beside the segments (``<end offset>-<epoch>.checkpoint``).
        self.directory = directory
        self._snapshots: list[SnapshotId] = list_snapshots(directory) if directory else []

    @classmethod
    def open(cls, directory: Path, config: PluginLogConfig | None = None) -> KafkaRaftLog:
        """Open (creating) the log in ``directory``; blocking (recovery reads segments,
        and what a crash left of a snapshot is removed)."""
        directory.mkdir(parents=True, exist_ok=True)
        remove_leftovers(directory)
        return cls(open_plugin_log(directory, config), directory)

    # -- snapshots (Kafka's ``KafkaMetadataLog`` snapshot map) ------------------------------

    def add_snapshot(self, snapshot: SnapshotId) -> None:
        """A snapshot just written (renamed into place) in ``directory``."""
        if snapshot not in self._snapshots:
            self._snapshots = sorted([*self._snapshots, snapshot])

    def latest_snapshot(self) -> tuple[int, int] | None:
        return (self._snapshots[-1].end_offset, self._snapshots[-1].epoch) \
            if self._snapshots else None

    def snapshot_size(self, snapshot: tuple[int, int]) -> int | None:
        if self.directory is None or SnapshotId(*snapshot) not in self._snapshots:
            return None
        try:
            return (self.directory / SnapshotId(*snapshot).filename).stat().st_size
        except FileNotFoundError:
            return None

    def read_snapshot(self, snapshot: tuple[int, int], position: int,
                      max_bytes: int) -> tuple[int, bytes] | None:
        size = self.snapshot_size(snapshot)
        if size is None or self.directory is None:
            return None
        with open(self.directory / SnapshotId(*snapshot).filename, "rb") as f:
            f.seek(position)
            return size, f.read(max(0, min(max_bytes, size - position)))

    @property
    def start_offset(self) -> int:
        return self._plog.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._plog.log_end_offset

    @property
    def last_fetched_epoch(self) -> int:
        return self._plog.latest_epoch or 0

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        latest = self._plog.latest_epoch
        if latest is None or epoch >= latest:
            # An empty log, or the current epoch (or newer): it ends at the log end.
            return (epoch if latest is None else latest), self.end_offset
        found_epoch, end = self._plog.end_offset_for_epoch(epoch)
        if found_epoch < 0:
            return epoch, self.end_offset
        return found_epoch, end

    def validate(self, offset: int, epoch: int) -> Validation:
        """Kafka's ``validateOffsetAndEpoch``: the follower's (fetch offset, last fetched
        epoch) against our snapshots and epochs."""
        earliest = self._snapshots[0] if self._snapshots else None
        return validate(self, offset, epoch,
                        None if earliest is None else (earliest.end_offset, earliest.epoch))

    def append_as_leader(self, records: Sequence[bytes], epoch: int) -> int:
        latest = self._plog.latest_epoch
        if latest is not None and epoch < latest:
            raise ValueError(f"append in epoch {epoch} after {latest}")
        batch = build_batch([SimpleRecord(value=value) for value in records],
                            base_offset=self.end_offset,
                            base_timestamp=int(time.time() * 1000),
                            partition_leader_epoch=epoch)
        return self._plog.append_as_leader(batch, epoch)[1]

    def append_leader_change(self, epoch: int, leader_id: int,
                             voters: Sequence[int], granting: Sequence[int]) -> int:
        message = LeaderChangeMessage(
            version=0, leader_id=leader_id,
            voters=tuple(Voter(voter_id=v) for v in sorted(voters)),
            granting_voters=tuple(Voter(voter_id=v) for v in sorted(granting)))
        batch = build_control_batch([message], base_offset=self.end_offset, epoch=epoch,
                                    append_time_ms=int(time.time() * 1000))
        return self._plog.append_as_leader(batch, epoch)[1]

    def append_as_follower(self, records: bytes) -> int:
        self._plog.append_as_follower(records)
        return self.end_offset

    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset >= self.end_offset:
            return b""
        return self._plog.read(offset, max_bytes)

    def truncate_to(self, offset: int) -> None:
        # Durable at once (rare: a follower diverged), so the flushed offset stays true.
        self._plog.truncate_to(offset)
        self._plog.flush()
        self._flushed = min(self._flushed, offset)

    def flush(self, offset: int) -> None:
        # Everything appended is fsynced, ``offset`` or not.
        end = self.end_offset
        self._plog.flush()
        self._flushed = max(self._flushed, end)

    def close(self) -> None:
        self._plog.close()
