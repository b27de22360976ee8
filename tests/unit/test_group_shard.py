"""The group coordinator shard (shard.py) without sockets: replay reproduces what the
operations built, loading and unloading, and the operations that span groups and
offsets (DeleteGroups)."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment

from kernel.config import ConfigError, ConfigSchema
from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.group import GroupState
from plugins.coordinator.result import (
    HeartbeatDeadline,
    JoinDeadline,
    ScheduleTimer,
    append_error_to_response_error,
)
from plugins.coordinator.shard import GroupCoordinatorShard
from tests.unit.group_driver import (
    CONFIG,
    GROUP,
    Runtime,
    ctx,
    encodes,
    snapshot,
)


def test_list_describe_and_delete_groups() -> None:
    rt = Runtime()
    rt.stable_group("a", "b")
    rt.commit("", -1, {("t", 0): 1}, group="simple")

    listed = rt.shard.list_groups()
    encodes(listed)
    assert {(g.group_id, g.group_state, g.protocol_type) for g in listed.groups} == {
        (GROUP, "Stable", "consumer"),
        ("simple", "Empty", ""),
    }
    assert [g.group_id for g in rt.shard.list_groups(["empty"]).groups] == ["simple"]
    assert rt.shard.list_groups(types_filter=["consumer"]).groups == ()

    described = rt.shard.describe_group(ctx(5), GROUP)
    assert described.group_state == "Stable" and described.protocol_data == "range"
    assert {m.member_assignment for m in described.members} != {b""}
    assert rt.shard.describe_group(ctx(6), "nope").error_code == ErrorCode.group_id_not_found
    assert rt.shard.describe_group(ctx(5), "nope").group_state == "Dead"

    result = rt.shard.delete_groups([GROUP, "simple", "nope"])
    rt.apply(result)
    assert [(r.group_id, r.error_code) for r in result.response or ()] == [
        (GROUP, ErrorCode.non_empty_group),
        ("simple", ErrorCode.none),
        ("nope", ErrorCode.group_id_not_found),
    ]
    assert [v for _, v in result.records] == [None, None]  # offset, then group tombstone
    assert rt.shard.group("simple") is None


def test_unloading_answers_parked_requests_with_not_coordinator() -> None:
    rt = Runtime()
    _, h = rt.join_new("a")
    result = rt.shard.on_unloaded()
    rt.apply(result)
    assert rt.responses[h].error_code == ErrorCode.not_coordinator
    assert JoinDeadline(GROUP) not in rt.timers
    assert not rt.shard.is_loaded and rt.shard.group(GROUP) is None


def test_config_from_kafka_property_names() -> None:
    schema = ConfigSchema("plugins.coordinator", GroupCoordinatorConfig)
    config = schema.build({"group.initial.rebalance.delay.ms": 0, "group.max.size": 10}, "k")
    assert config.group_initial_rebalance_delay_ms == 0 and config.group_max_size == 10
    assert config.offsets_retention_ms == 10_080 * 60_000
    with pytest.raises(ConfigError, match="group.max.size"):
        schema.build({"group.max.sizes": 1}, "k")
    with pytest.raises(ConfigError):
        GroupCoordinatorConfig(group_min_session_timeout_ms=10, group_max_session_timeout_ms=5)


def test_append_errors_map_like_kafka() -> None:
    assert (
        append_error_to_response_error(ErrorCode.not_leader_or_follower)
        == ErrorCode.not_coordinator
    )
    assert (
        append_error_to_response_error(ErrorCode.record_list_too_large, offset_commit=True)
        == ErrorCode.invalid_commit_offset_size
    )
    assert (
        append_error_to_response_error(ErrorCode.request_timed_out)
        == ErrorCode.coordinator_not_available
    )


def test_replaying_the_log_into_a_fresh_shard_reproduces_groups_and_offsets() -> None:
    rt = Runtime()
    (a, b), generation = rt.stable_group("a", "b")
    rt.commit(a, generation, {("orders", 0): 10, ("orders", 1): 11}, metadata="from-a")
    rt.commit(b, generation, {("orders", 1): 12})
    # A static group whose member restarted (new member id persisted).
    rt_static = rt.join(client_id="s", instance_id="i1", group="static")
    rt.advance(0)
    s1 = rt.responses[rt_static].member_id
    sync = SyncGroupRequest(
        group_id="static",
        generation_id=1,
        member_id=s1,
        group_instance_id="i1",
        assignments=(SyncGroupRequestAssignment(member_id=s1, assignment=b"all"),),
    )
    rt.apply(rt.shard.sync_group(ctx(5), sync, rt.handle()))
    rt.join(client_id="s", instance_id="i1", group="static")
    # Simple consumers, one offset deleted later; a group that empties out; a deleted group.
    rt.commit("", -1, {("t", 0): 1, ("t", 1): 2}, group="simple")
    delete = OffsetDeleteRequest(
        group_id="simple",
        topics=(
            OffsetDeleteRequestTopic(
                name="t", partitions=(OffsetDeleteRequestPartition(partition_index=1),)
            ),
        ),
    )
    rt.apply(rt.shard.delete_offsets(ctx(0), delete))
    h = rt.join(client_id="e", group="emptied", version=3)
    rt.advance(0)
    emptied_member = rt.responses[h].member_id
    rt.apply(
        rt.shard.leave_group(
            ctx(5),
            LeaveGroupRequest(
                group_id="emptied", members=(MemberIdentity(member_id=emptied_member),)
            ),
        )
    )
    rt.commit("", -1, {("t", 0): 1}, group="doomed")
    rt.apply(rt.shard.delete_groups(["doomed"]))

    expected = snapshot(rt.shard)
    assert set(expected) == {GROUP, "static", "simple", "emptied"}
    assert expected["emptied"][0] is GroupState.EMPTY

    fresh = GroupCoordinatorShard(CONFIG, clock=lambda: rt.now)
    for offset, (key, value) in enumerate(rt.log):
        fresh.replay(offset, -1, -1, key, value)
    result = fresh.on_loaded()
    assert snapshot(fresh) == expected
    # Loaded members must heartbeat to the new coordinator to stay.
    armed = {op.key for op in result.timers if isinstance(op, ScheduleTimer)}
    assert {HeartbeatDeadline(GROUP, a), HeartbeatDeadline(GROUP, b)} <= armed


def test_replay_skips_records_of_other_group_types() -> None:
    shard = GroupCoordinatorShard(CONFIG)
    shard.replay(0, -1, -1, struct.pack(">h", 3) + struct.pack(">h", 1) + b"g", b"\x00\x00")
    assert shard.group_ids() == []
