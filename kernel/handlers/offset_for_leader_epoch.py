"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch from the leader
epoch cache, so consumers (KIP-320) and followers detect log divergence."""

from __future__ import annotations

import datetime
from typing import Any

from kernel.handlers.partition_requests import answer_partitions
from kernel.protocol.build import make, response_module
from kernel.replica.partition import Partition
from kernel.requests import RequestContext

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4


def handle(ctx: RequestContext, request: Any) -> Any:
    def answer(partition: Partition, item: Any) -> dict[str, Any]:
        epoch, end_offset = partition.last_offset_for_leader_epoch(item.leader_epoch)
        return {"leader_epoch": epoch, "end_offset": end_offset}

    m = response_module(API_KEY, ctx.api_version)
    topics = answer_partitions(ctx, request.topics, topic_attr="topic",
                               partition_attr="partitions", index_attr="partition",
                               operation="DESCRIBE", answer=answer)
    return make(
        m.OffsetForLeaderEpochResponse, throttle_time=datetime.timedelta(0),
        topics=tuple(
            m.OffsetForLeaderTopicResult(topic=name, partitions=tuple(
                make(m.EpochEndOffset, **f) for f in parts))
            for name, parts in topics
        ),
    )
