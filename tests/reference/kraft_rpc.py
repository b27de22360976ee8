"""Raw KRaft RPCs to a controller listener, encoded and decoded by kio, at the versions
Kafka 4.3.1's controllers send each other: Vote v2, BeginQuorumEpoch v1, EndQuorumEpoch
v1, Fetch v17 of ``__cluster_metadata``, FetchSnapshot v1, DescribeQuorum v2, and
ApiVersions v4 / DescribeCluster v1 on the controller listener.

Everything a test needs to aim them is learned over the wire (:func:`view`): the leader,
its epoch and end offset from DescribeQuorum, the cluster id from DescribeCluster; so the
same helpers drive Kafka's controllers and, later, Kafkernel's.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any

from kio.schema.api_versions.v4.request import ApiVersionsRequest
from kio.schema.api_versions.v4.response import ApiVersionsResponse
from kio.schema.begin_quorum_epoch.v1 import request as bqe
from kio.schema.begin_quorum_epoch.v1.response import BeginQuorumEpochResponse
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterResponse
from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse
from kio.schema.end_quorum_epoch.v1 import request as eqe
from kio.schema.end_quorum_epoch.v1.response import EndQuorumEpochResponse
from kio.schema.fetch.v17 import request as fetch_request
from kio.schema.fetch.v17.response import FetchResponse
from kio.schema.fetch_snapshot.v1 import request as snapshot_request
from kio.schema.fetch_snapshot.v1.response import FetchSnapshotResponse
from kio.schema.types import BrokerId, TopicName
from kio.schema.vote.v2 import request as vote_request
from kio.schema.vote.v2.response import VoteResponse
from kio.static.primitive import i8, i32, i32Timedelta, i64

from reference import kraft

METADATA_TOPIC = TopicName(kraft.METADATA_TOPIC)
METADATA_TOPIC_ID = kraft.METADATA_TOPIC_ID
# An observer id no controller or broker uses: Fetch from it only adds an observer.
OBSERVER_ID = 9999
# What Kafka's controllers put in the listener name of their endpoints.
CONTROLLER_LISTENER = "CONTROLLER"


def send(address: str, body: Any) -> Any:
    return kraft.send(address, body)


def vote(address: str, *, cluster_id: str | None, replica_id: int, replica_epoch: int,
         last_offset_epoch: int, last_offset: int, pre_vote: bool, voter_id: int = -1,
         replica_directory_id: uuid.UUID | None = None,
         voter_directory_id: uuid.UUID | None = None) -> VoteResponse:
    """Vote v2 (a pre-vote with ``pre_vote``) for ``replica_id`` at ``replica_epoch``."""
    partition = vote_request.PartitionData(
        partition_index=i32(0), replica_epoch=i32(replica_epoch),
        replica_id=BrokerId(replica_id), replica_directory_id=replica_directory_id,
        voter_directory_id=voter_directory_id, last_offset_epoch=i32(last_offset_epoch),
        last_offset=i64(last_offset), pre_vote=pre_vote)
    response: VoteResponse = send(address, vote_request.VoteRequest(
        cluster_id=cluster_id, voter_id=BrokerId(voter_id),
        topics=(vote_request.TopicData(topic_name=METADATA_TOPIC, partitions=(partition,)),)))
    return response


def begin_quorum_epoch(address: str, *, cluster_id: str | None, leader_id: int,
                       leader_epoch: int, voter_id: int = -1,
                       voter_directory_id: uuid.UUID | None = None,
                       leader_endpoints: tuple[tuple[str, int], ...] = ()
                       ) -> BeginQuorumEpochResponse:
    """BeginQuorumEpoch v1: ``leader_id`` claims ``leader_epoch``."""
    partition = bqe.PartitionData(partition_index=i32(0),
                                  voter_directory_id=voter_directory_id,
                                  leader_id=BrokerId(leader_id), leader_epoch=i32(leader_epoch))
    response: BeginQuorumEpochResponse = send(address, bqe.BeginQuorumEpochRequest(
        cluster_id=cluster_id, voter_id=BrokerId(voter_id),
        topics=(bqe.TopicData(topic_name=METADATA_TOPIC, partitions=(partition,)),),
        leader_endpoints=tuple(bqe.LeaderEndpoint(name=CONTROLLER_LISTENER, host=h,
                                                  port=p)  # type: ignore[arg-type]
                               for h, p in leader_endpoints)))
    return response


def end_quorum_epoch(address: str, *, cluster_id: str | None, leader_id: int,
                     leader_epoch: int, preferred: tuple[tuple[int, uuid.UUID | None], ...] = ()
                     ) -> EndQuorumEpochResponse:
    """EndQuorumEpoch v1: ``leader_id`` resigns ``leader_epoch``."""
    partition = eqe.PartitionData(
        partition_index=i32(0), leader_id=BrokerId(leader_id), leader_epoch=i32(leader_epoch),
        preferred_candidates=tuple(eqe.ReplicaInfo(candidate_id=BrokerId(i),
                                                   candidate_directory_id=d)
                                   for i, d in preferred))
    response: EndQuorumEpochResponse = send(address, eqe.EndQuorumEpochRequest(
        cluster_id=cluster_id,
        topics=(eqe.TopicData(topic_name=METADATA_TOPIC, partitions=(partition,)),),
        leader_endpoints=()))
    return response


def fetch(address: str, *, cluster_id: str | None, fetch_offset: int,
          last_fetched_epoch: int, current_leader_epoch: int,
          replica_id: int = OBSERVER_ID, replica_epoch: int = -1, max_wait_ms: int = 0,
          max_bytes: int = 1 << 20, replica_directory_id: uuid.UUID | None = None,
          topic_id: uuid.UUID = METADATA_TOPIC_ID) -> FetchResponse:
    """Fetch v17 of ``__cluster_metadata-0`` (named by its topic id) as a Raft replica
    (an observer by default), answered at once unless ``max_wait_ms``."""
    partition = fetch_request.FetchPartition(
        partition=i32(0), current_leader_epoch=i32(current_leader_epoch),
        fetch_offset=i64(fetch_offset), last_fetched_epoch=i32(last_fetched_epoch),
        log_start_offset=i64(-1), partition_max_bytes=i32(max_bytes),
        replica_directory_id=replica_directory_id)
    response: FetchResponse = send(address, fetch_request.FetchRequest(
        cluster_id=cluster_id,
        replica_state=fetch_request.ReplicaState(replica_id=BrokerId(replica_id),
                                                 replica_epoch=i64(replica_epoch)),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(0), max_bytes=i32(max_bytes),
        isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(fetch_request.FetchTopic(topic_id=topic_id, partitions=(partition,)),),
        forgotten_topics_data=(), rack_id=""))
    return response


def fetch_snapshot(address: str, *, cluster_id: str | None, current_leader_epoch: int,
                   end_offset: int, epoch: int, position: int = 0,
                   replica_id: int = OBSERVER_ID, max_bytes: int = 1 << 20
                   ) -> FetchSnapshotResponse:
    """FetchSnapshot v1 of snapshot ``end_offset``-``epoch`` from ``position``."""
    partition = snapshot_request.PartitionSnapshot(
        partition=i32(0), current_leader_epoch=i32(current_leader_epoch),
        snapshot_id=snapshot_request.SnapshotId(end_offset=i64(end_offset), epoch=i32(epoch)),
        position=i64(position))
    response: FetchSnapshotResponse = send(address, snapshot_request.FetchSnapshotRequest(
        cluster_id=cluster_id, replica_id=BrokerId(replica_id), max_bytes=i32(max_bytes),
        topics=(snapshot_request.TopicSnapshot(name=METADATA_TOPIC, partitions=(partition,)),)))
    return response


def describe_quorum(address: str) -> DescribeQuorumResponse:
    return kraft.describe_quorum(address)


def api_versions(address: str) -> ApiVersionsResponse:
    response: ApiVersionsResponse = send(address, ApiVersionsRequest(
        client_software_name="kraft-rpc", client_software_version="1"))
    return response


def describe_cluster(address: str, endpoint_type: int = 2) -> DescribeClusterResponse:
    """DescribeCluster v1; ``endpoint_type`` 2 asks a controller for the controllers."""
    response: DescribeClusterResponse = send(address, DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=i8(endpoint_type)))
    return response


@dataclass(frozen=True)
class QuorumView:
    """A quorum as its leader describes it."""

    cluster_id: str
    leader_id: int
    epoch: int
    high_watermark: int
    leader_end_offset: int
    voters: dict[int, uuid.UUID | None]  # voter id -> its directory id (None: static)
    addresses: dict[int, str]  # voter id -> host:port of its controller listener

    @property
    def leader(self) -> str:
        return self.addresses[self.leader_id]

    @property
    def followers(self) -> list[int]:
        return sorted(v for v in self.voters if v != self.leader_id)

    def follower(self, index: int = 0) -> str:
        return self.addresses[self.followers[index]]


def view(controllers: tuple[str, ...]) -> QuorumView:
    """Ask the controllers who leads, at which epoch, and the cluster id."""
    for address in controllers:
        try:
            described = describe_quorum(address)
        except (OSError, EOFError):
            continue
        partition = described.topics[0].partitions[0] if described.topics else None
        if described.error_code or partition is None or partition.error_code:
            continue
        addresses = {int(n.node_id): f"{n.listeners[0].host}:{n.listeners[0].port}"
                     for n in described.nodes if n.listeners}
        leader_end = next(int(v.log_end_offset) for v in partition.current_voters
                          if v.replica_id == partition.leader_id)
        cluster = describe_cluster(address)
        return QuorumView(
            cluster_id=str(cluster.cluster_id), leader_id=int(partition.leader_id),
            epoch=int(partition.leader_epoch), high_watermark=int(partition.high_watermark),
            leader_end_offset=leader_end,
            voters={int(v.replica_id): v.replica_directory_id
                    for v in partition.current_voters},
            addresses=addresses)
    raise AssertionError(f"no controller of {controllers} answered DescribeQuorum as leader")
