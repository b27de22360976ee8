"""Conformance of the group APIs (the coordinator plugin): FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups, OffsetCommit, OffsetFetch,
DeleteGroups and OffsetDelete, each case at every version Kafkernel advertises, sent to
Kafka and to Kafkernel and compared field by field. Member ids are each broker's own; the
harness keeps their client-id part and normalises the random rest."""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.reference.conformance import (
    Case,
    body,
    cases,
    create_topic,
    part,
    unique,
    wait_for,
)
from tests.reference.diff import Answers, Pair, Side

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
SESSION = datetime.timedelta(seconds=10)
OFFSETS = "__consumer_offsets"


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(topic: str, *partitions: int) -> bytes:
    """ConsumerProtocolAssignment v0."""
    return (struct.pack(">hih", 0, 1, len(topic)) + topic.encode()
            + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
            + struct.pack(">i", -1))


def ready(side: Side) -> None:
    """The broker's coordinator serves groups on every partition of __consumer_offsets
    (Kafka creates the topic on first use, then loads its partitions one by one)."""
    def answers() -> bool:
        found = side.send(body(FIND_COORDINATOR, 4, key_type=0,
                               coordinator_keys=("probe",)))
        return found.coordinators[0].error_code == ErrorCode.none
    wait_for(side, "the group coordinator", answers, timeout=30.0)
    (offsets,) = side.send(body(3, 12, topics=(part(3, 12, "MetadataRequestTopic",
                                                      name=OFFSETS, topic_id=None),),
                                 allow_auto_topic_creation=False)).topics
    probes = probe_group_ids(len(offsets.partitions))

    def loaded() -> bool:
        described = side.send(body(DESCRIBE_GROUPS, 5, groups=probes))
        return all(g.error_code == ErrorCode.none for g in described.groups)
    wait_for(side, f"every partition of {OFFSETS} loaded", loaded, timeout=30.0)


def probe_group_ids(partitions: int) -> tuple[str, ...]:
    """One group id per partition of __consumer_offsets, by Kafka's placement
    (Utils.abs(groupId.hashCode()) % partitions)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        name = f"probe-{i}"
        found.setdefault(java_hash(name) % partitions, name)
        i += 1
    return tuple(found.values())


def java_hash(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


@pytest.fixture
def groups(shared: Pair) -> Pair:
    ready(shared.kafka)
    ready(shared.kafkernel)
    return shared


# -- membership on one side -------------------------------------------------------------------

@dataclasses.dataclass
class Member:
    member_id: str
    generation: int
    joined: Any


def join(side: Side, v: int, group: str, member_id: str = "", *, topic: str = "t",
         session: datetime.timedelta = SESSION) -> Any:
    return side.send(body(
        JOIN_GROUP, v, group_id=group, session_timeout=session, rebalance_timeout=SESSION,
        member_id=member_id, group_instance_id=None, protocol_type="consumer", reason=None,
        protocols=(part(JOIN_GROUP, v, "JoinGroupRequestProtocol", name="range",
                        metadata=subscription(topic)),)))


def member_of(side: Side, v: int, group: str, topic: str = "t") -> Member:
    """A joined member (v4+: after MEMBER_ID_REQUIRED, as clients do)."""
    joined = join(side, v, group, topic=topic)
    if joined.error_code == ErrorCode.member_id_required:
        joined = join(side, v, group, joined.member_id, topic=topic)
    assert joined.error_code == ErrorCode.none, (side.label, joined)
    return Member(joined.member_id, joined.generation_id, joined)


def sync(side: Side, v: int, group: str, member: Member, generation: int | None = None,
         assignments: dict[str, bytes] | None = None) -> Any:
    return side.send(body(
        SYNC_GROUP, v, group_id=group, member_id=member.member_id, group_instance_id=None,
        generation_id=member.generation if generation is None else generation,
        protocol_type="consumer", protocol_name="range",
        assignments=tuple(part(SYNC_GROUP, v, "SyncGroupRequestAssignment", member_id=m,
                               assignment=a) for m, a in (assignments or {}).items())))


def stable_member(side: Side, group: str, topic: str) -> Member:
    """A member of a Stable group that owns partition 0 of ``topic``."""
    member = member_of(side, 9, group, topic)
    synced = sync(side, 5, group, member, assignments={member.member_id: assignment(topic, 0)})
    assert synced.error_code == ErrorCode.none, (side.label, synced)
    return member


def both(pair: Pair, action: Any) -> Answers:
    return pair.each(action)


# -- FindCoordinator --------------------------------------------------------------------------

def find_coordinator(v: int, *keys: str, key_type: int = 0) -> Any:
    return body(FIND_COORDINATOR, v, key=keys[0], key_type=key_type, coordinator_keys=keys)


def find_a_group_coordinator(pair: Pair, v: int) -> None:
    pair.compare(find_coordinator(v, unique("fc")))


def find_coordinators_of_several_groups(pair: Pair, v: int) -> None:
    keys = (unique("fc-a"), unique("fc-b")) if v >= 4 else (unique("fc"),)
    pair.compare(find_coordinator(v, *keys))


def _coordinator_error(answer: Any) -> ErrorCode:
    if hasattr(answer, "coordinators"):
        return answer.coordinators[0].error_code
    return answer.error_code


def find_an_unknown_key_type(pair: Pair, v: int) -> None:
    if v < 1:
        return find_a_group_coordinator(pair, v)
    pair.compare(find_coordinator(v, "x", key_type=7))
    return None


def find_a_share_coordinator(pair: Pair, v: int) -> None:
    """Key type 2 (v6, share groups): neither broker runs a share coordinator (Kafka
    4.3 does not without share.version), so both refuse it as INVALID_REQUEST."""
    if v < 6:
        return find_a_group_coordinator(pair, v)
    answers = pair.compare(find_coordinator(v, f"{unique('share')}:{uuid.uuid4()}:0",
                                            key_type=2))
    assert _coordinator_error(answers.kafka) == ErrorCode.invalid_request
    return None


def find_coordinator_of_an_empty_group_id(pair: Pair, v: int) -> None:
    pair.compare(find_coordinator(v, ""))


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------

def join_a_new_group(pair: Pair, v: int) -> None:
    group = unique("jg")
    answers = both(pair, lambda side: join(side, v, group))
    pair.assert_same(answers)
    if v >= 4:
        answers = both(pair, lambda side: member_of(side, v, group).joined)
        pair.assert_same(answers)


def join_with_an_invalid_session_timeout(pair: Pair, v: int) -> None:
    answers = pair.compare(_join_request(v, unique("jg-session"),
                                         session=datetime.timedelta(seconds=1)))
    assert answers.kafka.error_code == ErrorCode.invalid_session_timeout


def join_with_an_unknown_member_id(pair: Pair, v: int) -> None:
    answers = pair.compare(_join_request(v, unique("jg-member"), member_id="nobody"))
    assert answers.kafka.error_code == ErrorCode.unknown_member_id


def join_with_an_empty_group_id(pair: Pair, v: int) -> None:
    answers = pair.compare(_join_request(v, ""))
    assert answers.kafka.error_code == ErrorCode.invalid_group_id


def join_with_an_inconsistent_protocol_type(pair: Pair, v: int) -> None:
    group = unique("jg-protocol")
    both(pair, lambda side: member_of(side, v, group))
    other = dataclasses.replace(_join_request(v, group), protocol_type="connect")
    answers = pair.compare(other)
    assert answers.kafka.error_code == ErrorCode.inconsistent_group_protocol


def _join_request(v: int, group: str, member_id: str = "",
                  session: datetime.timedelta = SESSION) -> Any:
    return body(JOIN_GROUP, v, group_id=group, session_timeout=session,
                rebalance_timeout=SESSION, member_id=member_id, group_instance_id=None,
                protocol_type="consumer", reason=None,
                protocols=(part(JOIN_GROUP, v, "JoinGroupRequestProtocol", name="range",
                                metadata=subscription("t")),))


def sync_as_the_leader(pair: Pair, v: int) -> None:
    group = unique("sg")

    def run(side: Side) -> Any:
        member = member_of(side, 9, group)
        return sync(side, v, group, member, assignments={member.member_id: assignment("t", 0)})
    answers = both(pair, run)
    pair.assert_same(answers)
    assert answers.kafka.error_code == ErrorCode.none


def sync_with_a_wrong_generation(pair: Pair, v: int) -> None:
    group = unique("sg-generation")
    answers = both(pair, lambda side: sync(side, v, group, member_of(side, 9, group),
                                           generation=7))
    pair.assert_same(answers)
    assert answers.kafka.error_code == ErrorCode.illegal_generation


def sync_with_an_unknown_member(pair: Pair, v: int) -> None:
    group = unique("sg-member")

    def run(side: Side) -> Any:
        member = member_of(side, 9, group)
        return sync(side, v, group, Member("nobody", member.generation, None))
    answers = both(pair, run)
    pair.assert_same(answers)
    assert answers.kafka.error_code == ErrorCode.unknown_member_id


def sync_an_unknown_group(pair: Pair, v: int) -> None:
    answers = pair.compare(body(SYNC_GROUP, v, group_id=unique("sg-unknown"),
                                generation_id=1, member_id="nobody", assignments=(),
                                protocol_type="consumer", protocol_name="range"))
    assert answers.kafka.error_code == ErrorCode.unknown_member_id


def heartbeat(side: Side, v: int, group: str, member_id: str, generation: int) -> Any:
    return side.send(body(HEARTBEAT, v, group_id=group, generation_id=generation,
                          member_id=member_id, group_instance_id=None))


def heartbeat_of_a_stable_member(pair: Pair, v: int) -> None:
    group = unique("hb")

    def run(side: Side) -> Any:
        member = stable_member(side, group, "t")
        return heartbeat(side, v, group, member.member_id, member.generation)
    answers = both(pair, run)
    pair.assert_same(answers)
    assert answers.kafka.error_code == ErrorCode.none


def heartbeat_with_a_wrong_generation(pair: Pair, v: int) -> None:
    group = unique("hb-generation")

    def run(side: Side) -> Any:
        member = stable_member(side, group, "t")
        return heartbeat(side, v, group, member.member_id, member.generation + 5)
    answers = both(pair, run)
    pair.assert_same(answers)
    assert answers.kafka.error_code == ErrorCode.illegal_generation


def heartbeat_of_an_unknown_member(pair: Pair, v: int) -> None:
    group = unique("hb-member")

    def run(side: Side) -> Any:
        member = stable_member(side, group, "t")
        return heartbeat(side, v, group, "nobody", member.generation)
    answers = both(pair, run)
    pair.assert_same(answers)
    assert answers.kafka.error_code == ErrorCode.unknown_member_id


def heartbeat_during_a_rebalance(pair: Pair, v: int) -> None:
    group = unique("hb-rebalance")

    def run(side: Side) -> Any:
        member = member_of(side, 9, group)  # joined, not synced: CompletingRebalance
        return heartbeat(side, v, group, member.member_id, member.generation)
    pair.assert_same(both(pair, run))


def heartbeat_of_an_unknown_group(pair: Pair, v: int) -> None:
    pair.compare(body(HEARTBEAT, v, group_id=unique("hb-unknown"), generation_id=1,
                      member_id="nobody"))


def leave(v: int, group: str, *member_ids: str) -> Any:
    """One member at the top level below v3, a list from v3."""
    if v < 3:
        return body(LEAVE_GROUP, v, group_id=group, member_id=member_ids[0])
    return body(LEAVE_GROUP, v, group_id=group,
                members=tuple(part(LEAVE_GROUP, v, "MemberIdentity", member_id=m,
                                   group_instance_id=None, reason=None)
                              for m in member_ids))


def leave_a_group(pair: Pair, v: int) -> None:
    group = unique("lg")

    def run(side: Side) -> Any:
        member = stable_member(side, group, "t")
        return side.send(leave(v, group, member.member_id))
    answers = both(pair, run)
    pair.assert_same(answers)
    assert answers.kafka.error_code == ErrorCode.none


def leave_as_an_unknown_member(pair: Pair, v: int) -> None:
    group = unique("lg-member")

    def run(side: Side) -> Any:
        stable_member(side, group, "t")
        return side.send(leave(v, group, "nobody"))
    pair.assert_same(both(pair, run))


def leave_an_unknown_group(pair: Pair, v: int) -> None:
    pair.compare(leave(v, unique("lg-unknown"), "nobody"))


# -- DescribeGroups, ListGroups, DeleteGroups ---------------------------------------------------

def describe_groups(v: int, *groups: str) -> Any:
    return body(DESCRIBE_GROUPS, v, groups=groups, include_authorized_operations=True)


def describe_a_stable_group(pair: Pair, v: int) -> None:
    group = unique("dg")
    both(pair, lambda side: stable_member(side, group, "t"))
    pair.compare(describe_groups(v, group))


def describe_a_rebalancing_group(pair: Pair, v: int) -> None:
    group = unique("dg-rebalance")
    both(pair, lambda side: member_of(side, 9, group))
    pair.compare(describe_groups(v, group))


def describe_an_unknown_group(pair: Pair, v: int) -> None:
    pair.compare(describe_groups(v, unique("dg-unknown"), ""))


def list_groups(v: int, states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> Any:
    return body(LIST_GROUPS, v, states_filter=states, types_filter=types)


def only(answers: Answers, *groups: str) -> Answers:
    def keep(answer: Any) -> Any:
        return dataclasses.replace(answer, groups=tuple(g for g in answer.groups
                                                        if g.group_id in groups))
    return Answers(keep(answers.kafka), keep(answers.kafkernel))


def list_groups_of_each_state(pair: Pair, v: int) -> None:
    """The session's brokers hold other tests' groups too: these groups are compared."""
    stable, empty = unique("li-stable"), unique("li-empty")
    both(pair, lambda side: stable_member(side, stable, "t"))

    def emptied(side: Side) -> None:
        member = stable_member(side, empty, "t")
        assert side.send(leave(3, empty, member.member_id)).error_code == ErrorCode.none
    both(pair, emptied)
    answers = pair.send(list_groups(v))
    assert answers.kafka.error_code == ErrorCode.none
    pair.assert_same(only(answers, stable, empty))
    if v >= 4:
        pair.assert_same(only(pair.send(list_groups(v, states=("Empty",))), stable, empty))
        pair.assert_same(only(pair.send(list_groups(v, states=("Nonsense",))), stable, empty))
    if v >= 5:
        pair.assert_same(only(pair.send(list_groups(v, types=("classic",))), stable, empty))
        pair.assert_same(only(pair.send(list_groups(v, types=("consumer",))), stable, empty))


def delete_groups(v: int, *groups: str) -> Any:
    return body(DELETE_GROUPS, v, groups_names=groups)


def delete_an_empty_group(pair: Pair, v: int) -> None:
    group = unique("del")

    def emptied(side: Side) -> None:
        member = stable_member(side, group, "t")
        assert side.send(leave(3, group, member.member_id)).error_code == ErrorCode.none
    both(pair, emptied)
    answers = pair.compare(delete_groups(v, group))
    assert answers.kafka.results[0].error_code == ErrorCode.none
    pair.compare(describe_groups(5, group))


def delete_a_group_with_members_or_none(pair: Pair, v: int) -> None:
    busy, unknown = unique("del-busy"), unique("del-unknown")
    both(pair, lambda side: stable_member(side, busy, "t"))
    answers = pair.compare(delete_groups(v, busy, unknown, ""))
    codes = {r.group_id: r.error_code for r in answers.kafka.results}
    assert codes[busy] == ErrorCode.non_empty_group
    assert codes[unknown] == ErrorCode.group_id_not_found


# -- OffsetCommit, OffsetFetch, OffsetDelete ---------------------------------------------------

def commit(v: int, group: str, topic: str, offsets: dict[int, int], *, generation: int = -1,
           member_id: str = "") -> Any:
    return body(OFFSET_COMMIT, v, group_id=group, generation_id_or_member_epoch=generation,
                member_id=member_id, group_instance_id=None,
                retention_time=datetime.timedelta(milliseconds=-1),
                topics=(part(OFFSET_COMMIT, v, "OffsetCommitRequestTopic", name=topic,
                             partitions=tuple(part(
                                 OFFSET_COMMIT, v, "OffsetCommitRequestPartition",
                                 partition_index=p, committed_offset=o,
                                 committed_leader_epoch=-1, committed_metadata="meta")
                                 for p, o in offsets.items())),))


def fetch_offsets(v: int, group: str, topic: str | None, partitions: tuple[int, ...] = (0,),
                  require_stable: bool = False) -> Any:
    topic_cls = "OffsetFetchRequestTopics" if v >= 8 else "OffsetFetchRequestTopic"
    topics = None if topic is None else (part(OFFSET_FETCH, v, topic_cls, name=topic,
                                              partition_indexes=partitions),)
    if v >= 8:
        return body(OFFSET_FETCH, v, require_stable=require_stable, groups=(part(
            OFFSET_FETCH, v, "OffsetFetchRequestGroup", group_id=group, member_id=None,
            member_epoch=-1, topics=topics),))
    return body(OFFSET_FETCH, v, group_id=group, topics=topics, require_stable=require_stable)


def commit_offsets_standalone(pair: Pair, v: int) -> None:
    """A consumer outside group management (generation -1, no member id)."""
    topic, group = unique("oc"), unique("oc-group")
    create_topic(pair, topic, partitions=2)
    answers = pair.compare(commit(v, group, topic, {0: 5, 1: 7}))
    assert answers.kafka.topics[0].partitions[0].error_code == ErrorCode.none
    pair.compare(fetch_offsets(9, group, topic, (0, 1)))


def commit_offsets_as_a_member(pair: Pair, v: int) -> None:
    topic, group = unique("oc-member"), unique("oc-group")
    create_topic(pair, topic)

    def run(side: Side) -> Any:
        member = stable_member(side, group, topic)
        return side.send(commit(v, group, topic, {0: 3}, generation=member.generation,
                                member_id=member.member_id))
    answers = both(pair, run)
    pair.assert_same(answers)
    assert answers.kafka.topics[0].partitions[0].error_code == ErrorCode.none


def commit_with_a_wrong_generation(pair: Pair, v: int) -> None:
    topic, group = unique("oc-gen"), unique("oc-group")
    create_topic(pair, topic)

    def run(side: Side) -> Any:
        member = stable_member(side, group, topic)
        return side.send(commit(v, group, topic, {0: 3}, generation=member.generation + 3,
                                member_id=member.member_id))
    answers = both(pair, run)
    pair.assert_same(answers)


def commit_as_an_unknown_member(pair: Pair, v: int) -> None:
    topic, group = unique("oc-unknown-member"), unique("oc-group")
    create_topic(pair, topic)

    def run(side: Side) -> Any:
        member = stable_member(side, group, topic)
        return side.send(commit(v, group, topic, {0: 3}, generation=member.generation,
                                member_id="nobody"))
    pair.assert_same(both(pair, run))


def commit_to_an_unknown_topic(pair: Pair, v: int) -> None:
    pair.compare(commit(v, unique("oc-group"), unique("oc-no-topic"), {0: 1}))


def commit_to_an_unknown_partition(pair: Pair, v: int) -> None:
    topic = unique("oc-partition")
    create_topic(pair, topic)
    pair.compare(commit(v, unique("oc-group"), topic, {4: 1}))


def fetch_committed_offsets(pair: Pair, v: int) -> None:
    topic, group = unique("of"), unique("of-group")
    create_topic(pair, topic, partitions=2)
    pair.compare(commit(9, group, topic, {0: 5}))
    pair.compare(fetch_offsets(v, group, topic, (0, 1)))
    if v >= 2:
        pair.compare(fetch_offsets(v, group, None))  # all topics of the group
    if v >= 7:
        pair.compare(fetch_offsets(v, group, topic, (0,), require_stable=True))


def fetch_offsets_of_an_unknown_group(pair: Pair, v: int) -> None:
    topic = unique("of-unknown")
    create_topic(pair, topic)
    pair.compare(fetch_offsets(v, unique("of-nogroup"), topic, (0, 3)))


def fetch_offsets_of_an_unknown_topic(pair: Pair, v: int) -> None:
    pair.compare(fetch_offsets(v, unique("of-group"), unique("of-no-topic"), (0,)))


def offset_delete(group: str, topic: str, *partitions: int) -> Any:
    return body(OFFSET_DELETE, 0, group_id=group, topics=(part(
        OFFSET_DELETE, 0, "OffsetDeleteRequestTopic", name=topic, partitions=tuple(
            part(OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=p)
            for p in partitions)),))


def delete_offsets_of_an_empty_group(pair: Pair, v: int) -> None:
    topic, group = unique("od"), unique("od-group")
    create_topic(pair, topic, partitions=2)
    pair.compare(commit(9, group, topic, {0: 5, 1: 6}))
    answers = pair.compare(offset_delete(group, topic, 0))
    assert answers.kafka.error_code == ErrorCode.none
    pair.compare(fetch_offsets(9, group, topic, (0, 1)))


def delete_offsets_of_a_subscribed_topic(pair: Pair, v: int) -> None:
    topic, group = unique("od-sub"), unique("od-group")
    create_topic(pair, topic)

    def run(side: Side) -> Any:
        member = stable_member(side, group, topic)
        side.send(commit(9, group, topic, {0: 1}, generation=member.generation,
                         member_id=member.member_id))
        return side.send(offset_delete(group, topic, 0))
    answers = both(pair, run)
    pair.assert_same(answers)
    assert answers.kafka.topics[0].partitions[0].error_code == (
        ErrorCode.group_subscribed_to_topic)


def delete_offsets_of_an_unknown_group(pair: Pair, v: int) -> None:
    topic = unique("od-unknown")
    create_topic(pair, topic)
    answers = pair.compare(offset_delete(unique("od-nogroup"), topic, 0))
    assert answers.kafka.error_code == ErrorCode.group_id_not_found


CASES: list[tuple[int, Case]] = [
    (FIND_COORDINATOR, find_a_group_coordinator),
    (FIND_COORDINATOR, find_coordinators_of_several_groups),
    (FIND_COORDINATOR, find_an_unknown_key_type),
    (FIND_COORDINATOR, find_a_share_coordinator),
    (FIND_COORDINATOR, find_coordinator_of_an_empty_group_id),
    (JOIN_GROUP, join_a_new_group),
    (JOIN_GROUP, join_with_an_invalid_session_timeout),
    (JOIN_GROUP, join_with_an_unknown_member_id),
    (JOIN_GROUP, join_with_an_empty_group_id),
    (JOIN_GROUP, join_with_an_inconsistent_protocol_type),
    (SYNC_GROUP, sync_as_the_leader),
    (SYNC_GROUP, sync_with_a_wrong_generation),
    (SYNC_GROUP, sync_with_an_unknown_member),
    (SYNC_GROUP, sync_an_unknown_group),
    (HEARTBEAT, heartbeat_of_a_stable_member),
    (HEARTBEAT, heartbeat_with_a_wrong_generation),
    (HEARTBEAT, heartbeat_of_an_unknown_member),
    (HEARTBEAT, heartbeat_during_a_rebalance),
    (HEARTBEAT, heartbeat_of_an_unknown_group),
    (LEAVE_GROUP, leave_a_group),
    (LEAVE_GROUP, leave_as_an_unknown_member),
    (LEAVE_GROUP, leave_an_unknown_group),
    (DESCRIBE_GROUPS, describe_a_stable_group),
    (DESCRIBE_GROUPS, describe_a_rebalancing_group),
    (DESCRIBE_GROUPS, describe_an_unknown_group),
    (LIST_GROUPS, list_groups_of_each_state),
    (DELETE_GROUPS, delete_an_empty_group),
    (DELETE_GROUPS, delete_a_group_with_members_or_none),
    (OFFSET_COMMIT, commit_offsets_standalone),
    (OFFSET_COMMIT, commit_offsets_as_a_member),
    (OFFSET_COMMIT, commit_with_a_wrong_generation),
    (OFFSET_COMMIT, commit_as_an_unknown_member),
    (OFFSET_COMMIT, commit_to_an_unknown_topic),
    (OFFSET_COMMIT, commit_to_an_unknown_partition),
    (OFFSET_FETCH, fetch_committed_offsets),
    (OFFSET_FETCH, fetch_offsets_of_an_unknown_group),
    (OFFSET_FETCH, fetch_offsets_of_an_unknown_topic),
    (OFFSET_DELETE, delete_offsets_of_an_empty_group),
    (OFFSET_DELETE, delete_offsets_of_a_subscribed_topic),
    (OFFSET_DELETE, delete_offsets_of_an_unknown_group),
]


@pytest.mark.parametrize(("api_key", "version", "case"), cases(*CASES))
def test_conformance(groups: Pair, api_key: int, version: int, case: Case) -> None:
    case(groups, version)
