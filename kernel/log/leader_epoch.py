"""Leader epoch cache: the start offset of every leader epoch seen in the log.

OffsetForLeaderEpoch answers from it, and followers truncate by it after a leader
change. Persisted in ``leader-epoch-checkpoint``. Changes rewrite the file at once but
fsync it only when the log flushes (before the recovery point moves past the batches
that carried the epoch), so the event loop never waits on a disk; recovery re-assigns
epochs from the batches after the recovery point, and loading trims entries beyond the
log's ends.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from kernel.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    CheckpointError,
    fsync_dir,
    fsync_path,
    read_checkpoint,
    write_checkpoint,
)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Entries increase in both epoch and start offset."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT
        self._entries: list[EpochEntry] = []
        self._dirty = False
        rows = read_checkpoint(self.path, 2)
        for epoch, offset in rows or ():
            try:
                entry = EpochEntry(int(epoch), int(offset))
            except ValueError:
                raise CheckpointError(f"{self.path}: malformed entry {epoch} {offset}") from None
            self._assign(entry)

    # -- queries ------------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """Epoch of the entry with the largest start offset <= ``offset``."""
        starts = [e.start_offset for e in self._entries]
        i = bisect_right(starts, offset)
        return self._entries[i - 1].epoch if i else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers: the end offset of the
        largest epoch <= ``requested_epoch`` is the start offset of the next epoch; the
        current epoch ends at the log end offset. (-1, -1) when undefined."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self._entries[higher].start_offset
        if higher == 0:
            # older than anything we know: the data was removed; start from what we have
            return requested_epoch, higher_start
        return self._entries[higher - 1].epoch, higher_start

    # -- changes ------------------------------------------------------------------------

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        latest = self.latest_entry
        if latest is not None and entry.epoch == latest.epoch and (
            entry.start_offset >= latest.start_offset
        ):
            return False
        # keep both orders monotonic: drop entries the new one contradicts
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            self._entries.pop()
        self._entries.append(entry)
        return True

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op for the current one)."""
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return  # the common case on every append
        if self._assign(EpochEntry(epoch, start_offset)):
            self._write()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs starting at or after ``end_offset`` (log truncated to it)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        self._entries = [e for e in self._entries if e.start_offset < end_offset]
        self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs entirely below ``start_offset``; the one holding it now starts
        there (log start offset moved)."""
        removed = [e for e in self._entries if e.start_offset <= start_offset]
        if not removed:
            return
        last = removed[-1]
        if len(removed) == 1 and last.start_offset == start_offset:
            return
        self._entries = [EpochEntry(last.epoch, start_offset), *self._entries[len(removed):]]
        self._write()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._write()

    # -- persistence ----------------------------------------------------------------------

    def _write(self) -> None:
        entries = [f"{e.epoch} {e.start_offset}" for e in self._entries]
        write_checkpoint(self.path, entries, sync=False)
        self._dirty = True

    def flush(self) -> None:
        """fsync the file if it changed; safe from the flush worker thread."""
        if not self._dirty:
            return
        self._dirty = False  # cleared first: a concurrent change sets it again
        fsync_path(self.path)
        fsync_dir(self.path.parent)
