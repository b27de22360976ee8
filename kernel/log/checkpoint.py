"""Kafka's text checkpoint files: a version line, a count line, then one entry a line.

``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint`` (one per log
directory, ``topic partition offset``) and ``leader-epoch-checkpoint`` (one per
partition, ``epoch offset``). Writes go to a temporary file that replaces the old one,
so a crash leaves either the old or the new content.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# The replica layer's high watermarks, kept through restarts (Kafka's ReplicaManager
# writes it every replica.high.watermark.checkpoint.interval.ms).
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


class CheckpointError(Exception):
    """A checkpoint file that does not parse; the message names the file and line."""


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    """fsync a file by name: also writes back pages dirtied through a mapping that has
    been closed since. A file gone meanwhile (deleted, renamed for deletion) has
    nothing left to make durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(path: Path, entries: list[str], *, sync: bool = True) -> None:
    tmp = path.with_name(path.name + ".tmp")
    text = f"{CHECKPOINT_VERSION}\n{len(entries)}\n" + "".join(e + "\n" for e in entries)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def read_checkpoint(path: Path, fields: int) -> list[list[str]] | None:
    """Entries split into ``fields`` parts; None when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"{path}: missing version or count line")
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip())
    except ValueError:
        raise CheckpointError(f"{path}: malformed version or count line") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: unsupported checkpoint version {version}")
    body = [line for line in lines[2:] if line.strip()]
    if len(body) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(body)}")
    entries = []
    for number, line in enumerate(body, start=3):
        parts = line.split()
        if len(parts) != fields:
            raise CheckpointError(f"{path}: malformed line {number}: {line!r}")
        entries.append(parts)
    return entries


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``topic partition offset`` lines; an absent file is empty."""
    entries = read_checkpoint(path, 3)
    result: dict[tuple[str, int], int] = {}
    for topic, partition, offset in entries or ():
        try:
            result[(topic, int(partition))] = int(offset)
        except ValueError:
            raise CheckpointError(f"{path}: malformed entry {topic} {partition} {offset}") from None
    return result


def write_offset_checkpoint(
    path: Path, offsets: Mapping[tuple[str, int], int], *, sync: bool = True
) -> None:
    entries = [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    write_checkpoint(path, entries, sync=sync)


OffsetsByDir = dict[Path, dict[tuple[str, int], int]]  # a checkpoint's offsets, by log dir


class OrderedCheckpoints:
    """Writes offset checkpoints from any thread, one write at a time (they share the
    file's temporary), and never over a newer snapshot that a write started later
    already put there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._written: dict[str, int] = {}

    def writer(self, name: str, snapshot: OffsetsByDir) -> Callable[[], None]:
        """Writes ``snapshot``, taken now (on the event loop), into the ``name`` files."""
        self._seq += 1
        seq = self._seq

        def write() -> None:
            with self._lock:
                if self._written.get(name, 0) > seq:
                    return
                for directory, offsets in snapshot.items():
                    if directory.exists():
                        write_offset_checkpoint(directory / name, offsets)
                self._written[name] = seq

        return write
