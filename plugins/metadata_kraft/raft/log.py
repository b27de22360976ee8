"""The replicated log as the Raft core sees it (Kafka's ``RaftLog``), and an in-memory
implementation for tests and the simulator.

Appends and truncations are synchronous (page cache, as in Kafka); durability is the
separate ``flush`` the node asks for with a Flush action. The in-memory log models a
crash: ``crash()`` drops everything after the flushed offset.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["InMemoryRaftLog", "LogEntry", "RaftLog", "Validation", "validate"]


@dataclass(frozen=True, slots=True)
class Validation:
    """Kafka's ``ValidOffsetAndEpoch``: whether a follower's (fetch offset, last
    fetched epoch) matches our log, where it diverges, or which snapshot it needs."""

    kind: Literal["valid", "diverging", "snapshot"]
    epoch: int = -1
    end_offset: int = -1

    @classmethod
    def valid(cls) -> Validation:
        return cls("valid")


class RaftLog(Protocol):
    """What the core needs of the metadata log."""

    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def last_fetched_epoch(self) -> int:
        """The epoch of the last entry (0 for an empty log)."""
        ...
    @property
    def flushed_offset(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch <= ``epoch`` in the log, or ``epoch`` itself when it is
        older than all, and the end offset of that epoch)."""
        ...

    def validate(self, offset: int, epoch: int) -> Validation: ...
    def latest_snapshot(self) -> tuple[int, int] | None:
        """(end offset, epoch) of the newest snapshot, None without one."""
        ...
    def read_snapshot(self, snapshot: tuple[int, int], position: int,
                      max_bytes: int) -> tuple[int, bytes] | None:
        """(its size, up to ``max_bytes`` of it from ``position``); None: no such
        snapshot. The caller checked ``position`` against the size (``snapshot_size``)."""
        ...
    def snapshot_size(self, snapshot: tuple[int, int]) -> int | None: ...
    def append_as_leader(self, records: Sequence[bytes], epoch: int) -> int:
        """Append in ``epoch``; the offset of the last record."""
        ...
    def append_leader_change(self, epoch: int, leader_id: int,
                             voters: Sequence[int], granting: Sequence[int]) -> int:
        """The LeaderChangeMessage control record opening ``epoch``; its offset."""
        ...
    def append_as_follower(self, records: bytes) -> int:
        """Append records read from the leader; the new end offset."""
        ...
    def read(self, offset: int, max_bytes: int) -> bytes: ...
    def truncate_to(self, offset: int) -> None: ...
    def flush(self, offset: int) -> None: ...


@dataclass(frozen=True, slots=True)
class LogEntry:
    offset: int
    epoch: int
    payload: bytes
    control: bool = False


_HEADER = struct.Struct(">qi?I")


def validate(log: RaftLog, offset: int, epoch: int,
             earliest_snapshot: tuple[int, int] | None) -> Validation:
    """Kafka's ``ReplicatedLog.validateOffsetAndEpoch``: with a snapshot, a position
    below the log start, at the log start in another epoch than the oldest snapshot's,
    or in an epoch older than it, is answered with the latest snapshot; otherwise the
    position is checked against our epochs."""
    if offset == log.start_offset == 0 and epoch == 0:
        return Validation.valid()
    latest = log.latest_snapshot()
    if earliest_snapshot is not None and latest is not None and (
            offset < log.start_offset
            or (offset == log.start_offset and epoch != earliest_snapshot[1])
            or epoch < earliest_snapshot[1]):
        return Validation("snapshot", latest[1], latest[0])
    end_epoch, end = log.end_offset_for_epoch(epoch)
    if end_epoch != epoch or offset > end:
        return Validation("diverging", end_epoch, end)
    return Validation.valid()


class InMemoryRaftLog:
    """A RaftLog in memory, one entry per record; ``read`` frames entries with
    ``_HEADER`` (offset, epoch, control, length) so followers can append them."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self._flushed = 0
        # (end offset, epoch) -> the snapshot file's bytes; the log is never cut below.
        self.snapshots: dict[tuple[int, int], bytes] = {}

    @property
    def start_offset(self) -> int:
        return 0

    @property
    def end_offset(self) -> int:
        return len(self.entries)

    @property
    def last_fetched_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def _epoch_starts(self) -> list[tuple[int, int]]:
        """The leader-epoch cache: (epoch, first offset), ascending."""
        starts: list[tuple[int, int]] = []
        for entry in self.entries:
            if not starts or starts[-1][0] != entry.epoch:
                starts.append((entry.epoch, entry.offset))
        return starts

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        starts = self._epoch_starts()
        if not starts:
            return epoch, self.end_offset
        if epoch >= starts[-1][0]:
            return starts[-1][0], self.end_offset
        floor: tuple[int, int] | None = None
        for index, (start_epoch, _) in enumerate(starts):
            if start_epoch > epoch:
                higher_start = starts[index][1]
                if floor is None:
                    return epoch, higher_start
                return floor[0], higher_start
            floor = starts[index]
        raise AssertionError("unreachable: epoch below the last was handled")

    def validate(self, offset: int, epoch: int) -> Validation:
        return validate(self, offset, epoch, min(self.snapshots, default=None))

    def latest_snapshot(self) -> tuple[int, int] | None:
        return max(self.snapshots, default=None)

    def snapshot_size(self, snapshot: tuple[int, int]) -> int | None:
        data = self.snapshots.get(snapshot)
        return None if data is None else len(data)

    def read_snapshot(self, snapshot: tuple[int, int], position: int,
                      max_bytes: int) -> tuple[int, bytes] | None:
        data = self.snapshots.get(snapshot)
        return None if data is None else (len(data), data[position:position + max_bytes])

    def append_as_leader(self, records: Sequence[bytes], epoch: int) -> int:
        if self.entries and epoch < self.entries[-1].epoch:
            raise ValueError(f"append in epoch {epoch} after {self.entries[-1].epoch}")
        for payload in records:
            self.entries.append(LogEntry(self.end_offset, epoch, payload))
        return self.end_offset - 1

    def append_leader_change(self, epoch: int, leader_id: int,
                             voters: Sequence[int], granting: Sequence[int]) -> int:
        payload = f"leader-change {leader_id} {sorted(voters)} {sorted(granting)}".encode()
        self.entries.append(LogEntry(self.end_offset, epoch, payload, control=True))
        return self.end_offset - 1

    def append_as_follower(self, records: bytes) -> int:
        view = memoryview(records)
        position = 0
        while position < len(view):
            offset, epoch, control, length = _HEADER.unpack_from(view, position)
            position += _HEADER.size
            payload = bytes(view[position:position + length])
            position += length
            if offset != self.end_offset:
                raise ValueError(f"follower append at {offset}, log end is {self.end_offset}")
            self.entries.append(LogEntry(offset, epoch, payload, control))
        return self.end_offset

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for entry in self.entries[offset:]:
            if out and len(out) + _HEADER.size + len(entry.payload) > max_bytes:
                break
            out += _HEADER.pack(entry.offset, entry.epoch, entry.control, len(entry.payload))
            out += entry.payload
        return bytes(out)

    def truncate_to(self, offset: int) -> None:
        # Truncation is treated as durable: the driver flushes the truncated file.
        del self.entries[offset:]
        self._flushed = min(self._flushed, offset)

    def flush(self, offset: int) -> None:
        self._flushed = max(self._flushed, min(offset, self.end_offset))

    def crash(self) -> None:
        """Lose the unflushed tail, as a kill -9 of the process and the OS would."""
        del self.entries[self._flushed:]
