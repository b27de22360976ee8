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
from typing import Any

from kernel.cluster import TopicPartition
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode
from kernel.replica.manager import ReplicaLogInfo
from kernel.requests import RequestContext

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 5


def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorize(ctx.session, "DESCRIBE", "CLUSTER", CLUSTER_NAME):
        return make(m.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0),
                    error_code=ErrorCode.cluster_authorization_failed, results=())
    wanted: set[TopicPartition] | None = None
    if request.topics is not None:
        wanted = {(t.topic, int(p)) for t in request.topics for p in t.partitions}
    results = []
    for described in ctx.services.replicas.describe_log_dirs(wanted):
        by_topic: dict[str, list[ReplicaLogInfo]] = {}
        for log in described.logs:
            by_topic.setdefault(log.topic, []).append(log)
        results.append(make(
            m.DescribeLogDirsResult,
            error_code=described.error,
            log_dir=described.path,
            topics=tuple(
                make(m.DescribeLogDirsTopic, name=topic, partitions=tuple(
                    make(m.DescribeLogDirsPartition, partition_index=log.partition,
                         partition_size=log.size, offset_lag=log.offset_lag,
                         is_future_key=False)
                    for log in sorted(topic_logs, key=lambda log: log.partition)))
                for topic, topic_logs in by_topic.items()),
            total_bytes=described.total_bytes,
            usable_bytes=described.usable_bytes,
            is_cordoned=False,
        ))
    return make(m.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none, results=tuple(results))
