"""Transaction markers and transactional offset commits over a socket, with kio frames:
a TxnOffsetCommit stays pending (OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT) until WriteTxnMarkers commits or aborts it through the group
coordinator; markers on an ordinary topic are control batches a read_uncommitted fetch
returns; WriteTxnMarkers needs CLUSTER_ACTION (or ALTER) on the cluster."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.offset_fetch.v9 import request as fetch_v9
from kio.schema.txn_offset_commit.v3 import request as txn_commit_v3
from kio.schema.write_txn_markers.v1 import request as markers_v1

from kernel.cluster import BrokerRegistration
from kernel.hookspecs import hookimpl
from kernel.protocol.records import ControlRecordType, decode_batches, parse_control_record
from kernel.requests import Session
from kernel.testing.embedded import EmbeddedBroker
from plugins.coordinator.records import partition_for
from tests.integration.test_followers_wire import (
    FOLLOWER,
    create_replicated,
    follower_fetch,
    sent,
)
from tests.integration.test_produce_fetch import create_topic
from tests.integration.wire import request

TOPIC = "t-orders"
GROUP = "t-group"
OFFSETS_PARTITIONS = 3
PID, EPOCH = 7001, 0


class ClusterActionDenied:
    """The anonymous client may neither ALTER nor CLUSTER_ACTION the cluster."""

    @hookimpl
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> bool | None:
        if resource_type == "CLUSTER" and operation in ("ALTER", "CLUSTER_ACTION"):
            return False
        return None


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    # Its producers have no transaction coordinator behind them: not verified.
    b = broker_factory({"transaction.partition.verification.enable": False},
                       plugin_settings={"coordinator": {
                           "offsets.topic.num.partitions": OFFSETS_PARTITIONS}})
    create_topic(b.bootstrap, TOPIC, partitions=2)
    return b


def txn_commit(broker: EmbeddedBroker, offsets: dict[int, int], producer_id: int = PID,
               group: str = GROUP) -> dict[tuple[str, int], ErrorCode]:
    m = txn_commit_v3
    response = request(broker.bootstrap, m.TxnOffsetCommitRequest(
        transactional_id="t-txn", group_id=group, producer_id=producer_id,
        producer_epoch=EPOCH, generation_id=-1, member_id="", group_instance_id=None,
        topics=(m.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=tuple(
            m.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                              committed_leader_epoch=-1,
                                              committed_metadata="")
            for p, o in offsets.items())),)))
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def write_markers(broker: EmbeddedBroker, partitions: dict[str, list[int]], commit: bool,
                  producer_id: int = PID,
                  coordinator_epoch: int = 0) -> dict[tuple[str, int], ErrorCode]:
    m = markers_v1
    response = request(broker.bootstrap, m.WriteTxnMarkersRequest(markers=(
        m.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=EPOCH, transaction_result=commit,
            coordinator_epoch=coordinator_epoch, topics=tuple(
                m.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps))
                for t, ps in partitions.items())),)))
    (marker,) = response.markers
    assert marker.producer_id == producer_id
    return {(t.name, p.partition_index): p.error_code
            for t in marker.topics for p in t.partitions}


def fetch_offsets(broker: EmbeddedBroker, require_stable: bool) -> dict[int, tuple[int, Any]]:
    m = fetch_v9
    response = request(broker.bootstrap, m.OffsetFetchRequest(
        require_stable=require_stable, groups=(m.OffsetFetchRequestGroup(
            group_id=GROUP, member_id=None, member_epoch=-1, topics=(
                m.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0, 1)),)),)))
    (group,) = response.groups
    assert group.error_code == ErrorCode.none
    return {p.partition_index: (p.committed_offset, p.error_code)
            for t in group.topics for p in t.partitions}


def offsets_partition() -> dict[str, list[int]]:
    return {"__consumer_offsets": [partition_for(GROUP, OFFSETS_PARTITIONS)]}


def test_txn_offsets_are_committed_by_the_commit_marker(broker: EmbeddedBroker) -> None:
    assert txn_commit(broker, {0: 10, 1: 11}) == {(TOPIC, 0): ErrorCode.none,
                                                 (TOPIC, 1): ErrorCode.none}
    assert fetch_offsets(broker, require_stable=False) == {0: (-1, ErrorCode.none),
                                                           1: (-1, ErrorCode.none)}
    unstable = (-1, ErrorCode.unstable_offset_commit)
    assert fetch_offsets(broker, require_stable=True) == {0: unstable, 1: unstable}

    tp = ("__consumer_offsets", offsets_partition()["__consumer_offsets"][0])
    assert write_markers(broker, offsets_partition(), commit=True) == {tp: ErrorCode.none}
    assert fetch_offsets(broker, require_stable=True) == {0: (10, ErrorCode.none),
                                                          1: (11, ErrorCode.none)}


def test_a_fenced_marker_leaves_the_offsets_pending(broker: EmbeddedBroker) -> None:
    tp = ("__consumer_offsets", partition_for(GROUP, OFFSETS_PARTITIONS))
    txn_commit(broker, {0: 10})
    assert write_markers(broker, offsets_partition(), commit=True, coordinator_epoch=5) \
        == {tp: ErrorCode.none}
    txn_commit(broker, {0: 20})
    # A zombie transaction coordinator: the log refuses its marker, the shard keeps the
    # offsets pending.
    assert write_markers(broker, offsets_partition(), commit=False, coordinator_epoch=4) \
        == {tp: ErrorCode.transaction_coordinator_fenced}
    assert fetch_offsets(broker, require_stable=True)[0] == (-1, ErrorCode.unstable_offset_commit)
    assert write_markers(broker, offsets_partition(), commit=True, coordinator_epoch=5) \
        == {tp: ErrorCode.none}
    assert fetch_offsets(broker, require_stable=True)[0] == (20, ErrorCode.none)


def test_txn_offsets_are_dropped_by_the_abort_marker_and_survive_a_restart(
        broker: EmbeddedBroker) -> None:
    txn_commit(broker, {0: 10})
    write_markers(broker, offsets_partition(), commit=True)
    txn_commit(broker, {0: 20, 1: 21}, producer_id=PID + 1)
    assert write_markers(broker, offsets_partition(), commit=False, producer_id=PID + 1) \
        == {("__consumer_offsets", partition_for(GROUP, OFFSETS_PARTITIONS)): ErrorCode.none}
    assert fetch_offsets(broker, require_stable=True) == {0: (10, ErrorCode.none),
                                                          1: (-1, ErrorCode.none)}
    # An open transaction at shutdown is pending again after the load.
    txn_commit(broker, {1: 31}, producer_id=PID + 2)
    broker.restart()
    expected = {0: (10, ErrorCode.none), 1: (-1, ErrorCode.unstable_offset_commit)}
    for _ in range(100):
        try:
            if fetch_offsets(broker, require_stable=True) == expected:
                break
        except AssertionError:  # still loading
            pass
        time.sleep(0.05)
    assert fetch_offsets(broker, require_stable=True) == expected


def test_markers_on_a_topic_are_control_batches_a_fetch_returns(broker: EmbeddedBroker) -> None:
    assert write_markers(broker, {TOPIC: [1], "t-absent": [0]}, commit=False) == {
        (TOPIC, 1): ErrorCode.none, ("t-absent", 0): ErrorCode.unknown_topic_or_partition}
    m = fetch_v12
    response = request(broker.bootstrap, m.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_epoch=-1, topics=(m.FetchTopic(topic=TOPIC, partitions=(
            m.FetchPartition(partition=1, fetch_offset=0, current_leader_epoch=-1,
                             last_fetched_epoch=-1, log_start_offset=-1,
                             partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id=""))
    ((answer,),) = (t.partitions for t in response.responses)
    assert answer.error_code == ErrorCode.none and answer.high_watermark == 1
    (batch,) = decode_batches(answer.records)
    assert batch.header.is_control and batch.header.producer_id == PID
    assert parse_control_record(batch.records[0]) == (ControlRecordType.ABORT, 0)


def test_write_txn_markers_needs_cluster_action(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    b = broker_factory(plugins=["metadata_kraft", "coordinator",
                                "tests.integration.test_txn_markers_wire:ClusterActionDenied"])
    create_topic(b.bootstrap, TOPIC)
    assert write_markers(b, {TOPIC: [0]}, commit=True) == {
        (TOPIC, 0): ErrorCode.cluster_authorization_failed}


def test_advertised_versions(broker: EmbeddedBroker) -> None:
    response = request(broker.bootstrap, ApiVersionsRequest(
        client_software_name="t", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert versions[27] == (1, 1)
    assert versions[28] == (0, 4)


def test_write_txn_markers_answers_once_the_in_sync_follower_has_the_marker(
        broker: EmbeddedBroker) -> None:
    assert broker.broker is not None
    broker.call(broker.broker.metadata.register_broker(
        BrokerRegistration(node_id=FOLLOWER, host="127.0.0.1", port=1)))
    create_replicated(broker, "t-replicated")
    m = markers_v1
    body = m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
        producer_id=PID, producer_epoch=EPOCH, transaction_result=True, coordinator_epoch=0,
        topics=(m.WritableTxnMarkerTopic(name="t-replicated", partition_indexes=(0,)),)),))
    with sent(broker, body) as answer:
        # acks=all: the marker is in the leader's log, not yet on the follower.
        assert answer(0.3) is None
        follower_fetch(broker, "t-replicated", 1)
        response = answer(5)
    assert response is not None
    assert response.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
