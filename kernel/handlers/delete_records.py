"""DeleteRecords (key 21): move a partition's log start offset forward (offset -1: to
the high watermark); whole segments below it are deleted.

As Kafka, the answer waits in the DeleteRecords purgatory until the low watermark (the
smallest log start offset among the replicas on live brokers) reaches the requested
offset; followers report theirs in their fetches. With one replica it is reached at
once. A partition still short of it at ``timeout_ms`` answers REQUEST_TIMED_OUT with the
low watermark it had. A topic whose cleanup.policy lacks ``delete`` refuses with
POLICY_VIOLATION.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.handlers.partition_requests import answer_partitions
from kernel.protocol.build import make, response_module
from kernel.purgatory import DelayedResponse
from kernel.replica.partition import Partition
from kernel.requests import RequestContext

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

INVALID_LOW_WATERMARK = -1


@dataclass(slots=True)
class _Pending:
    """A partition whose low watermark has not reached the requested offset yet;
    ``fields`` is its answer, REQUEST_TIMED_OUT until it does."""

    partition: Partition
    required_offset: int
    fields: dict[str, Any]


def handle(ctx: RequestContext, request: Any) -> Any:
    live = ctx.services.metadata.image.brokers
    pending: list[_Pending] = []

    def answer(partition: Partition, item: Any) -> dict[str, Any]:
        offset = partition.delete_records_on_leader(item.offset)
        low = partition.low_watermark(live)
        if low >= offset:
            return {"low_watermark": low}
        fields = {"low_watermark": low, "error_code": ErrorCode.request_timed_out}
        pending.append(_Pending(partition, offset, fields))
        return fields  # the partition's answer: the wait completes it

    topics = answer_partitions(ctx, request.topics, topic_attr="name",
                               partition_attr="partitions", index_attr="partition_index",
                               operation="DELETE", answer=answer)
    if not pending:
        return _response(ctx, topics)
    return _wait_for_replicas(ctx, int(request.timeout.total_seconds() * 1000), pending,
                              topics)


class DelayedDeleteRecords(DelayedResponse):
    """Completes when every pending partition's low watermark reached its offset, or
    the partition can no longer answer here (leadership moved, topic deleted)."""

    def __init__(self, ctx: RequestContext, timeout_ms: int, pending: list[_Pending]) -> None:
        super().__init__(timeout_ms)
        self.ctx = ctx
        self.pending = pending

    def try_complete(self) -> bool:
        services = self.ctx.services
        live = services.metadata.image.brokers
        still: list[_Pending] = []
        for w in self.pending:
            p = w.partition
            gone = services.replicas.get_partition(p.topic, p.partition) is not p
            if gone or not p.is_leader:
                w.fields.update(low_watermark=INVALID_LOW_WATERMARK, error_code=(
                    ErrorCode.unknown_topic_or_partition if gone
                    else ErrorCode.not_leader_or_follower))
                continue
            low = p.low_watermark(live)
            if low >= w.required_offset:
                w.fields.update(error_code=ErrorCode.none, low_watermark=low)
                continue
            still.append(w)
        self.pending = still
        if not still:
            return self.force_complete()
        return False


async def _wait_for_replicas(ctx: RequestContext, timeout_ms: int, pending: list[_Pending],
                             topics: list[tuple[str, list[dict[str, Any]]]]) -> Any:
    op = DelayedDeleteRecords(ctx, timeout_ms, pending)
    await op.wait_in(ctx.services.delete_records_purgatory, [w.partition.key for w in pending])
    for w in pending:
        if w.fields["error_code"] != ErrorCode.none:
            ctx.services.metrics.error(w.fields["error_code"])
    return _response(ctx, topics)


def _response(ctx: RequestContext, topics: list[tuple[str, list[dict[str, Any]]]]) -> Any:
    m = response_module(API_KEY, ctx.api_version)
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
