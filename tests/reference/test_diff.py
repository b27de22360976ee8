"""The differential harness itself, on hand-made answers (no broker needed)."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import response as metadata

from tests.reference.diff import Side, assert_same

KAFKA = Side("kafka", "127.0.0.1:9092", 1)
KAFKERNEL = Side("kafkernel", "127.0.0.1:40000", 7)


def answer(side: Side, *, leader: int | None = None, error: ErrorCode = ErrorCode.none,
           cluster_id: str = "abc", throttle_ms: int = 0, topics_reversed: bool = False) -> object:
    partitions = tuple(
        metadata.MetadataResponsePartition(
            error_code=ErrorCode.none, partition_index=i,
            leader_id=side.node_id if leader is None else leader, leader_epoch=0,
            replica_nodes=(side.node_id,), isr_nodes=(side.node_id,), offline_replicas=())
        for i in range(2))
    topics = [
        metadata.MetadataResponseTopic(
            error_code=error, name=name, topic_id=uuid.uuid4(), is_internal=False,
            partitions=partitions, topic_authorized_operations=-2147483648)
        for name in ("a", "b")]
    return metadata.MetadataResponse(
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        brokers=(metadata.MetadataResponseBroker(
            node_id=side.node_id, host=side.host, port=side.port, rack=None),),
        cluster_id=cluster_id, controller_id=side.node_id,
        topics=tuple(reversed(topics) if topics_reversed else topics))


def test_what_must_differ_is_normalised() -> None:
    assert_same(answer(KAFKA), KAFKA,
                answer(KAFKERNEL, cluster_id="other", throttle_ms=5, topics_reversed=True),
                KAFKERNEL)


def test_a_differing_field_is_named_by_its_path() -> None:
    with pytest.raises(AssertionError) as failure:
        assert_same(answer(KAFKA), KAFKA,
                    answer(KAFKERNEL, error=ErrorCode.unknown_topic_or_partition), KAFKERNEL)
    lines = str(failure.value).splitlines()
    assert lines[0] == "2 difference(s) from kafka:"
    assert lines[1] == ("MetadataResponse.topics[name='a'].error_code: kafka='none(0)' "
                        "kafkernel='unknown_topic_or_partition(3)'")


def test_a_node_id_other_than_the_own_is_compared() -> None:
    with pytest.raises(AssertionError, match=r"leader_id: kafka='<node>' kafkernel=-1"):
        assert_same(answer(KAFKA), KAFKA, answer(KAFKERNEL, leader=-1), KAFKERNEL)


def test_ignored_fields_are_left_out() -> None:
    assert_same(answer(KAFKA), KAFKA,
                answer(KAFKERNEL, error=ErrorCode.unknown_topic_or_partition), KAFKERNEL,
                ignore=("topics.error_code",))


def test_a_generated_member_id_keeps_its_client_id() -> None:
    from kio.schema.join_group.v9 import response as join_group

    def joined(member_id: str) -> object:
        return join_group.JoinGroupResponse(
            throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, generation_id=1,
            protocol_type="consumer", protocol_name="range", leader=member_id,
            skip_assignment=False, member_id=member_id, members=())

    assert_same(joined(f"app-{uuid.uuid4()}"), KAFKA, joined(f"app-{uuid.uuid4()}"), KAFKERNEL)
    with pytest.raises(AssertionError, match=r"member_id: kafka='app-<uuid>' "
                                             r"kafkernel='other-<uuid>'"):
        assert_same(joined(f"app-{uuid.uuid4()}"), KAFKA, joined(f"other-{uuid.uuid4()}"),
                    KAFKERNEL)


def test_a_fetch_session_id_is_compared_for_being_one() -> None:
    from kio.schema.fetch.v17 import response as fetch

    def fetched(session_id: int) -> object:
        return fetch.FetchResponse(throttle_time=datetime.timedelta(0),
                                   error_code=ErrorCode.none, session_id=session_id,
                                   responses=())

    assert_same(fetched(12345), KAFKA, fetched(999), KAFKERNEL)
    with pytest.raises(AssertionError, match=r"session_id: kafka='<session-id>' kafkernel=0"):
        assert_same(fetched(12345), KAFKA, fetched(0), KAFKERNEL)
