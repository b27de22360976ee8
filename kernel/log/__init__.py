"""The kernel's log storage, cut along Kafka's seams: validation, segments, indexes,
one partition's segment list, its loader, its log, and the log manager. A pure library:
no sockets, and asyncio only in the manager's periodic tasks and the cleaner threads'
calls back to the event loop. The record batch format and its codecs are
:mod:`kernel.protocol.records` and :mod:`kernel.protocol.compression`.

- :mod:`kernel.log.validator`: Kafka's LogValidator, the checks of an append and the
  in-place offset assignment (the produce hot path).
- :mod:`kernel.log.index`, :mod:`kernel.log.segment`: one segment's files.
- :mod:`kernel.log.leader_epoch`, :mod:`kernel.log.checkpoint`: Kafka's checkpoint files.
- :mod:`kernel.log.log_config`: :class:`LogConfig`, the topic configs a log honours.
- :mod:`kernel.log.local_log`: :class:`LocalLog`, one partition's segment list.
- :mod:`kernel.log.producer_state`: Kafka's ProducerStateManager, idempotent producers'
  epochs and sequences, snapshots and expiry.
- :mod:`kernel.log.loader`: :class:`LogLoader`, recovery when a log opens;
  :mod:`kernel.log.recovery_progress`: how far a start-up's recovery got.
- :mod:`kernel.log.log`: :class:`Log` (Kafka's UnifiedLog), one partition.
- :mod:`kernel.log.manager`: :class:`LogManager`, every log of a broker.
- :mod:`kernel.log.volume`: a log directory's file system, total and usable bytes.
- Compaction, Kafka's log cleaner: :mod:`kernel.log.log_cleaner` (:class:`LogCleaner`,
  the cleaner threads, their throttler, the swap handed to the event loop),
  :mod:`kernel.log.cleaner_manager` (:class:`LogCleanerManager`, the dirtiest eligible
  log, the log-cleaning states, the cleaner-offset-checkpoint),
  :mod:`kernel.log.cleaner` (Kafka's Cleaner: one log's clean, off the event loop) and
  :mod:`kernel.log.offset_map` (SkimpyOffsetMap: key -> last offset, bounded; in C in
  ``_cleaner.c``, its record walks too).
"""

from kernel.log.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    LogCallbacks,
    UnexpectedAppendOffsetError,
)
from kernel.log.log_config import LogConfig
from kernel.log.manager import LogDirError, LogDirInUseError, LogManager
from kernel.log.offset_metadata import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset
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
