"""When the single node snapshots its committed state, and what it keeps.

As Kafka's ``SnapshotGenerator``: a snapshot is due once
``metadata.log.max.record.bytes.between.snapshots`` of log were appended after the
latest one, or ``metadata.log.max.snapshot.interval.ms`` passed since it with anything
new. As Kafka's ``KafkaMetadataLog`` cleaning: while there are two snapshots or more and
the log plus snapshots exceed ``metadata.max.retention.bytes``, or the oldest snapshot's
last record is older than ``metadata.max.retention.ms``, the log start offset moves up
to the next snapshot (segments wholly below it are deleted) and the older snapshots go.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .image_records import MetadataState, image_records, replay
from .log import MetadataLog, versioned
from .snapshots import (
    Snapshot,
    SnapshotId,
    delete_snapshot,
    last_contained_log_timestamp,
    list_snapshots,
    read_snapshot,
    remove_leftovers,
    snapshot_size,
    write_snapshot,
)


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """Kafka's settings of the same names, with its defaults."""

    max_record_bytes_between_snapshots: int = 20 * 1024 * 1024
    max_snapshot_interval_ms: int = 60 * 60 * 1000
    max_retention_bytes: int = 100 * 1024 * 1024
    max_retention_ms: int = 7 * 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class PendingSnapshot:
    """What a snapshot holds, captured on the event loop right after a commit (images
    are immutable, so it is written off the loop while commits go on)."""

    id: SnapshotId
    state: MetadataState
    last_contained_log_timestamp: int


class Snapshotter:
    def __init__(self, metadata_log: MetadataLog, policy: SnapshotPolicy,
                 logger: Any) -> None:
        self._metadata_log = metadata_log
        self._policy = policy
        self._log = logger
        self._last_snapshot_ms = time.monotonic() * 1000
        self.latest: SnapshotId | None = None

    @property
    def directory(self) -> Path:
        return self._metadata_log.directory

    def load(self, base: MetadataState) -> tuple[MetadataState, SnapshotId | None]:
        """The state of the latest snapshot on ``base`` (an empty image) and its id,
        after removing what a crash left mid-snapshot. Blocking."""
        self.directory.mkdir(parents=True, exist_ok=True)
        removed = remove_leftovers(self.directory)
        if removed:
            self._log.warning("removed unfinished snapshot files of an earlier run",
                              files=sorted(p.name for p in removed))
        snapshots = list_snapshots(self.directory)
        if not snapshots:
            return base, None
        self.latest = snapshots[-1]
        snapshot: Snapshot = read_snapshot(self.directory / self.latest.filename)
        state = replay(base, (r.message for r in snapshot.records))
        return state, self.latest

    def due(self) -> bool:
        """Whether the committed state should be snapshotted now."""
        appended = self._metadata_log.bytes_since_snapshot
        if appended <= 0:
            return False
        if appended >= self._policy.max_record_bytes_between_snapshots:
            return True
        interval = self._policy.max_snapshot_interval_ms
        return interval > 0 and self.ms_until_interval() <= 0

    @property
    def interval_ms(self) -> int:
        return self._policy.max_snapshot_interval_ms

    def ms_until_interval(self) -> float:
        return self._last_snapshot_ms + self._policy.max_snapshot_interval_ms \
            - time.monotonic() * 1000

    def capture(self, state: MetadataState) -> PendingSnapshot:
        """The snapshot of ``state``, the state after the last committed batch. On the
        event loop, right after that commit."""
        log = self._metadata_log
        pending = PendingSnapshot(SnapshotId(log.next_offset, log.epoch), state,
                                  log.last_append_time_ms)
        log.bytes_since_snapshot = 0
        self._last_snapshot_ms = time.monotonic() * 1000
        return pending

    def write(self, pending: PendingSnapshot, default_dir: Any) -> Path:
        """Write a captured snapshot (blocking, in a worker thread)."""
        records = [versioned(r) for r in image_records(pending.state, default_dir)]
        path = write_snapshot(self.directory, pending.id, records,
                              last_contained_log_timestamp=pending.last_contained_log_timestamp)
        self.latest = pending.id
        return path

    def clean(self) -> int:
        """Delete old snapshots and the log below them past retention (blocking; the
        log's caller runs it between appends). Returns the log start offset."""
        snapshots = list_snapshots(self.directory)
        start = -1
        now_ms = time.time() * 1000
        while len(snapshots) >= 2:
            oldest, following = snapshots[0], snapshots[1]
            if not (self._over_bytes(snapshots) or self._over_age(oldest, now_ms)):
                break
            start = self._metadata_log.delete_before(following.end_offset)
            delete_snapshot(self.directory, oldest)
            snapshots.pop(0)
            self._log.info("deleted a metadata snapshot and the log below the next one",
                           snapshot=oldest.filename, log_start_offset=start)
        return start

    def _over_bytes(self, snapshots: list[SnapshotId]) -> bool:
        limit = self._policy.max_retention_bytes
        if limit < 0:
            return False
        total = self._metadata_log.size_bytes + sum(
            snapshot_size(self.directory, s) for s in snapshots)
        return total > limit

    def _over_age(self, sid: SnapshotId, now_ms: float) -> bool:
        limit = self._policy.max_retention_ms
        if limit < 0:
            return False
        return now_ms - last_contained_log_timestamp(self.directory, sid) > limit
