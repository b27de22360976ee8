"""What the log's unit tests share: sample records, and a crash that drops a log without
closing it (the state recovery starts from)."""

from __future__ import annotations

import os

from kernel.log import Log
from kernel.protocol.records import SimpleRecord


def sample_records(n: int = 5, ts: int = 1_000) -> list[SimpleRecord]:
    """``n`` keyed records with a header each, timestamps from ``ts``."""
    return [
        SimpleRecord(
            value=b"value-%d" % i * 10, key=b"key-%d" % i, headers=[("h", b"%d" % i)],
            timestamp=ts + i,
        )
        for i in range(n)
    ]


def crash_log(log: Log) -> None:
    """Drop the log without closing: indexes stay preallocated, nothing is trimmed."""
    log.flush()
    for segment in log.segments:
        for index in (segment._offset_index, segment._time_index):
            if index is not None:
                index._close_files()
        if segment._fd >= 0:
            os.close(segment._fd)
            segment._fd = -1
