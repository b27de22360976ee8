"""DescribeLogDirs (key 35): each directory of ``log.dirs`` with the replicas it holds
(KIP-113), as Kafka's ``ReplicaManager.describeLogDirs`` answers it: per partition the
bytes of its segments, the lag of its log end behind the high watermark (0 for a
current replica, -1 for a log no replica here owns) and no future log (one log dir
per replica: AlterReplicaLogDirs is not served); from v4 the total and usable bytes of
the directory's volume; from v5 whether it is cordoned (KIP-1066; no dir is). Null
topics describe every log; otherwise only the partitions named, a topic none of whose
partitions is here being left out. Needs DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED with no log dirs otherwise).

The log manager does not take a directory offline, so a directory whose volume cannot
be read answers KAFKA_STORAGE_ERROR, as Kafka answers an offline one."""

from __future__ import annotations

import datetime
import os
from typing import Any

from kernel.cluster import TopicPartition
from kernel.hookspecs import CLUSTER_NAME
from kernel.log.log import Log
from kernel.log.volume import volume_bytes
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode
from kernel.requests import RequestContext

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 5
# Kafka's DescribeLogDirsResponse.INVALID_OFFSET_LAG: a log without a replica here.
INVALID_OFFSET_LAG = -1


def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorize(ctx.session, "DESCRIBE", "CLUSTER", CLUSTER_NAME):
        return make(m.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0),
                    error_code=ErrorCode.cluster_authorization_failed, results=())
    wanted: set[TopicPartition] | None = None
    if request.topics is not None:
        wanted = {(t.topic, int(p)) for t in request.topics for p in t.partitions}
    results = []
    for directory, logs in ctx.services.logs.logs_by_dir().items():
        path = os.path.abspath(directory)
        try:
            total, usable = volume_bytes(directory)
        except OSError:
            results.append(make(m.DescribeLogDirsResult,
                                error_code=ErrorCode.kafka_storage_error, log_dir=path,
                                topics=(), total_bytes=-1, usable_bytes=-1,
                                is_cordoned=False))
            continue
        by_topic: dict[str, list[Log]] = {}
        for log in logs:
            if wanted is None or (log.topic, log.partition) in wanted:
                by_topic.setdefault(log.topic, []).append(log)
        results.append(make(
            m.DescribeLogDirsResult,
            error_code=ErrorCode.none,
            log_dir=path,
            topics=tuple(
                make(m.DescribeLogDirsTopic, name=topic, partitions=tuple(
                    make(m.DescribeLogDirsPartition, partition_index=log.partition,
                         partition_size=log.size, offset_lag=offset_lag(ctx, log),
                         is_future_key=False)
                    for log in sorted(topic_logs, key=lambda log: log.partition)))
                for topic, topic_logs in by_topic.items()),
            total_bytes=total,
            usable_bytes=usable,
            is_cordoned=False,
        ))
    return make(m.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none, results=tuple(results))


def offset_lag(ctx: RequestContext, log: Log) -> int:
    """Kafka's getLogEndOffsetLag for a current log: the high watermark's lead over the
    log end, never below 0."""
    replica = ctx.services.replicas.get_partition(log.topic, log.partition)
    if replica is None:
        return INVALID_OFFSET_LAG
    return max(replica.high_watermark - log.log_end_offset, 0)
