"""The file system a log directory lives on: its size and what is left of it, as
Kafka reads them for DescribeLogDirs (KIP-827). One owner for the handler and the
broker's disk gauges, so both report the same numbers."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["volume_bytes"]


def volume_bytes(directory: str | Path) -> tuple[int, int]:
    """(total, usable) bytes of the directory's file system, as Java's FileStore
    getTotalSpace and getUsableSpace read them (statvfs: blocks and blocks available to
    an unprivileged user, in fragment units). Raises OSError when it cannot be read."""
    st = os.statvfs(directory)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
