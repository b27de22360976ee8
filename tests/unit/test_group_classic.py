"""The classic group protocol (classic.py) through the shard, without sockets: JoinGroup,
SyncGroup, Heartbeat and LeaveGroup, rebalance timers, static membership, and the
group views of ListGroups and DescribeGroups."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v0.request import JoinGroupRequest as JoinGroupRequestV0
from kio.schema.join_group.v0.response import JoinGroupResponse as JoinGroupResponseV0
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.join_group.v9.response import JoinGroupResponse
from kio.schema.sync_group.v5.response import SyncGroupResponse

from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.group import GroupState
from plugins.coordinator.records import (
    GroupMetadataKey,
    decode_group_metadata_value,
    decode_key,
)
from plugins.coordinator.result import (
    HeartbeatDeadline,
)
from plugins.coordinator.versions import to_version
from tests.unit.group_driver import (
    CONFIG,
    GROUP,
    REBALANCE_MS,
    SESSION_MS,
    Runtime,
    ctx,
    encodes,
    subscription,
)


def test_three_members_join_and_get_a_generation_with_leader_and_protocols() -> None:
    rt = Runtime()
    a, ha = rt.join_new(
        "a", protocols=(("range", subscription("orders")), ("roundrobin", subscription("orders")))
    )
    b, hb = rt.join_new(
        "b", protocols=(("roundrobin", subscription("orders")), ("range", subscription("orders")))
    )
    c, hc = rt.join_new("c", protocols=(("roundrobin", subscription("refunds")),))
    # Parked until the join phase ends.
    assert rt.responses.get(ha) is None and rt.responses.get(hb) is None
    assert rt.shard.group(GROUP).state is GroupState.PREPARING_REBALANCE

    rt.advance(0)

    ra, rb, rc = (rt.responses[h] for h in (ha, hb, hc))
    for r, member in ((ra, a), (rb, b), (rc, c)):
        assert r.error_code == ErrorCode.none
        assert r.generation_id == 1
        # Only roundrobin is supported by all three.
        assert r.protocol_name == "roundrobin"
        assert r.protocol_type == "consumer"
        assert r.leader == a
        assert r.member_id == member
        encodes(r)
    # The leader learns everyone's metadata for the chosen protocol; followers nothing.
    assert [(m.member_id, m.metadata) for m in ra.members] == [
        (a, subscription("orders")),
        (b, subscription("orders")),
        (c, subscription("refunds")),
    ]
    assert rb.members == () and rc.members == ()
    assert rt.shard.group(GROUP).state is GroupState.COMPLETING_REBALANCE
    assert rt.log == []  # nothing is persisted until the leader's assignment


def test_protocol_with_most_votes_wins() -> None:
    rt = Runtime()
    both_ab = (("x", b"1"), ("y", b"1"))
    both_ba = (("y", b"1"), ("x", b"1"))
    _, h1 = rt.join_new("a", protocols=both_ab)
    rt.join_new("b", protocols=both_ba)
    rt.join_new("c", protocols=both_ba)
    rt.advance(0)
    assert rt.responses[h1].protocol_name == "y"


def test_inconsistent_protocol_is_rejected() -> None:
    rt = Runtime()
    rt.join_new("a", protocols=(("range", b""),))
    h = rt.join(client_id="b", protocols=(("sticky", b""),))
    assert rt.responses[h].error_code == ErrorCode.inconsistent_group_protocol


def test_sync_distributes_the_leaders_assignment() -> None:
    rt = Runtime()
    (a, ha), (b, _), (c, _) = (rt.join_new(x) for x in "abc")
    rt.advance(0)
    generation = rt.responses[ha].generation_id

    hb = rt.sync(b, generation)
    hc = rt.sync(c, generation)
    assert rt.responses.get(hb) is None and rt.responses.get(hc) is None  # wait for leader
    assert rt.log == []

    ha_sync = rt.sync(a, generation, {a: b"A", b: b"B"})  # c left out: gets empty
    for handle, expected in ((ha_sync, b"A"), (hb, b"B"), (hc, b"")):
        response: SyncGroupResponse = rt.responses[handle]
        assert response.error_code == ErrorCode.none
        assert response.assignment == expected
        assert response.protocol_name == "range"
        encodes(response)
    assert rt.shard.group(GROUP).state is GroupState.STABLE

    # One GroupMetadata record with the assignment, in Kafka's format.
    [(key, value)] = rt.log
    assert decode_key(key) == GroupMetadataKey(group=GROUP)
    assert value is not None
    stored = decode_group_metadata_value(value)
    assert stored.generation == generation
    assert stored.protocol == "range" and stored.leader == a
    assert {m.member_id: m.assignment for m in stored.members} == {a: b"A", b: b"B", c: b""}

    # Stable: a late SyncGroup just gets the current assignment.
    again = rt.sync(c, generation)
    assert rt.responses[again].assignment == b""


def test_sync_with_stale_generation_or_unknown_member() -> None:
    rt = Runtime()
    (a, _b), generation = rt.stable_group("a", "b")
    assert rt.responses[rt.sync(a, generation + 1)].error_code == ErrorCode.illegal_generation
    assert rt.responses[rt.sync("ghost", generation)].error_code == ErrorCode.unknown_member_id


def test_member_leaving_triggers_a_rebalance() -> None:
    rt = Runtime()
    (a, b, c), generation = rt.stable_group("a", "b", "c")

    response = rt.leave((b, None))
    assert response.error_code == ErrorCode.none
    assert [(m.member_id, m.error_code) for m in response.members] == [(b, ErrorCode.none)]
    encodes(response)
    assert rt.shard.group(GROUP).state is GroupState.PREPARING_REBALANCE
    assert rt.heartbeat(a, generation) == ErrorCode.rebalance_in_progress

    ha = rt.join(a)
    assert rt.responses.get(ha) is None  # c has not rejoined yet
    hc = rt.join(c)
    # The last expected member completes the join phase at once.
    for h in (ha, hc):
        assert rt.responses[h].generation_id == generation + 1
    assert [m.member_id for m in rt.responses[ha].members] == [a, c]


def test_leave_by_unknown_member_and_by_group_instance_id() -> None:
    rt = Runtime()
    # Static members join with their instance id and get their id at once (no KIP-394).
    h1 = rt.join(client_id="s1", instance_id="i1")
    rt.advance(0)
    s1 = rt.responses[h1].member_id
    assert s1.startswith("i1-")
    response = rt.leave(("ghost", None), ("", "i1"), ("", "i-unknown"))
    assert [m.error_code for m in response.members] == [
        ErrorCode.unknown_member_id,
        ErrorCode.none,
        ErrorCode.unknown_member_id,
    ]
    assert s1 not in rt.shard.group(GROUP).members


def test_session_timeout_expels_a_silent_member() -> None:
    rt = Runtime()
    (a, b, c), generation = rt.stable_group("a", "b", "c")
    rt.advance(SESSION_MS - 1_000)
    assert rt.heartbeat(a, generation) == ErrorCode.none
    assert rt.heartbeat(c, generation) == ErrorCode.none
    assert b in rt.shard.group(GROUP).members
    rt.advance(2_000)  # b's session timeout passes; a's and c's were re-armed
    group = rt.shard.group(GROUP)
    assert b not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    assert rt.heartbeat(b, generation) == ErrorCode.unknown_member_id

    ha, hc = rt.join(a), rt.join(c)
    assert rt.responses[ha].generation_id == rt.responses[hc].generation_id == generation + 1


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    rt = Runtime()
    (a, b), generation = rt.stable_group("a", "b")
    ha = rt.join(a)  # the leader rejoins: rebalance; b keeps heartbeating but never rejoins
    assert rt.responses.get(ha) is None
    rt.advance(SESSION_MS // 2)
    assert rt.heartbeat(b, generation) == ErrorCode.rebalance_in_progress
    rt.advance(REBALANCE_MS)
    response = rt.responses[ha]
    assert response.generation_id == generation + 1
    assert [m.member_id for m in response.members] == [a]
    assert b not in rt.shard.group(GROUP).members


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    rt = Runtime()
    (a, ha), (b, _) = rt.join_new("a"), rt.join_new("b")
    rt.advance(0)
    generation = rt.responses[ha].generation_id
    rt.sync(a, generation, {a: b"A", b: b"B"})
    # b got its JoinGroup response but never sends SyncGroup; a keeps heartbeating.
    for _ in range(REBALANCE_MS // 5_000):
        rt.advance(5_000)
        rt.heartbeat(a, generation)
    group = rt.shard.group(GROUP)
    assert b not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE


def test_pending_member_id_expires_after_the_session_timeout() -> None:
    rt = Runtime()
    first = rt.responses[rt.join(client_id="x")]
    assert first.error_code == ErrorCode.member_id_required
    group = rt.shard.group(GROUP)
    assert first.member_id in group.pending_members
    rt.advance(SESSION_MS)
    assert first.member_id not in group.pending_members
    assert rt.responses[rt.join(first.member_id)].error_code == ErrorCode.unknown_member_id


def test_old_clients_join_without_member_id_required() -> None:
    rt = Runtime()
    h = rt.join(client_id="old", version=3)
    rt.advance(0)
    response = rt.responses[h]
    assert response.error_code == ErrorCode.none
    assert response.member_id.startswith("old-") and response.leader == response.member_id


def test_join_group_v0_converts_both_ways() -> None:
    rt = Runtime()
    v0 = JoinGroupRequestV0(
        group_id=GROUP,
        session_timeout=timedelta(milliseconds=SESSION_MS),
        member_id="",
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    request = to_version(v0, JoinGroupRequest)
    handle = rt.handle()
    rt.apply(rt.shard.join_group(ctx(0), request, handle), handle)
    rt.advance(0)
    member = rt.shard.group(GROUP).members[rt.responses[handle].member_id]
    assert member.rebalance_timeout_ms == SESSION_MS  # v0: session timeout stands in
    old = to_version(rt.responses[handle], JoinGroupResponseV0)
    assert old.generation_id == 1 and old.protocol_name == "range"
    encodes(old)


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    rt = Runtime(GroupCoordinatorConfig(group_initial_rebalance_delay_ms=3_000))
    _, ha = rt.join_new("a")
    rt.advance(1_000)
    _, hb = rt.join_new("b")
    rt.advance(2_000)  # first delay over, but b arrived meanwhile: wait another 3 s
    assert rt.responses.get(ha) is None
    rt.advance(3_000)
    assert rt.responses[ha].generation_id == rt.responses[hb].generation_id == 1


def test_invalid_session_timeouts_are_rejected() -> None:
    rt = Runtime()
    for session_ms in (
        CONFIG.group_min_session_timeout_ms - 1,
        CONFIG.group_max_session_timeout_ms + 1,
    ):
        response = rt.responses[rt.join(client_id="x", session_ms=session_ms)]
        assert response.error_code == ErrorCode.invalid_session_timeout
    assert rt.shard.group(GROUP) is None


def test_group_max_size() -> None:
    rt = Runtime(GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_size=2))
    rt.stable_group("a", "b")
    response = rt.responses[rt.join(client_id="c")]
    assert response.error_code == ErrorCode.group_max_size_reached


def test_invalid_group_id_and_loading() -> None:
    rt = Runtime(load=False)
    assert rt.responses[rt.join(client_id="x")].error_code == ErrorCode.coordinator_load_in_progress
    # Old clients do not expect load-in-progress from these two.
    assert rt.responses[rt.sync("m", 1)].error_code == ErrorCode.rebalance_in_progress
    assert rt.heartbeat("m", 1) == ErrorCode.none
    rt.apply(rt.shard.on_loaded())
    assert rt.responses[rt.join(client_id="x", group="")].error_code == ErrorCode.invalid_group_id


def test_new_member_during_completing_rebalance_sends_parked_syncs_back_to_join() -> None:
    rt = Runtime()
    (a, ha), (b, _) = rt.join_new("a"), rt.join_new("b")
    rt.advance(0)
    generation = rt.responses[ha].generation_id
    hb_sync = rt.sync(b, generation)
    assert rt.responses.get(hb_sync) is None
    rt.join_new("c")
    assert rt.responses[hb_sync].error_code == ErrorCode.rebalance_in_progress
    assert rt.shard.group(GROUP).state is GroupState.PREPARING_REBALANCE
    # The leader's late assignment for the old generation is refused.
    late = rt.responses[rt.sync(a, generation, {a: b"A"})]
    assert late.error_code == ErrorCode.rebalance_in_progress
    assert rt.log == []


def test_a_second_join_from_the_same_member_supersedes_the_parked_one() -> None:
    rt = Runtime()
    (a, _b), _ = rt.stable_group("a", "b")
    first = rt.join(a)
    assert rt.responses.get(first) is None
    second = rt.join(a)
    assert rt.responses[first].error_code == ErrorCode.rebalance_in_progress
    assert rt.responses.get(second) is None


def test_members_that_stop_heartbeating_during_a_rebalance_are_dropped() -> None:
    rt = Runtime()
    _, generation = rt.stable_group("a", "b")
    _, hc = rt.join_new("c")  # a and b neither rejoin nor heartbeat
    rt.advance(SESSION_MS)
    assert rt.responses[hc].generation_id == generation + 1
    assert set(rt.shard.group(GROUP).members) == {rt.responses[hc].member_id}


def test_new_member_parked_longer_than_the_new_member_join_timeout_is_dropped() -> None:
    rt = Runtime()
    (a, b), generation = rt.stable_group("a", "b")
    # c's long rebalance timeout stretches the join phase past the 5-minute limit.
    c, hc = rt.join_new("c", rebalance_ms=600_000)
    while rt.responses.get(hc) is None:
        rt.advance(5_000)
        rt.heartbeat(a, generation)
        rt.heartbeat(b, generation)
    assert rt.responses[hc].error_code == ErrorCode.unknown_member_id
    assert rt.now - 1_700_000_000_000 >= CONFIG.new_member_join_timeout_ms
    assert c not in rt.shard.group(GROUP).members


def test_static_member_rejoin_does_not_rebalance_and_fences_the_old_id() -> None:
    rt = Runtime()
    h1 = rt.join(client_id="c1", instance_id="i1")
    h2 = rt.join(client_id="c2", instance_id="i2")
    rt.advance(0)
    s1, s2 = rt.responses[h1].member_id, rt.responses[h2].member_id
    generation = rt.responses[h1].generation_id
    rt.sync(s2, generation, instance_id="i2")
    rt.sync(s1, generation, {s1: b"one", s2: b"two"}, instance_id="i1")
    records_before = len(rt.log)

    # i2 restarts: joins with no member id but its instance id and the same protocols.
    h = rt.join(client_id="c2", instance_id="i2")
    response: JoinGroupResponse = rt.responses[h]
    new_s2 = response.member_id
    assert response.error_code == ErrorCode.none
    assert new_s2 != s2 and new_s2.startswith("i2-")
    assert response.generation_id == generation
    assert response.leader == s1 and not response.skip_assignment
    group = rt.shard.group(GROUP)
    assert group.state is GroupState.STABLE
    assert group.static_members["i2"] == new_s2
    assert group.members[new_s2].assignment == b"two"
    # The new member id is persisted, nobody else is disturbed.
    assert len(rt.log) == records_before + 1
    stored = decode_group_metadata_value(rt.log[-1][1] or b"")
    assert {m.member_id for m in stored.members} == {s1, new_s2}
    assert rt.heartbeat(s1, generation, "i1") == ErrorCode.none

    # The old process is a zombie now.
    assert rt.heartbeat(s2, generation, "i2") == ErrorCode.fenced_instance_id
    assert rt.heartbeat(new_s2, generation, "i2") == ErrorCode.none
    errors, written = rt.commit(s2, generation, {("orders", 0): 5})
    assert errors == {("orders", 0): ErrorCode.unknown_member_id} and written == 0
    sync = rt.responses[rt.sync(new_s2, generation, instance_id="i2")]
    assert sync.assignment == b"two"


def test_static_member_replaced_while_parked_in_join_is_fenced() -> None:
    rt = Runtime()
    h1 = rt.join(client_id="c1", instance_id="i1")
    h2 = rt.join(client_id="c2", instance_id="i2")
    rt.advance(0)
    s1 = rt.responses[h1].member_id
    generation = rt.responses[h1].generation_id
    rt.sync(rt.responses[h2].member_id, generation, instance_id="i2")
    rt.sync(s1, generation, {}, instance_id="i1")
    parked = rt.join(s1, client_id="c1", instance_id="i1")  # leader rejoin: rebalance
    assert rt.responses.get(parked) is None
    replacement = rt.join(client_id="c1", instance_id="i1")  # a second process, same id
    fenced = rt.responses[parked]
    assert fenced.error_code == ErrorCode.fenced_instance_id and fenced.member_id == s1
    assert rt.responses.get(replacement) is None  # it waits for the join phase instead
    assert rt.shard.group(GROUP).static_members["i1"] != s1


def test_static_member_rejoin_with_same_member_id_in_stable_does_not_rebalance() -> None:
    rt = Runtime()
    h1 = rt.join(client_id="c1", instance_id="i1")
    h2 = rt.join(client_id="c2", instance_id="i2")
    rt.advance(0)
    s1, s2 = rt.responses[h1].member_id, rt.responses[h2].member_id
    generation = rt.responses[h1].generation_id
    rt.sync(s1, generation, {s1: b"1", s2: b"2"}, instance_id="i1")
    rt.sync(s2, generation, instance_id="i2")
    follower = s2 if rt.responses[h1].leader == s1 else s1
    instance = "i2" if follower == s2 else "i1"
    response = rt.responses[rt.join(follower, client_id="c", instance_id=instance)]
    assert response.error_code == ErrorCode.none and response.generation_id == generation
    assert rt.shard.group(GROUP).state is GroupState.STABLE


def test_static_leader_restart_on_v9_learns_it_leads_but_skips_assignment() -> None:
    rt = Runtime()
    h1 = rt.join(client_id="c1", instance_id="i1")
    h2 = rt.join(client_id="c2", instance_id="i2")
    rt.advance(0)
    leader = rt.responses[h1].leader
    generation = rt.responses[h1].generation_id
    s1, s2 = rt.responses[h1].member_id, rt.responses[h2].member_id
    rt.sync(s2, generation, instance_id="i2")
    rt.sync(s1, generation, {s1: b"1", s2: b"2"}, instance_id="i1")
    assert leader == s1
    response = rt.responses[rt.join(client_id="c1", instance_id="i1")]
    assert response.leader == response.member_id != s1
    assert response.skip_assignment
    assert len(response.members) == 2
    # Before v9 the old leader id is returned so the restarted leader does not assign.
    old = rt.responses[rt.join(client_id="c1", instance_id="i1", version=5)]
    assert old.leader == response.member_id and old.member_id != old.leader


def test_session_timers_are_rearmed_by_heartbeats() -> None:
    rt = Runtime()
    (a, _b), generation = rt.stable_group("a", "b")
    key = HeartbeatDeadline(GROUP, a)
    rt.advance(5_000)
    rt.heartbeat(a, generation)
    assert rt.timers[key] == rt.now + SESSION_MS


@pytest.mark.parametrize("version", [3, 4, 5])
def test_describe_versions_do_not_hide_unknown_groups_as_errors(version: int) -> None:
    rt = Runtime()
    assert rt.shard.describe_group(ctx(version), "nope").error_code == ErrorCode.none
