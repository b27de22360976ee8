"""File descriptors kept for the broker's own work.

Every client connection is a descriptor, and so is every file the log opens. Kafka
relies on the operator's ``ulimit -n``; a Python broker cannot let a flood of idle
clients take the descriptors its checkpoints, flushes, cleaner and inter-broker links
need. So the soft RLIMIT_NOFILE is read once at start and split:

- ``fixed``: what the broker needs whatever it hosts (the process, listeners, log dirs,
  log workers, cleaner threads);
- half of the rest is the budget of the log's open segment files: the log manager keeps
  at most that many segments open, least recently used closed first
  (:mod:`kernel.log.open_segments`), however many partitions it hosts; while it hosts
  few partitions, only what they can hold is kept;
- the inter-broker links, per other broker;
- clients get what is left: a connection beyond that is closed as soon as it is
  accepted, before the reserve is touched (the accept takes one descriptor of the
  margin).
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from kernel.log.local_log import DELETE_DIR_SUFFIX, MAX_OPEN_INACTIVE_SEGMENTS

# A segment's .log descriptor, and before Python 3.13 the duplicate each mmap keeps of
# its .index and .timeindex (see kernel/log/index.py).
FILES_PER_SEGMENT = 1 if sys.version_info >= (3, 13) else 3
# What one partition's segments can hold open at most: its active segment and the few
# inactive ones its reads keep (a partition at rest holds none).
FILES_PER_PARTITION = (1 + MAX_OPEN_INACTIVE_SEGMENTS) * FILES_PER_SEGMENT
# The interpreter and its event loop (stdio, epoll, wake-up pipes, the signal socket),
# the metadata plugin's log, the metrics endpoint and a few scrapes of it, plugins'
# odd files: a margin that also covers the descriptor an accept takes.
PROCESS_FILES = 128
# Per log dir: its lock, plus what one checkpoint write, one flush (indexes opened by
# name), a deletion and a producer-state snapshot open at once, in each log worker.
FILES_PER_LOG_DIR = 1
FILES_PER_LOG_WORKER = 8
# Per cleaner thread: the segments being read and the one being written, with indexes.
FILES_PER_CLEANER_THREAD = 16
# Per other broker: the replica fetcher's link and the inter-broker channel's pool.
LINKS_PER_BROKER = 8


def open_files_limit() -> int | None:
    """The soft RLIMIT_NOFILE; None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


@dataclass(frozen=True, slots=True)
class DescriptorReserve:
    """``limit``: the soft RLIMIT_NOFILE read at start (None: unlimited); ``fixed``:
    what the broker needs whatever it hosts."""

    @property
    def segment_files(self) -> int | None:
        """Descriptors the log's open segment files may take: half of what the fixed
        needs leave (None: no limit)."""
        if self.limit is None:
            return None
        return max(self.limit - self.fixed, 0) // 2

    @property
    def open_segments(self) -> int | None:
        """The log manager's budget of segments with open files (None: unbounded)."""
        files = self.segment_files
        return None if files is None else files // FILES_PER_SEGMENT

    limit: int | None
    fixed: int

    @classmethod
    def at_start(cls, *, limit: int | None, listening_sockets: int, log_dirs: int,
                 log_workers: int, cleaner_threads: int) -> DescriptorReserve:
        fixed = (PROCESS_FILES + listening_sockets + log_dirs * FILES_PER_LOG_DIR
                 + log_workers * FILES_PER_LOG_WORKER
                 + cleaner_threads * FILES_PER_CLEANER_THREAD)
        return cls(limit, fixed)

    def reserved(self, partitions: int, brokers: int) -> int:
        """Descriptors kept for the broker's work with ``partitions`` hosted and
        ``brokers`` other brokers to link to: the segment files' budget, or less while
        the partitions hosted cannot hold that much."""
        segments = partitions * FILES_PER_PARTITION
        budget = self.segment_files
        return (self.fixed + (segments if budget is None else min(segments, budget))
                + max(brokers, 0) * LINKS_PER_BROKER)

    def client_room(self, partitions: int, brokers: int) -> int | None:
        """Client connections the limit leaves room for (None: no limit)."""
        if self.limit is None:
            return None
        return max(self.limit - self.reserved(partitions, brokers), 0)


def partitions_on_disk(log_dirs: Sequence[str]) -> int:
    """Partition directories in ``log_dirs`` (for config check, which opens no log)."""
    count = 0
    for directory in log_dirs:
        try:
            entries = os.scandir(directory)
        except OSError:
            continue
        with entries:
            for entry in entries:
                name = entry.name
                if (entry.is_dir() and not name.endswith(DELETE_DIR_SUFFIX)
                        and name.rpartition("-")[2].isdigit() and "-" in name):
                    count += 1
    return count


def serve_limit() -> int | None:
    """The soft limit ``kafkernel serve`` will run with: it raises it to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    if hard == resource.RLIM_INFINITY:
        return max(int(soft), NR_OPEN_DEFAULT)
    return max(int(soft), int(hard))


# Linux's default fs.nr_open: the most a soft limit can be when the hard one is unlimited.
NR_OPEN_DEFAULT = 1024 * 1024


def describe_room(reserve: DescriptorReserve, partitions: int, brokers: int) -> str:
    room = reserve.client_room(partitions, brokers)
    if room is None:
        return "no open files limit (RLIMIT_NOFILE): client connections are not bounded by it"
    return (f"the open files limit (RLIMIT_NOFILE {reserve.limit}) leaves room for {room} "
            f"client connections beside the {reserve.reserved(partitions, brokers)} "
            f"descriptors kept for the broker's own work: {reserve.fixed} for the process, "
            f"listeners, log dirs, log workers and cleaner, at most "
            f"{reserve.segment_files} (half of the rest) for the segment files of its "
            f"{partitions} partitions, which keep at most {reserve.open_segments} segments "
            f"open ({FILES_PER_SEGMENT} files each, least recently used closed first), "
            f"and {LINKS_PER_BROKER} per other broker")
