"""The kernel's log storage: validation, segments, indexes, one partition's log and the
log manager. A pure library: no sockets, and asyncio only in the manager's periodic
tasks. The record batch format and its codecs are :mod:`kernel.protocol.records` and
:mod:`kernel.protocol.compression`.

- :mod:`kernel.log.validator`: Kafka's LogValidator, the checks of an append and the
  in-place offset assignment (the produce hot path).
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
from kernel.log.segment import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset
from kernel.log.validator import AppendOrigin, LogAppendInfo

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
