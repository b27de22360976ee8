"""Record batches (magic v2) as the log stores them: building one from records and
walking a log's batches and their records. The KRaft metadata log is made of these."""

from kernel.protocol.records import (
    BatchHeader,
    Record,
    SimpleRecord,
    build_batch,
    iter_batches,
    iter_records,
)

__all__ = ["BatchHeader", "Record", "SimpleRecord", "build_batch", "iter_batches",
           "iter_records"]
