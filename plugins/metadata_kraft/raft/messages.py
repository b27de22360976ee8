"""Raft RPCs as kio's dataclasses, at the versions Kafka 4.3.1's controllers send
(Vote v2, BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v17, FetchSnapshot v1,
DescribeQuorum v2), so a
driver can put them on the wire unchanged. Every Raft request names exactly one
partition: ``__cluster_metadata``-0, by name or (Fetch) by its reserved topic id."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence

from kio.schema.begin_quorum_epoch.v1 import request as bqe_req
from kio.schema.begin_quorum_epoch.v1 import response as bqe_resp
from kio.schema.describe_quorum.v2 import request as dq_req
from kio.schema.describe_quorum.v2 import response as dq_resp
from kio.schema.end_quorum_epoch.v1 import request as eqe_req
from kio.schema.end_quorum_epoch.v1 import response as eqe_resp
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.fetch_snapshot.v1 import request as fs_req
from kio.schema.fetch_snapshot.v1 import response as fs_resp
from kio.schema.types import BrokerId, TopicName
from kio.schema.vote.v2 import request as vote_req
from kio.schema.vote.v2 import response as vote_resp
from kio.static.primitive import Records, i32, i32Timedelta, i64

from .leader import ReplicaProgress

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
# Kafka's reserved id of the metadata topic (Uuid 0...01, "AAAAAAAAAAAAAAAAAAAAAQ").
METADATA_TOPIC_ID = uuid.UUID(int=1)

VoteRequest = vote_req.VoteRequest
VoteResponse = vote_resp.VoteResponse
BeginQuorumEpochRequest = bqe_req.BeginQuorumEpochRequest
BeginQuorumEpochResponse = bqe_resp.BeginQuorumEpochResponse
EndQuorumEpochRequest = eqe_req.EndQuorumEpochRequest
EndQuorumEpochResponse = eqe_resp.EndQuorumEpochResponse
FetchRequest = fetch_req.FetchRequest
FetchResponse = fetch_resp.FetchResponse
DescribeQuorumRequest = dq_req.DescribeQuorumRequest
DescribeQuorumResponse = dq_resp.DescribeQuorumResponse
FetchSnapshotRequest = fs_req.FetchSnapshotRequest
FetchSnapshotResponse = fs_resp.FetchSnapshotResponse

RaftRequest = (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
               | DescribeQuorumRequest | FetchSnapshotRequest)
RaftResponse = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse
                | FetchResponse | DescribeQuorumResponse | FetchSnapshotResponse)


def _ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


def single_partition(request: RaftRequest) -> bool:
    """The request names exactly ``__cluster_metadata``-0 (Kafka's hasValidTopicPartition)."""
    if isinstance(request, FetchRequest):
        return (len(request.topics) == 1 and request.topics[0].topic_id == METADATA_TOPIC_ID
                and len(request.topics[0].partitions) == 1
                and request.topics[0].partitions[0].partition == METADATA_PARTITION)
    if isinstance(request, FetchSnapshotRequest):
        return (len(request.topics) == 1 and request.topics[0].name == METADATA_TOPIC
                and len(request.topics[0].partitions) == 1
                and request.topics[0].partitions[0].partition == METADATA_PARTITION)
    topics = request.topics
    return (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC
            and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == METADATA_PARTITION)


# -- Vote ----------------------------------------------------------------------------


def vote_request(cluster_id: str | None, voter_id: int, replica_id: int, epoch: int,
                 last_epoch: int, last_offset: int, pre_vote: bool) -> VoteRequest:
    partition = vote_req.PartitionData(
        partition_index=i32(METADATA_PARTITION), replica_epoch=i32(epoch),
        replica_id=BrokerId(replica_id), replica_directory_id=None, voter_directory_id=None,
        last_offset_epoch=i32(last_epoch), last_offset=i64(last_offset), pre_vote=pre_vote)
    return VoteRequest(cluster_id=cluster_id, voter_id=BrokerId(voter_id), topics=(
        vote_req.TopicData(topic_name=TopicName(METADATA_TOPIC), partitions=(partition,)),))


def vote_response(error: ErrorCode, partition_error: ErrorCode = ErrorCode.none,
                  leader_id: int = -1, epoch: int = -1, granted: bool = False) -> VoteResponse:
    if error is not ErrorCode.none:
        return VoteResponse(error_code=error, topics=())
    partition = vote_resp.PartitionData(
        partition_index=i32(METADATA_PARTITION), error_code=partition_error,
        leader_id=BrokerId(leader_id), leader_epoch=i32(epoch), vote_granted=granted)
    return VoteResponse(error_code=error, topics=(
        vote_resp.TopicData(topic_name=TopicName(METADATA_TOPIC), partitions=(partition,)),))


# -- BeginQuorumEpoch ---------------------------------------------------------------------


def begin_quorum_epoch_request(cluster_id: str | None, voter_id: int, leader_id: int,
                               epoch: int) -> BeginQuorumEpochRequest:
    partition = bqe_req.PartitionData(
        partition_index=i32(METADATA_PARTITION), voter_directory_id=None,
        leader_id=BrokerId(leader_id), leader_epoch=i32(epoch))
    return BeginQuorumEpochRequest(
        cluster_id=cluster_id, voter_id=BrokerId(voter_id), leader_endpoints=(),
        topics=(bqe_req.TopicData(topic_name=TopicName(METADATA_TOPIC),
                                  partitions=(partition,)),))


def begin_quorum_epoch_response(error: ErrorCode, partition_error: ErrorCode = ErrorCode.none,
                                leader_id: int = -1, epoch: int = -1
                                ) -> BeginQuorumEpochResponse:
    if error is not ErrorCode.none:
        return BeginQuorumEpochResponse(error_code=error, topics=())
    partition = bqe_resp.PartitionData(
        partition_index=i32(METADATA_PARTITION), error_code=partition_error,
        leader_id=BrokerId(leader_id), leader_epoch=i32(epoch))
    return BeginQuorumEpochResponse(error_code=error, topics=(
        bqe_resp.TopicData(topic_name=TopicName(METADATA_TOPIC), partitions=(partition,)),))


# -- EndQuorumEpoch -----------------------------------------------------------------------


def end_quorum_epoch_request(cluster_id: str | None, leader_id: int, epoch: int,
                             preferred: Sequence[int]) -> EndQuorumEpochRequest:
    candidates = tuple(eqe_req.ReplicaInfo(candidate_id=BrokerId(c), candidate_directory_id=None)
                       for c in preferred)
    partition = eqe_req.PartitionData(
        partition_index=i32(METADATA_PARTITION), leader_id=BrokerId(leader_id),
        leader_epoch=i32(epoch), preferred_candidates=candidates)
    return EndQuorumEpochRequest(cluster_id=cluster_id, leader_endpoints=(), topics=(
        eqe_req.TopicData(topic_name=TopicName(METADATA_TOPIC), partitions=(partition,)),))


def end_quorum_epoch_response(error: ErrorCode, partition_error: ErrorCode = ErrorCode.none,
                              leader_id: int = -1, epoch: int = -1) -> EndQuorumEpochResponse:
    if error is not ErrorCode.none:
        return EndQuorumEpochResponse(error_code=error, topics=())
    partition = eqe_resp.PartitionData(
        partition_index=i32(METADATA_PARTITION), error_code=partition_error,
        leader_id=BrokerId(leader_id), leader_epoch=i32(epoch))
    return EndQuorumEpochResponse(error_code=error, topics=(
        eqe_resp.TopicData(topic_name=TopicName(METADATA_TOPIC), partitions=(partition,)),))


# -- Fetch --------------------------------------------------------------------------------


def fetch_request(cluster_id: str | None, replica_id: int, leader_epoch: int,
                  fetch_offset: int, last_fetched_epoch: int, max_wait_ms: int,
                  max_bytes: int) -> FetchRequest:
    partition = fetch_req.FetchPartition(
        partition=i32(METADATA_PARTITION), current_leader_epoch=i32(leader_epoch),
        fetch_offset=i64(fetch_offset), last_fetched_epoch=i32(last_fetched_epoch),
        partition_max_bytes=i32(max_bytes))
    return FetchRequest(
        cluster_id=cluster_id,
        replica_state=fetch_req.ReplicaState(replica_id=BrokerId(replica_id)),
        max_wait=_ms(max_wait_ms), min_bytes=i32(0), max_bytes=i32(max_bytes),
        topics=(fetch_req.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=(partition,)),),
        forgotten_topics_data=())


def fetch_response(error: ErrorCode, partition_error: ErrorCode = ErrorCode.none, *,
                   leader_id: int = -1, epoch: int = -1, high_watermark: int = -1,
                   log_start_offset: int = -1, diverging: tuple[int, int] | None = None,
                   snapshot: tuple[int, int] | None = None, records: bytes = b""
                   ) -> FetchResponse:
    if error is not ErrorCode.none:
        return FetchResponse(throttle_time=_ms(0), error_code=error, responses=())
    partition = fetch_resp.PartitionData(
        partition_index=i32(METADATA_PARTITION), error_code=partition_error,
        high_watermark=i64(high_watermark), log_start_offset=i64(log_start_offset),
        diverging_epoch=fetch_resp.EpochEndOffset(
            epoch=i32(diverging[0]), end_offset=i64(diverging[1]))
        if diverging else fetch_resp.EpochEndOffset(),
        current_leader=fetch_resp.LeaderIdAndEpoch(
            leader_id=BrokerId(leader_id), leader_epoch=i32(epoch)),
        snapshot_id=fetch_resp.SnapshotId(end_offset=i64(snapshot[0]), epoch=i32(snapshot[1]))
        if snapshot else fetch_resp.SnapshotId(),
        aborted_transactions=None, records=Records(records))
    return FetchResponse(throttle_time=_ms(0), error_code=error, responses=(
        fetch_resp.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=(partition,)),))


def fetch_max_wait_ms(request: FetchRequest) -> int:
    return int(request.max_wait.total_seconds() * 1000)


# -- FetchSnapshot ------------------------------------------------------------------------


def fetch_snapshot_response(error: ErrorCode, partition_error: ErrorCode = ErrorCode.none, *,
                            leader_id: int = -1, epoch: int = -1,
                            snapshot: tuple[int, int] = (-1, -1), size: int = -1,
                            position: int = -1, records: bytes = b""
                            ) -> FetchSnapshotResponse:
    if error is not ErrorCode.none:
        return FetchSnapshotResponse(throttle_time=_ms(0), error_code=error, topics=())
    partition = fs_resp.PartitionSnapshot(
        index=i32(METADATA_PARTITION), error_code=partition_error,
        snapshot_id=fs_resp.SnapshotId(end_offset=i64(snapshot[0]), epoch=i32(snapshot[1])),
        current_leader=fs_resp.LeaderIdAndEpoch(leader_id=BrokerId(leader_id),
                                                leader_epoch=i32(epoch)),
        size=i64(size), position=i64(position), unaligned_records=Records(records))
    return FetchSnapshotResponse(throttle_time=_ms(0), error_code=error, topics=(
        fs_resp.TopicSnapshot(name=TopicName(METADATA_TOPIC), partitions=(partition,)),))


# -- DescribeQuorum -----------------------------------------------------------------------


def _replica_state(progress: ReplicaProgress) -> dq_resp.ReplicaState:
    return dq_resp.ReplicaState(
        replica_id=BrokerId(progress.replica_id), replica_directory_id=None,
        log_end_offset=i64(-1 if progress.end_offset is None else progress.end_offset),
        last_fetch_timestamp=i64(progress.last_fetch_ms),
        last_caught_up_timestamp=i64(progress.last_caught_up_ms))


def describe_quorum_response(partition_error: ErrorCode, *, leader_id: int = -1,
                             epoch: int = -1, high_watermark: int = -1,
                             voters: Sequence[ReplicaProgress] = (),
                             observers: Sequence[ReplicaProgress] = (),
                             error_message: str | None = None) -> DescribeQuorumResponse:
    partition = dq_resp.PartitionData(
        partition_index=i32(METADATA_PARTITION), error_code=partition_error,
        error_message=error_message, leader_id=BrokerId(leader_id), leader_epoch=i32(epoch),
        high_watermark=i64(high_watermark),
        current_voters=tuple(_replica_state(v) for v in voters),
        observers=tuple(_replica_state(o) for o in observers))
    return DescribeQuorumResponse(error_code=ErrorCode.none, error_message=None, nodes=(),
                                  topics=(dq_resp.TopicData(topic_name=TopicName(METADATA_TOPIC),
                                                            partitions=(partition,)),))
