"""ListOffsets (key 2): offsets by timestamp, and the special earliest/latest/max
timestamp lookups. Consumers see the high watermark (or the last stable offset for
read_committed) as "latest"; followers see the log end offset."""

from __future__ import annotations

import datetime
from typing import Any

from kernel.handlers.partition_requests import answer_partitions
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.replica.partition import Partition
from kernel.requests import RequestContext

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 11

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
READ_COMMITTED = 1
NO_THROTTLE = datetime.timedelta(0)
# The version from which each special timestamp is served; Kafka answers an older
# request naming one with UNSUPPORTED_VERSION for that partition.
SINCE_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                 EARLIEST_PENDING_UPLOAD: 11}


def handle(ctx: RequestContext, request: Any) -> Any:
    consumer = request.replica_id < 0
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED

    def answer(partition: Partition, item: Any) -> dict[str, Any]:
        ts = item.timestamp
        if ctx.api_version < SINCE_VERSION.get(ts, 0):
            raise KafkaError(ErrorCode.unsupported_version)
        # As Kafka's lastFetchableOffset: what this reader may fetch.
        if not consumer:
            limit = partition.log_end_offset
        else:
            limit = partition.last_stable_offset if read_committed else partition.high_watermark
        if ts == LATEST:
            return {"timestamp": -1, "offset": limit, "leader_epoch": partition.leader_epoch}
        if ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
            # No tiered storage: Kafka answers offset -1 for these.
            return {"timestamp": -1, "offset": -1, "leader_epoch": -1}
        found = partition.fetch_offset_for_timestamp(EARLIEST if ts == EARLIEST_LOCAL else ts)
        # As Kafka, a lookup by time answers nothing the reader may not fetch yet.
        if found is None or ((ts >= 0 or ts == MAX_TIMESTAMP) and found.offset >= limit):
            return {"timestamp": -1, "offset": -1, "leader_epoch": -1}
        epoch = found.leader_epoch if found.leader_epoch is not None else -1
        return {"timestamp": found.timestamp, "offset": found.offset, "leader_epoch": epoch}

    topics = answer_partitions(ctx, request.topics, topic_attr="name",
                               partition_attr="partitions", index_attr="partition_index",
                               operation="DESCRIBE", answer=answer)
    # The response follows from these values alone: a consumer asking again while the
    # log stands still (Spark's connector, twice per poll) gets the entity built before.
    values = tuple((name, tuple(tuple(f.items()) for f in parts)) for name, parts in topics)

    def build() -> Any:
        m = response_module(API_KEY, ctx.api_version)
        return make(
            m.ListOffsetsResponse, throttle_time=NO_THROTTLE,
            topics=tuple(
                m.ListOffsetsTopicResponse(name=name, partitions=tuple(
                    make(m.ListOffsetsPartitionResponse, **f) for f in parts))
                for name, parts in topics
            ),
        )

    return ctx.recent_responses.built(API_KEY, ctx.api_version, values, build)
