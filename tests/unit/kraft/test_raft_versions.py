"""Every Raft RPC version the controller listener serves, through kio's codec: a request
of that version becomes the core's version with the fields the core reads, and the
core's answer goes back at the request's version."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from kernel.api.protocol import make, request_module
from plugins.metadata_kraft.raft import messages as m
from plugins.metadata_kraft.raft.leader import ReplicaProgress
from plugins.metadata_kraft.raft.versions import CORE_VERSIONS, SERVED, to_core, to_version

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def _wire(entity: Any) -> Any:
    """``entity`` written and read back by kio at its own version."""
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    value, end = entity_reader(type(entity))(out.getvalue(), 0)
    assert end == len(out.getvalue())
    return value


def _versions(api_key: int) -> list[int]:
    low, high = SERVED[api_key]
    return list(range(low, high + 1))


def _vote(version: int) -> Any:
    mod = request_module(52, version)
    part = make(mod.PartitionData, partition_index=0, replica_epoch=7, replica_id=2,
                last_offset_epoch=6, last_offset=40, pre_vote=True,
                replica_directory_id=None, voter_directory_id=None)
    return make(mod.VoteRequest, cluster_id=CLUSTER_ID, voter_id=1, topics=(
        mod.TopicData(topic_name=m.METADATA_TOPIC, partitions=(part,)),))


@pytest.mark.parametrize("version", _versions(52))
def test_vote(version: int) -> None:
    core = to_core(_wire(_vote(version)))
    assert type(core) is m.VoteRequest
    part = core.topics[0].partitions[0]
    assert (core.cluster_id, part.replica_id, part.replica_epoch, part.last_offset_epoch,
            part.last_offset) == (CLUSTER_ID, 2, 7, 6, 40)
    assert part.pre_vote is (version >= 2), "before v2 every vote is a real one"
    assert core.voter_id == (1 if version >= 1 else -1)
    answer = _wire(to_version(m.vote_response(m.ErrorCode.none, leader_id=3, epoch=7,
                                              granted=True), version))
    assert answer.__version__ == version
    p = answer.topics[0].partitions[0]
    assert (p.leader_id, p.leader_epoch, p.vote_granted) == (3, 7, True)


@pytest.mark.parametrize("version", _versions(53))
def test_begin_quorum_epoch(version: int) -> None:
    mod = request_module(53, version)
    part = make(mod.PartitionData, partition_index=0, leader_id=3, leader_epoch=7,
                voter_directory_id=None)
    request = make(mod.BeginQuorumEpochRequest, cluster_id=CLUSTER_ID, voter_id=1,
                   leader_endpoints=(), topics=(
                       mod.TopicData(topic_name=m.METADATA_TOPIC, partitions=(part,)),))
    core = to_core(_wire(request))
    assert type(core) is m.BeginQuorumEpochRequest
    p = core.topics[0].partitions[0]
    assert (core.cluster_id, p.leader_id, p.leader_epoch) == (CLUSTER_ID, 3, 7)
    answer = _wire(to_version(m.begin_quorum_epoch_response(
        m.ErrorCode.none, m.ErrorCode.fenced_leader_epoch, leader_id=3, epoch=8), version))
    p = answer.topics[0].partitions[0]
    assert (p.error_code, p.leader_id, p.leader_epoch) == (
        m.ErrorCode.fenced_leader_epoch, 3, 8)


@pytest.mark.parametrize("version", _versions(54))
def test_end_quorum_epoch_keeps_the_successors(version: int) -> None:
    mod = request_module(54, version)
    if version == 0:
        part = mod.PartitionData(partition_index=0, leader_id=3, leader_epoch=7,
                                 preferred_successors=(2, 1))
    else:
        part = mod.PartitionData(partition_index=0, leader_id=3, leader_epoch=7,
                                 preferred_candidates=tuple(
                                     mod.ReplicaInfo(candidate_id=c, candidate_directory_id=None)
                                     for c in (2, 1)))
    request = make(mod.EndQuorumEpochRequest, cluster_id=CLUSTER_ID, leader_endpoints=(),
                   topics=(mod.TopicData(topic_name=m.METADATA_TOPIC, partitions=(part,)),))
    core = to_core(_wire(request))
    assert type(core) is m.EndQuorumEpochRequest
    p = core.topics[0].partitions[0]
    assert [c.candidate_id for c in p.preferred_candidates] == [2, 1]
    answer = _wire(to_version(m.end_quorum_epoch_response(
        m.ErrorCode.none, leader_id=3, epoch=7), version))
    assert (answer.topics[0].partitions[0].leader_id, answer.__version__) == (3, version)


def _fetch(version: int, topic: str = m.METADATA_TOPIC) -> Any:
    mod = request_module(1, version)
    part = make(mod.FetchPartition, partition=0, current_leader_epoch=7, fetch_offset=40,
                last_fetched_epoch=6, log_start_offset=-1, partition_max_bytes=1024,
                replica_directory_id=None, high_watermark=30)
    fetch_topic = make(mod.FetchTopic, topic=topic, topic_id=m.METADATA_TOPIC_ID
                       if topic == m.METADATA_TOPIC else uuid.uuid4(), partitions=(part,))
    values: dict[str, Any] = {"cluster_id": CLUSTER_ID, "max_wait": m._ms(500),
                              "min_bytes": 0, "max_bytes": 4096, "topics": (fetch_topic,),
                              "forgotten_topics_data": (), "rack_id": ""}
    if version >= 15:
        values["replica_state"] = mod.ReplicaState(replica_id=2, replica_epoch=-1)
    else:
        values["replica_id"] = 2
    return make(mod.FetchRequest, **values)


@pytest.mark.parametrize("version", _versions(1))
def test_fetch(version: int) -> None:
    core = to_core(_wire(_fetch(version)))
    assert type(core) is m.FetchRequest
    # Before v13 the topic is named, and Kafka's Raft finds no topic id: INVALID_REQUEST.
    assert m.single_partition(core) is (version >= 13)
    assert core.replica_state.replica_id == 2
    assert m.fetch_max_wait_ms(core) == 500
    assert core.cluster_id == (CLUSTER_ID if version >= 12 else None)
    p = core.topics[0].partitions[0]
    assert (p.fetch_offset, p.partition_max_bytes) == (40, 1024)
    # CurrentLeaderEpoch came in v9, LastFetchedEpoch in v12; Kafka reads -1 before.
    assert p.current_leader_epoch == (7 if version >= 9 else -1)
    assert p.last_fetched_epoch == (6 if version >= 12 else -1)
    answer = _wire(to_version(m.fetch_response(
        m.ErrorCode.none, leader_id=3, epoch=7, high_watermark=30, log_start_offset=0,
        snapshot=(20, 5), records=b"batch"), version))
    assert answer.__version__ == version
    topic = answer.responses[0]
    assert (topic.topic_id if version >= 13 else topic.topic) == (
        m.METADATA_TOPIC_ID if version >= 13 else m.METADATA_TOPIC)
    p = topic.partitions[0]
    assert (p.high_watermark, bytes(p.records)) == (30, b"batch")
    if version >= 12:
        assert (p.snapshot_id.end_offset, p.snapshot_id.epoch) == (20, 5)
        assert p.current_leader.leader_id == 3


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_by_topic_name_is_refused_with_no_topics(version: int) -> None:
    assert not m.single_partition(to_core(_wire(_fetch(version, topic="orders"))))
    answer = _wire(to_version(m.fetch_response(m.ErrorCode.invalid_request), version))
    assert answer.responses == ()
    assert getattr(answer, "error_code", m.ErrorCode.invalid_request) == \
        m.ErrorCode.invalid_request


@pytest.mark.parametrize("version", _versions(55))
def test_describe_quorum(version: int) -> None:
    mod = request_module(55, version)
    request = mod.DescribeQuorumRequest(topics=(mod.TopicData(
        topic_name=m.METADATA_TOPIC, partitions=(mod.PartitionData(partition_index=0),)),))
    assert type(to_core(_wire(request))) is m.DescribeQuorumRequest
    voter = ReplicaProgress(1)
    voter.end_offset, voter.last_fetch_ms, voter.last_caught_up_ms = 40, 1000, 900
    answer = _wire(to_version(m.describe_quorum_response(
        m.ErrorCode.none, leader_id=1, epoch=7, high_watermark=40, voters=[voter]), version))
    p = answer.topics[0].partitions[0]
    assert (p.leader_id, p.high_watermark, p.current_voters[0].log_end_offset) == (1, 40, 40)
    if version >= 1:
        assert p.current_voters[0].last_caught_up_timestamp == 900


def test_the_core_versions_are_served() -> None:
    assert all(SERVED[k][0] <= v <= SERVED[k][1] for k, v in CORE_VERSIONS.items()
               if k in SERVED)
