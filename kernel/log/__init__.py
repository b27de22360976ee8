"""The kernel's log storage: record batches, segments, indexes, one partition's log and
the log manager. A pure library: no sockets, and asyncio only in the manager's
periodic tasks.

- :mod:`kernel.log.records`: batch v2 validation and in-place offset assignment (the
  produce hot path), codecs, decoding and an encoder.
- :mod:`kernel.log.index`, :mod:`kernel.log.segment`: one segment's files.
- :mod:`kernel.log.leader_epoch`, :mod:`kernel.log.checkpoint`: Kafka's checkpoint files.
- :mod:`kernel.log.log`: :class:`Log`, one partition.
- :mod:`kernel.log.manager`: :class:`LogManager`, every log of a broker.
"""

from kernel.log.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    LogCallbacks,
    LogConfig,
    UnexpectedAppendOffsetError,
)
from kernel.log.manager import LogDirError, LogDirInUseError, LogManager
from kernel.log.records import AppendOrigin, LogAppendInfo
from kernel.log.segment import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendOrigin",
    "FetchDataInfo",
    "Log",
    "LogAppendInfo",
    "LogCallbacks",
    "LogConfig",
    "LogDirError",
    "LogDirInUseError",
    "LogManager",
    "LogOffsetMetadata",
    "TimestampAndOffset",
    "UnexpectedAppendOffsetError",
]
