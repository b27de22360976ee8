"""A log directory's lock (``.lock``, an exclusive flock as Kafka's) and the start-up
check that it takes writes."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from kernel.log.volume import volume_bytes

LOCK_FILE = ".lock"


class LogDirError(Exception):
    """A log directory that cannot be used: it names the directory and the problem."""

    def __init__(self, directory: Path, problem: str) -> None:
        super().__init__(f"{directory}: {problem}")
        self.directory = directory
        self.problem = problem


class LogDirInUseError(LogDirError):
    """Another broker (or manager) holds the log directory's lock."""


WRITE_PROBE_FILE = ".kafkernel-write-probe"
WRITE_PROBE_BYTES = 4096


def lock_log_dir(directory: Path) -> int:
    """Create ``directory``, take its ``.lock`` (an exclusive flock, as Kafka's) and
    check that it takes writes. Returns the lock's descriptor: closing it releases the
    lock. Raises :class:`LogDirError` naming the directory and the problem."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except FileExistsError:
        raise LogDirError(directory, "exists and is not a directory") from None
    except OSError as e:
        raise LogDirError(directory, f"cannot be created or written: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogDirInUseError(
            directory, "is in use by another running broker (its .lock is held)"
        ) from None
    try:
        _check_writable(directory)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_writable(directory: Path) -> None:
    """Fail at start, not at the first produce: write, fsync and remove one block. A
    filesystem with no space left for unprivileged writes counts as full even when
    root's reserved blocks would still take this one."""
    probe = directory / WRITE_PROBE_FILE
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, bytes(WRITE_PROBE_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
        full = volume_bytes(directory)[1] == 0
    except OSError as e:
        raise LogDirError(directory, f"is not writable: {e.strerror}") from None
    if full:
        raise LogDirError(directory, "is full: no space left on the device")
