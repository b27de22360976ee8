"""DeleteRecords (key 21): move a partition's log start offset forward (offset -1: to
the high watermark); whole segments below it are deleted."""

from __future__ import annotations

import datetime
from typing import Any

from kernel.handlers.partition_requests import answer_partitions
from kernel.protocol.build import make, response_module
from kernel.replica.partition import Partition
from kernel.routing import RequestContext

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: RequestContext, request: Any) -> Any:
    def answer(partition: Partition, item: Any) -> dict[str, Any]:
        hw = partition.high_watermark
        offset = hw if item.offset == -1 else item.offset
        low = partition.log.delete_records_before(offset, high_watermark=hw)
        return {"low_watermark": low}

    m = response_module(API_KEY, ctx.api_version)
    topics = answer_partitions(ctx, request.topics, topic_attr="name",
                               partition_attr="partitions", index_attr="partition_index",
                               operation="DELETE", answer=answer)
    return make(
        m.DeleteRecordsResponse, throttle_time=datetime.timedelta(0),
        topics=tuple(
            m.DeleteRecordsTopicResult(name=name, partitions=tuple(
                make(m.DeleteRecordsPartitionResult, low_watermark=f.get("low_watermark", -1),
                     **{k: v for k, v in f.items() if k != "low_watermark"})
                for f in parts))
            for name, parts in topics
        ),
    )
