"""Kafka 4.3.1's answers to KRaft RPCs on a controller listener, good and bad, that a
Kafkernel controller must give too (issue 32). One quorum of three controller-only
nodes (static voters) for the whole module; every request here leaves it as it was:
no epoch is bumped, no vote is granted, Fetch comes from an observer id.

``target`` yields (name, controller addresses): today only Kafka's quorum; a Kafkernel
controller quorum plugs in as a second param, and every test runs against both.
"""

from __future__ import annotations

import datetime
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from kernel.api.protocol import make, request_module
from reference import kraft
from reference.kafka import KafkaNotFetched
from tests.kraft_quorum import KafkernelQuorum
from tests.reference import kraft_rpc
from tests.reference.kraft_rpc import QuorumView

WRONG_CLUSTER_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # a valid Uuid text, not the cluster's
# What ApiVersions v4 lists on Kafka 4.3.1's controller listener: (key, min, max).
# The Raft RPCs, the controller RPCs brokers send, and the admin RPCs (which brokers
# forward, and tools send with --bootstrap-controller); no Produce, Metadata, groups.
CONTROLLER_APIS = frozenset({
    (1, 4, 18), (17, 0, 1), (18, 0, 4), (19, 2, 7), (20, 1, 6), (29, 1, 3), (30, 1, 3),
    (31, 1, 3), (32, 1, 4), (33, 0, 2), (36, 0, 2), (37, 0, 3), (38, 1, 3), (39, 1, 2),
    (40, 1, 2), (41, 1, 3), (43, 0, 2), (44, 0, 1), (45, 0, 1), (46, 0, 0), (49, 0, 1),
    (50, 0, 0), (51, 0, 0), (52, 0, 2), (53, 0, 1), (54, 0, 1), (55, 0, 2), (56, 2, 3),
    (57, 0, 2), (58, 0, 0), (59, 0, 1), (60, 0, 2), (62, 0, 4), (63, 0, 2), (64, 0, 0),
    (67, 0, 0), (70, 0, 0), (73, 0, 0), (80, 0, 1), (81, 0, 0), (82, 0, 0)})


class Target(NamedTuple):
    name: str
    controllers: tuple[str, ...]


# Each controller snapshots every ~1 KiB of metadata log (NoOps included: seconds),
# so FetchSnapshot has a snapshot to serve.
SNAPSHOT_SETTINGS = {"metadata.log.max.record.bytes.between.snapshots": "1024"}


def _kafka_quorum() -> Iterator[Target]:
    try:
        quorum = kraft.start_quorum(3, 0, voters="static", overrides=SNAPSHOT_SETTINGS)
    except KafkaNotFetched as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield Target("kafka", tuple(n.address for n in quorum.controllers))
    finally:
        quorum.stop()


def _kafkernel_quorum(root: Path) -> Iterator[Target]:
    quorum = KafkernelQuorum(root, settings=tuple(
        f"{k}={v}" for k, v in SNAPSHOT_SETTINGS.items()))
    try:
        quorum.start()
        yield Target("kafkernel", quorum.controllers)
    finally:
        quorum.stop()


@pytest.fixture(scope="module", params=["kafka", "kafkernel"])
def target(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A running 3-voter quorum, by name; its controller listeners."""
    if request.param == "kafka":
        yield from _kafka_quorum()
    else:
        yield from _kafkernel_quorum(tmp_path_factory.mktemp("kafkernel-quorum"))


# What the Kafkernel quorum does not do yet (strict: each must fail until it does).
KAFKERNEL_NOT_YET = {
    "test_api_versions_on_the_controller_listener":
        "the controller listener serves the Raft RPCs and DescribeCluster; no controller "
        "or admin RPCs yet",
}


@pytest.fixture(autouse=True)
def _kafkernel_not_yet(request: pytest.FixtureRequest, target: Target) -> None:
    rpc = getattr(request.node, "callspec", None) and request.node.callspec.params.get("rpc")
    name = request.node.originalname + (f"[{rpc}]" if rpc else "")
    reason = KAFKERNEL_NOT_YET.get(name)
    if target.name == "kafkernel" and reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.fixture
def quorum(target: Target) -> QuorumView:
    """The quorum as its leader describes it now (polls while it has none)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return kraft_rpc.view(target.controllers)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_api_versions_on_the_controller_listener(quorum: QuorumView) -> None:
    answer = kraft_rpc.api_versions(quorum.leader)
    assert answer.error_code == ErrorCode.none
    listed = {(int(a.api_key), int(a.min_version), int(a.max_version))
              for a in answer.api_keys}
    assert listed == CONTROLLER_APIS


# -- cluster id ---------------------------------------------------------------------


def _send_with_cluster_id(rpc: str, quorum: QuorumView, cluster_id: str | None) -> Any:
    epoch = quorum.epoch
    follower = quorum.follower()
    match rpc:
        case "vote":  # a pre-vote: nothing changes even if it were granted
            return kraft_rpc.vote(
                follower, cluster_id=cluster_id, replica_id=quorum.followers[1],
                replica_epoch=epoch, last_offset_epoch=epoch, last_offset=0, pre_vote=True)
        case "begin_quorum_epoch":
            return kraft_rpc.begin_quorum_epoch(
                follower, cluster_id=cluster_id, leader_id=quorum.leader_id,
                leader_epoch=epoch)
        case "end_quorum_epoch":
            return kraft_rpc.end_quorum_epoch(
                follower, cluster_id=cluster_id, leader_id=quorum.leader_id,
                leader_epoch=epoch - 1)
        case "fetch":
            return kraft_rpc.fetch(quorum.leader, cluster_id=cluster_id, fetch_offset=0,
                                   last_fetched_epoch=0, current_leader_epoch=epoch)
        case "fetch_snapshot":
            return kraft_rpc.fetch_snapshot(quorum.leader, cluster_id=cluster_id,
                                            current_leader_epoch=epoch, end_offset=1, epoch=1)
    raise AssertionError(rpc)


RAFT_RPCS = ("vote", "begin_quorum_epoch", "end_quorum_epoch", "fetch", "fetch_snapshot")


@pytest.mark.parametrize("rpc", RAFT_RPCS)
def test_wrong_cluster_id_is_inconsistent_cluster_id(rpc: str, quorum: QuorumView) -> None:
    """Checked before anything else, at the top level, whatever the request says."""
    answer = _send_with_cluster_id(rpc, quorum, WRONG_CLUSTER_ID)
    assert answer.error_code == ErrorCode.inconsistent_cluster_id


def test_null_cluster_id_is_accepted(quorum: QuorumView) -> None:
    answer = _send_with_cluster_id("fetch", quorum, None)
    assert answer.error_code == ErrorCode.none
    assert answer.responses[0].partitions[0].error_code == ErrorCode.none


# -- epochs -------------------------------------------------------------------------


def test_stale_epoch_is_fenced_leader_epoch(quorum: QuorumView) -> None:
    """An epoch below the receiver's: FENCED_LEADER_EPOCH in the partition, with the
    receiver's leader and epoch, and the leader's endpoint."""
    stale = quorum.epoch - 1
    follower, cid = quorum.follower(), quorum.cluster_id
    answers = {
        "begin_quorum_epoch": kraft_rpc.begin_quorum_epoch(
            follower, cluster_id=cid, leader_id=quorum.leader_id, leader_epoch=stale),
        "end_quorum_epoch": kraft_rpc.end_quorum_epoch(
            follower, cluster_id=cid, leader_id=quorum.leader_id, leader_epoch=stale),
        "pre-vote": kraft_rpc.vote(
            follower, cluster_id=cid, replica_id=quorum.followers[1], replica_epoch=stale,
            last_offset_epoch=stale, last_offset=0, pre_vote=True),
    }
    for rpc, answer in answers.items():
        assert answer.error_code == ErrorCode.none, rpc
        partition = answer.topics[0].partitions[0]
        assert partition.error_code == ErrorCode.fenced_leader_epoch, rpc
        assert (partition.leader_id, partition.leader_epoch) == (
            quorum.leader_id, quorum.epoch), rpc
        assert [(e.node_id, f"{e.host}:{e.port}") for e in answer.node_endpoints] == [
            (quorum.leader_id, quorum.leader)], rpc
    fetched = _fetch_partition(kraft_rpc.fetch(
        quorum.leader, cluster_id=cid, fetch_offset=0, last_fetched_epoch=0,
        current_leader_epoch=stale))
    assert fetched.error_code == ErrorCode.fenced_leader_epoch
    assert fetched.high_watermark == -1
    assert (fetched.current_leader.leader_id, fetched.current_leader.leader_epoch) == (
        quorum.leader_id, quorum.epoch)


def test_future_epoch_fetch_is_unknown_leader_epoch(quorum: QuorumView) -> None:
    fetched = _fetch_partition(kraft_rpc.fetch(
        quorum.leader, cluster_id=quorum.cluster_id, fetch_offset=0, last_fetched_epoch=0,
        current_leader_epoch=quorum.epoch + 1))
    assert fetched.error_code == ErrorCode.unknown_leader_epoch
    assert fetched.current_leader.leader_id == quorum.leader_id


# -- Fetch --------------------------------------------------------------------------


def _fetch_partition(answer: Any) -> Any:
    assert answer.error_code == ErrorCode.none
    (topic,) = answer.responses
    assert topic.topic_id == kraft_rpc.METADATA_TOPIC_ID
    (partition,) = topic.partitions
    return partition


def test_fetch_returns_batches_of_the_epoch(quorum: QuorumView) -> None:
    """An observer fetching inside the current epoch gets v2 batches at once (MaxWaitMs
    0), stamped with the epoch, and the high watermark."""
    offset = quorum.high_watermark - 1
    fetched = _fetch_partition(kraft_rpc.fetch(
        quorum.leader, cluster_id=quorum.cluster_id, fetch_offset=offset,
        last_fetched_epoch=quorum.epoch, current_leader_epoch=quorum.epoch))
    assert fetched.error_code == ErrorCode.none
    assert fetched.high_watermark >= quorum.high_watermark
    assert fetched.log_start_offset == 0
    assert (fetched.current_leader.leader_id, fetched.current_leader.leader_epoch) == (
        quorum.leader_id, quorum.epoch)
    assert fetched.snapshot_id.end_offset == -1 and fetched.diverging_epoch.epoch == -1
    base_offset, _, epoch, magic = struct.unpack_from(">qiib", bytes(fetched.records))
    assert base_offset <= offset and (epoch, magic) == (quorum.epoch, 2)


def test_fetch_from_offset_zero_answers_the_latest_snapshot(quorum: QuorumView,
                                                            target: Target) -> None:
    """Once the leader has a snapshot (not the bootstrap 0-0), Fetch at offset 0 gets
    its id and no records, though the log still starts at 0."""
    end_offset, epoch, high_watermark = _latest_snapshot(quorum, target)
    assert 0 < end_offset <= high_watermark
    assert 1 <= epoch <= quorum.epoch


def test_fetch_to_a_follower_names_the_leader(quorum: QuorumView) -> None:
    fetched = _fetch_partition(kraft_rpc.fetch(
        quorum.follower(), cluster_id=quorum.cluster_id, fetch_offset=0,
        last_fetched_epoch=0, current_leader_epoch=quorum.epoch))
    assert fetched.error_code == ErrorCode.not_leader_or_follower
    assert (fetched.current_leader.leader_id, fetched.current_leader.leader_epoch) == (
        quorum.leader_id, quorum.epoch)


@pytest.mark.parametrize(("fetch_offset", "last_fetched_epoch", "ahead"), [
    (5, 0, 1),   # LastFetchedEpoch above CurrentLeaderEpoch
    (5, -1, 0),  # negative LastFetchedEpoch
    (-1, 0, 0),  # negative FetchOffset
])
def test_bad_fetch_position_is_invalid_request(quorum: QuorumView, fetch_offset: int,
                                               last_fetched_epoch: int, ahead: int) -> None:
    fetched = _fetch_partition(kraft_rpc.fetch(
        quorum.leader, cluster_id=quorum.cluster_id, fetch_offset=fetch_offset,
        last_fetched_epoch=quorum.epoch + ahead if ahead else last_fetched_epoch,
        current_leader_epoch=quorum.epoch))
    assert fetched.error_code == ErrorCode.invalid_request
    assert fetched.high_watermark == -1


def test_fetch_past_the_end_diverges_to_the_end_of_the_epoch(quorum: QuorumView) -> None:
    fetched = _fetch_partition(kraft_rpc.fetch(
        quorum.leader, cluster_id=quorum.cluster_id,
        fetch_offset=quorum.leader_end_offset + 1000, last_fetched_epoch=quorum.epoch,
        current_leader_epoch=quorum.epoch))
    assert fetched.error_code == ErrorCode.none
    assert fetched.diverging_epoch.epoch == quorum.epoch
    assert quorum.leader_end_offset <= fetched.diverging_epoch.end_offset
    assert fetched.diverging_epoch.end_offset < quorum.leader_end_offset + 1000
    assert bytes(fetched.records) == b""


def test_fetch_below_the_snapshot_at_an_older_epoch_answers_the_snapshot(
        quorum: QuorumView, target: Target) -> None:
    """A position inside the log but at an epoch older than the latest snapshot's (here
    epoch 0, which never has a leader) is answered with that snapshot's id, not a
    DivergingEpoch. (Without a snapshot Kafka answers DivergingEpoch{epoch asked, 0}:
    docs/kraft-reference-facts.md.)"""
    end_offset, epoch, _ = _latest_snapshot(quorum, target)
    fetched = _fetch_partition(kraft_rpc.fetch(
        quorum.leader, cluster_id=quorum.cluster_id, fetch_offset=5, last_fetched_epoch=0,
        current_leader_epoch=quorum.epoch))
    assert fetched.error_code == ErrorCode.none
    assert fetched.diverging_epoch.epoch == -1
    assert fetched.snapshot_id.epoch >= epoch and fetched.snapshot_id.end_offset >= end_offset
    assert bytes(fetched.records) == b""


def test_fetch_of_another_topic_id_is_invalid_request(quorum: QuorumView) -> None:
    answer = kraft_rpc.fetch(quorum.leader, cluster_id=quorum.cluster_id, fetch_offset=0,
                             last_fetched_epoch=0, current_leader_epoch=quorum.epoch,
                             topic_id=uuid.UUID(int=7))
    assert answer.error_code == ErrorCode.invalid_request
    assert answer.responses == ()


# -- Vote ---------------------------------------------------------------------------


@pytest.mark.parametrize(("last_offset_epoch", "last_offset", "pre_vote", "replica_id"), [
    (0, -1, True, None),     # LastOffset < 0
    (-1, 0, True, None),     # LastOffsetEpoch < 0
    ("epoch", 0, False, None),  # a real vote needs LastOffsetEpoch < ReplicaEpoch
    (0, 0, True, -1),        # no candidate id
])
def test_bad_vote_is_invalid_request(quorum: QuorumView, last_offset_epoch: int | str,
                                     last_offset: int, pre_vote: bool,
                                     replica_id: int | None) -> None:
    answer = kraft_rpc.vote(
        quorum.follower(), cluster_id=quorum.cluster_id,
        replica_id=quorum.followers[1] if replica_id is None else replica_id,
        replica_epoch=quorum.epoch, last_offset=last_offset, pre_vote=pre_vote,
        last_offset_epoch=quorum.epoch if last_offset_epoch == "epoch" else last_offset_epoch)
    assert answer.error_code == ErrorCode.none
    partition = answer.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.invalid_request
    assert not partition.vote_granted
    assert (partition.leader_id, partition.leader_epoch) == (quorum.leader_id, quorum.epoch)


@pytest.mark.parametrize("pre_vote", [True, False])
@pytest.mark.parametrize("to", ["follower", "leader"])
def test_vote_in_the_current_epoch_is_not_granted(quorum: QuorumView, to: str,
                                                  pre_vote: bool) -> None:
    """A follower that fetches from its leader grants no pre-vote (KIP-996), however
    long the candidate's log; nobody grants a real vote in an epoch with a leader."""
    candidate = quorum.followers[1]
    address = quorum.leader if to == "leader" else quorum.follower()
    answer = kraft_rpc.vote(
        address, cluster_id=quorum.cluster_id, replica_id=candidate,
        replica_epoch=quorum.epoch, last_offset=10**9, pre_vote=pre_vote,
        last_offset_epoch=quorum.epoch if pre_vote else quorum.epoch - 1)
    assert answer.error_code == ErrorCode.none
    partition = answer.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert not partition.vote_granted
    assert (partition.leader_id, partition.leader_epoch) == (quorum.leader_id, quorum.epoch)


# -- DescribeQuorum, DescribeCluster --------------------------------------------------


def test_describe_quorum_from_the_leader(quorum: QuorumView, target: Target) -> None:
    answer = kraft_rpc.describe_quorum(quorum.leader)
    assert answer.error_code == ErrorCode.none
    partition = answer.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert sorted(v.replica_id for v in partition.current_voters) == sorted(quorum.voters)
    assert all(v.replica_directory_id is None for v in partition.current_voters), "static"
    assert all(v.log_end_offset > 0 and v.last_caught_up_timestamp > 0
               for v in partition.current_voters)
    assert sorted(n.node_id for n in answer.nodes) == sorted(quorum.voters)
    assert sorted((x.name, f"{x.host}:{x.port}") for n in answer.nodes
                  for x in n.listeners) == sorted(
        ("CONTROLLER", a) for a in target.controllers)


def test_describe_quorum_to_a_follower_is_not_leader_without_the_leader(
        quorum: QuorumView) -> None:
    """Unlike Fetch, the answer does not name the leader: leader 0, epoch 0, no nodes."""
    answer = kraft_rpc.describe_quorum(quorum.follower())
    assert answer.error_code == ErrorCode.none
    partition = answer.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.not_leader_or_follower
    assert (partition.leader_id, partition.leader_epoch, partition.high_watermark) == (0, 0, 0)
    assert partition.current_voters == partition.observers == ()
    assert answer.nodes == ()


def test_describe_cluster_on_the_controller_listener(quorum: QuorumView) -> None:
    """EndpointType 2 lists the controllers, the active one as controller id; asking a
    controller for brokers (1) is MISMATCHED_ENDPOINT_TYPE."""
    answer = kraft_rpc.describe_cluster(quorum.follower(), endpoint_type=2)
    assert answer.error_code == ErrorCode.none
    assert answer.cluster_id == quorum.cluster_id
    assert answer.controller_id == quorum.leader_id
    assert {b.broker_id: f"{b.host}:{b.port}" for b in answer.brokers} == quorum.addresses
    wrong = kraft_rpc.describe_cluster(quorum.leader, endpoint_type=1)
    assert wrong.error_code == ErrorCode.mismatched_endpoint_type
    assert wrong.brokers == ()


# -- FetchSnapshot --------------------------------------------------------------------


def _latest_snapshot(quorum: QuorumView, target: Target) -> tuple[int, int, int]:
    """(end offset, epoch) of a snapshot the leader has, and the high watermark then:
    polls a Fetch from offset 0, which the leader answers with its latest snapshot id
    once it has one."""
    deadline = time.monotonic() + 60
    while True:
        fetched = _fetch_partition(kraft_rpc.fetch(
            quorum.leader, cluster_id=quorum.cluster_id, fetch_offset=0,
            last_fetched_epoch=0, current_leader_epoch=quorum.epoch))
        snapshot = fetched.snapshot_id
        if snapshot.end_offset > 0:
            assert bytes(fetched.records) == b""
            return snapshot.end_offset, snapshot.epoch, fetched.high_watermark
        assert time.monotonic() < deadline, "the leader wrote no snapshot"
        time.sleep(0.5)


def test_fetch_snapshot_reads_the_snapshot(quorum: QuorumView, target: Target) -> None:
    end_offset, epoch, _ = _latest_snapshot(quorum, target)
    answer = kraft_rpc.fetch_snapshot(
        quorum.leader, cluster_id=quorum.cluster_id, current_leader_epoch=quorum.epoch,
        end_offset=end_offset, epoch=epoch, max_bytes=100)
    assert answer.error_code == ErrorCode.none
    partition = answer.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert (partition.snapshot_id.end_offset, partition.snapshot_id.epoch) == (
        end_offset, epoch)
    assert partition.position == 0
    data = bytes(partition.unaligned_records)
    assert 0 < len(data) <= 100 < partition.size, "MaxBytes cuts the snapshot anywhere"
    assert struct.unpack_from(">q", data)[0] == 0, "a snapshot's batches start at 0"


def test_fetch_snapshot_unknown(quorum: QuorumView, target: Target) -> None:
    """Kafka 4.3.1 means SNAPSHOT_NOT_FOUND (98) but fails to write that answer (its
    partition has null UnalignedRecords: a NullPointerException in the controller's
    log) and sends UNKNOWN_SERVER_ERROR at the top level instead. Kafkernel answers 98."""
    answer = kraft_rpc.fetch_snapshot(
        quorum.leader, cluster_id=quorum.cluster_id, current_leader_epoch=quorum.epoch,
        end_offset=1, epoch=1)
    if target.name == "kafka":
        assert answer.error_code == ErrorCode.unknown_server_error
        assert answer.topics == ()
    else:
        assert answer.error_code == ErrorCode.none
        assert answer.topics[0].partitions[0].error_code == ErrorCode.snapshot_not_found


def test_fetch_snapshot_reads_the_whole_snapshot_in_slices(quorum: QuorumView,
                                                           target: Target) -> None:
    """Slice by slice, positions move by what came; the bytes are the snapshot file:
    batches from offset 0 in the snapshot's epoch. Past the end is POSITION_OUT_OF_RANGE
    (99), which Kafka 4.3.1 fails to write, as SNAPSHOT_NOT_FOUND."""
    end_offset, epoch, _ = _latest_snapshot(quorum, target)
    data, size = b"", None
    while size is None or len(data) < size:
        part = kraft_rpc.fetch_snapshot(
            quorum.leader, cluster_id=quorum.cluster_id, current_leader_epoch=quorum.epoch,
            end_offset=end_offset, epoch=epoch, position=len(data),
            max_bytes=4096).topics[0].partitions[0]
        assert part.error_code == ErrorCode.none
        assert part.position == len(data)
        size = size or int(part.size)
        assert part.size == size
        data += bytes(part.unaligned_records)
    assert len(data) == size
    base_offset, _, batch_epoch, magic = struct.unpack_from(">qiib", data)
    assert (base_offset, batch_epoch, magic) == (0, epoch, 2)
    beyond = kraft_rpc.fetch_snapshot(
        quorum.leader, cluster_id=quorum.cluster_id, current_leader_epoch=quorum.epoch,
        end_offset=end_offset, epoch=epoch, position=size)
    if target.name == "kafka":
        assert beyond.error_code == ErrorCode.unknown_server_error
    else:
        assert beyond.topics[0].partitions[0].error_code == ErrorCode.position_out_of_range


# -- older versions -------------------------------------------------------------------


def _old(rpc: str, version: int, quorum: QuorumView) -> Any:
    """``rpc`` at ``version``, built field by field (fields the version lacks dropped)."""
    stale, cid, topic = quorum.epoch - 1, quorum.cluster_id, kraft_rpc.METADATA_TOPIC
    match rpc:
        case "vote":  # a real vote (v0, v1) in an epoch with a leader: not granted
            mod = request_module(52, version)
            part = make(mod.PartitionData, partition_index=0, replica_epoch=quorum.epoch,
                        replica_id=quorum.followers[1], last_offset_epoch=quorum.epoch - 1,
                        last_offset=10**9, replica_directory_id=None, voter_directory_id=None)
            return quorum.follower(), make(mod.VoteRequest, cluster_id=cid, voter_id=-1,
                                           topics=(mod.TopicData(topic_name=topic,
                                                                 partitions=(part,)),))
        case "begin_quorum_epoch" | "end_quorum_epoch":
            key = 53 if rpc == "begin_quorum_epoch" else 54
            mod = request_module(key, version)
            extra: dict[str, Any] = {"voter_directory_id": None} if key == 53 else {
                "preferred_successors": (), "preferred_candidates": ()}
            part = make(mod.PartitionData, partition_index=0, leader_id=quorum.leader_id,
                        leader_epoch=stale, **extra)
            cls = mod.BeginQuorumEpochRequest if key == 53 else mod.EndQuorumEpochRequest
            top: dict[str, Any] = {"voter_id": -1} if key == 53 else {}
            return quorum.follower(), make(cls, cluster_id=cid, leader_endpoints=(), **top,
                                           topics=(
                                               mod.TopicData(topic_name=topic,
                                                             partitions=(part,)),))
        case "fetch":
            mod = request_module(1, version)
            part = make(mod.FetchPartition, partition=0, current_leader_epoch=quorum.epoch,
                        fetch_offset=quorum.high_watermark - 1,
                        last_fetched_epoch=quorum.epoch, log_start_offset=-1,
                        partition_max_bytes=1 << 20, replica_directory_id=None)
            return quorum.leader, make(
                mod.FetchRequest, cluster_id=cid, replica_id=kraft_rpc.OBSERVER_ID,
                replica_state=make(mod.ReplicaState, replica_id=kraft_rpc.OBSERVER_ID)
                if version >= 15 else None,
                max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=0,
                max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                topics=(make(mod.FetchTopic, topic=topic, topic_id=kraft_rpc.METADATA_TOPIC_ID,
                             partitions=(part,)),), forgotten_topics_data=(), rack_id="")
        case "describe_quorum":
            mod = request_module(55, version)
            return quorum.leader, mod.DescribeQuorumRequest(topics=(mod.TopicData(
                topic_name=topic, partitions=(mod.PartitionData(partition_index=0),)),))
    raise AssertionError(rpc)


@pytest.mark.parametrize(("rpc", "version"), [
    ("vote", 0), ("vote", 1), ("begin_quorum_epoch", 0), ("end_quorum_epoch", 0),
    ("fetch", 4), ("fetch", 11), ("fetch", 12), ("fetch", 13), ("fetch", 16), ("fetch", 18),
    ("describe_quorum", 0), ("describe_quorum", 1),
])
def test_older_versions_are_answered_in_their_version(quorum: QuorumView, rpc: str,
                                                       version: int) -> None:
    """Vote v0-1 has no PreVote (a real vote), EndQuorumEpoch v0 names successors by id
    alone; Fetch before v13 names its topic, where Kafka's Raft finds no topic id: a
    top-level INVALID_REQUEST (where the version has the field) and no topics."""
    address, body = _old(rpc, version, quorum)
    answer = kraft_rpc.send(address, body)
    assert answer.__version__ == version
    if rpc == "fetch" and version < 13:
        assert getattr(answer, "error_code", ErrorCode.invalid_request) == \
            ErrorCode.invalid_request
        assert answer.responses == ()
        return
    assert answer.error_code == ErrorCode.none
    match rpc:
        case "vote":
            part = answer.topics[0].partitions[0]
            assert (part.error_code, part.vote_granted) == (ErrorCode.none, False)
            assert (part.leader_id, part.leader_epoch) == (quorum.leader_id, quorum.epoch)
        case "begin_quorum_epoch" | "end_quorum_epoch":
            part = answer.topics[0].partitions[0]
            assert part.error_code == ErrorCode.fenced_leader_epoch
            assert (part.leader_id, part.leader_epoch) == (quorum.leader_id, quorum.epoch)
        case "fetch":
            (topic,) = answer.responses
            part = topic.partitions[0]
            assert part.error_code == ErrorCode.none
            assert part.high_watermark >= quorum.high_watermark
            assert bytes(part.records) != b""
        case "describe_quorum":
            part = answer.topics[0].partitions[0]
            assert (part.error_code, part.leader_id) == (ErrorCode.none, quorum.leader_id)
            assert sorted(v.replica_id for v in part.current_voters) == sorted(quorum.voters)
