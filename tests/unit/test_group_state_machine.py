"""The classic group coordinator shard, driven without sockets.

``Runtime`` stands in for the coordinator runtime and the purgatory: it keeps the
records the shard asks to append, arms keyed timers on a fake clock, fires them when
the test advances time, and collects responses delivered to parked requests.
"""

from __future__ import annotations

import io
import itertools
import struct
from collections.abc import Hashable
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v0.request import JoinGroupRequest as JoinGroupRequestV0
from kio.schema.join_group.v0.response import JoinGroupResponse as JoinGroupResponseV0
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.join_group.v9.response import JoinGroupResponse
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.sync_group.v5.response import SyncGroupResponse
from kio.serial import entity_writer

from kernel.config import ConfigError, ConfigSchema
from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.group import GroupState
from plugins.coordinator.records import (
    GroupMetadataKey,
    Record,
    decode_group_metadata_value,
    decode_key,
    encode_key,
)
from plugins.coordinator.result import (
    CancelTimer,
    CoordinatorResult,
    HeartbeatDeadline,
    JoinDeadline,
    ScheduleTimer,
    TimerKey,
    append_error_to_response_error,
)
from plugins.coordinator.state_machine import GroupCoordinatorShard, RequestContext
from plugins.coordinator.versions import to_version

GROUP = "payments"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
CONFIG = GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0)


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


DEFAULT_PROTOCOLS = (("range", subscription("orders")),)


class Runtime:
    def __init__(self, config: GroupCoordinatorConfig = CONFIG, *, load: bool = True) -> None:
        self.now = 1_700_000_000_000
        self.shard = GroupCoordinatorShard(config, clock=lambda: self.now)
        self.log: list[Record] = []
        self.timers: dict[TimerKey, int] = {}
        self.responses: dict[Hashable, Any] = {}
        self._handles = itertools.count()
        if load:
            self.apply(self.shard.on_loaded())

    # -------------------------------------------------------------- runtime mechanics

    def apply(self, result: CoordinatorResult[Any], handle: Hashable | None = None) -> Any:
        self.log.extend(result.records)
        for op in result.timers:
            if isinstance(op, ScheduleTimer):
                self.timers[op.key] = self.now + op.delay_ms
            else:
                assert isinstance(op, CancelTimer)
                self.timers.pop(op.key, None)
        for c in result.completions:
            assert c.reply_to not in self.responses, "a request was answered twice"
            self.responses[c.reply_to] = c.response
        if handle is not None and result.response is not None:
            self.responses[handle] = result.response
        return result.response

    def advance(self, ms: int) -> None:
        """Move the clock, firing due timers in deadline order."""
        target = self.now + ms
        while True:
            due = [(deadline, key) for key, deadline in self.timers.items() if deadline <= target]
            if not due:
                break
            deadline, key = min(due, key=lambda item: item[0])
            self.now = max(self.now, deadline)
            del self.timers[key]
            self.apply(self.shard.on_timer(key))
        self.now = target

    def handle(self) -> int:
        return next(self._handles)

    # ---------------------------------------------------------------------- requests

    def join(
        self,
        member_id: str = "",
        *,
        client_id: str = "client",
        instance_id: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = DEFAULT_PROTOCOLS,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        version: int = 9,
        group: str = GROUP,
    ) -> int:
        """Send a JoinGroup; returns its handle (look it up in ``responses``)."""
        handle = self.handle()
        request = JoinGroupRequest(
            group_id=group,
            session_timeout=timedelta(milliseconds=session_ms),
            rebalance_timeout=timedelta(milliseconds=rebalance_ms),
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocols=tuple(JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols),
        )
        ctx = RequestContext(client_id=client_id, client_host="/127.0.0.1", api_version=version)
        self.apply(self.shard.join_group(ctx, request, handle), handle)
        return handle

    def join_new(self, client_id: str, **kwargs: Any) -> tuple[str, int]:
        """KIP-394 two-step join of a dynamic member: returns (member id, handle)."""
        first = self.responses[self.join(client_id=client_id, **kwargs)]
        assert first.error_code == ErrorCode.member_id_required
        assert first.member_id.startswith(f"{client_id}-")
        return first.member_id, self.join(first.member_id, client_id=client_id, **kwargs)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance_id: str | None = None,
    ) -> int:
        handle = self.handle()
        request = SyncGroupRequest(
            group_id=GROUP,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocol_name=None,
            assignments=tuple(
                SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ),
        )
        self.apply(self.shard.sync_group(ctx(5), request, handle), handle)
        return handle

    def heartbeat(self, member_id: str, generation: int, instance_id: str | None = None) -> Any:
        request = HeartbeatRequest(
            group_id=GROUP,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
        )
        return self.apply(self.shard.heartbeat(ctx(4), request)).error_code

    def leave(self, *members: tuple[str, str | None]) -> Any:
        request = LeaveGroupRequest(
            group_id=GROUP,
            members=tuple(MemberIdentity(member_id=m, group_instance_id=i) for m, i in members),
        )
        return self.apply(self.shard.leave_group(ctx(5), request))

    def commit(
        self,
        member_id: str,
        generation: int,
        offsets: dict[tuple[str, int], int],
        *,
        metadata: str | None = None,
        group: str = GROUP,
        version: int = 9,
    ) -> tuple[dict[tuple[str, int], ErrorCode], int]:
        """Returns per-partition errors and how many records were written."""
        topics: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                OffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=3,
                    committed_metadata=metadata,
                )
            )
        request = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=None,
            topics=tuple(
                OffsetCommitRequestTopic(name=t, partitions=tuple(p)) for t, p in topics.items()
            ),
        )
        before = len(self.log)
        response = self.apply(self.shard.commit_offsets(ctx(version), request))
        errors = {
            (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
        }
        return errors, len(self.log) - before

    def fetch(
        self, group: str = GROUP, topics: dict[str, list[int]] | None = None
    ) -> dict[Any, Any]:
        request = OffsetFetchRequestGroup(
            group_id=group,
            topics=None
            if topics is None
            else tuple(
                OffsetFetchRequestTopics(name=t, partition_indexes=tuple(p))
                for t, p in topics.items()
            ),
        )
        response = self.apply(self.shard.fetch_offsets(ctx(9), request))
        assert response.error_code == ErrorCode.none
        return {
            (t.name, p.partition_index): (p.committed_offset, p.metadata)
            for t in response.topics
            for p in t.partitions
        }

    # ------------------------------------------------------------------- scenarios

    def stable_group(self, *client_ids: str) -> tuple[list[str], int]:
        """Members join and sync; returns (member ids in join order, generation)."""
        joined = [self.join_new(c) for c in client_ids]
        self.advance(0)  # the initial rebalance delay (0 here) runs out
        first = self.responses[joined[0][1]]
        generation = first.generation_id
        leader = first.leader
        members = [m for m, _ in joined]
        for m in members:
            if m != leader:
                self.sync(m, generation)
        self.sync(leader, generation, {m: f"assignment-{m}".encode() for m in members})
        assert self.shard.group(GROUP).state is GroupState.STABLE
        return members, generation


def ctx(version: int) -> RequestContext:
    return RequestContext(client_id="client", client_host="/127.0.0.1", api_version=version)


def encodes(entity: Any) -> bytes:
    """The entity is valid for kio's writer (what the network layer will do)."""
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def snapshot(shard: GroupCoordinatorShard) -> dict[str, Any]:
    """The persistent part of every group: what replay must reproduce."""
    out = {}
    for group_id in shard.group_ids():
        g = shard.group(group_id)
        assert g is not None
        out[group_id] = (
            g.state,
            g.generation_id,
            g.protocol_type,
            g.protocol_name,
            g.leader_id,
            [
                (
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.assignment,
                    m.metadata(g.protocol_name) if g.protocol_name else None,
                )
                for m in g.members.values()
            ],
            dict(g.static_members),
            dict(g.offsets),
        )
    return out


# ================================================================ join and sync


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


# ======================================================= leave, timeouts, rebalance


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


# ============================================================== static membership


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


# ==================================================================== offsets


def test_commit_from_unknown_member_or_stale_generation_writes_nothing() -> None:
    rt = Runtime()
    (a, _b), generation = rt.stable_group("a", "b")
    before = len(rt.log)

    errors, written = rt.commit("ghost", generation, {("orders", 0): 10})
    assert errors == {("orders", 0): ErrorCode.unknown_member_id} and written == 0
    errors, written = rt.commit(a, generation - 1, {("orders", 0): 10, ("orders", 1): 11})
    assert set(errors.values()) == {ErrorCode.illegal_generation} and written == 0
    # Without generation and member id, a group with members refuses.
    errors, written = rt.commit("", -1, {("orders", 0): 10})
    assert errors == {("orders", 0): ErrorCode.unknown_member_id} and written == 0
    assert len(rt.log) == before
    assert rt.fetch(topics={"orders": [0]}) == {("orders", 0): (-1, "")}

    errors, written = rt.commit(a, generation, {("orders", 0): 10}, metadata="m")
    assert errors == {("orders", 0): ErrorCode.none} and written == 1
    assert rt.fetch() == {("orders", 0): (10, "m")}


def test_commit_to_a_group_that_does_not_exist() -> None:
    rt = Runtime()
    errors, _ = rt.commit("m", 3, {("t", 0): 1}, group="gone")
    assert errors == {("t", 0): ErrorCode.group_id_not_found}
    errors, _ = rt.commit("m", 3, {("t", 0): 1}, group="gone", version=8)
    assert errors == {("t", 0): ErrorCode.illegal_generation}
    assert rt.shard.group("gone") is None


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    rt = Runtime()
    (a, ha), _ = rt.join_new("a"), rt.join_new("b")
    rt.advance(0)
    errors, written = rt.commit(a, rt.responses[ha].generation_id, {("orders", 0): 1})
    assert errors == {("orders", 0): ErrorCode.rebalance_in_progress} and written == 0


def test_simple_commit_with_generation_minus_one_on_an_empty_group() -> None:
    rt = Runtime()
    errors, written = rt.commit("", -1, {("orders", 0): 100, ("orders", 1): 200}, group="simple")
    assert set(errors.values()) == {ErrorCode.none} and written == 2
    group = rt.shard.group("simple")
    assert group is not None and group.state is GroupState.EMPTY and not group.members
    assert rt.fetch("simple") == {("orders", 0): (100, ""), ("orders", 1): (200, "")}
    # Again, now that the group exists (still Empty).
    errors, written = rt.commit("", -1, {("orders", 0): 150}, group="simple")
    assert errors == {("orders", 0): ErrorCode.none} and written == 1
    assert rt.fetch("simple", {"orders": [0, 7]}) == {
        ("orders", 0): (150, ""),
        ("orders", 7): (-1, ""),
    }
    stored = rt.shard.group("simple").offsets[("orders", 0)]
    assert stored.commit_timestamp_ms == rt.now and stored.leader_epoch == 3


def test_oversized_offset_metadata_is_rejected_per_partition() -> None:
    rt = Runtime()
    request_errors, written = rt.commit(
        "", -1, {("orders", 0): 1}, metadata="x" * (CONFIG.offset_metadata_max_bytes + 1)
    )
    assert request_errors == {("orders", 0): ErrorCode.offset_metadata_too_large}
    assert written == 0
    ok, written = rt.commit(
        "", -1, {("orders", 0): 1}, metadata="x" * CONFIG.offset_metadata_max_bytes
    )
    assert ok == {("orders", 0): ErrorCode.none} and written == 1


def test_offsets_expire_after_retention_once_the_group_is_empty() -> None:
    config = GroupCoordinatorConfig(
        group_initial_rebalance_delay_ms=0,
        offsets_retention_minutes=1,
        offsets_retention_check_interval_ms=10_000,
    )
    rt = Runtime(config)
    rt.commit("", -1, {("orders", 0): 5}, group="simple")
    rt.advance(30_000)
    assert rt.fetch("simple") == {("orders", 0): (5, "")}
    rt.advance(40_000)
    assert rt.shard.group("simple") is None
    # Offset tombstone, then the group's tombstone.
    assert [value for _, value in rt.log[-2:]] == [None, None]
    assert rt.log[-1][0] == encode_key(GroupMetadataKey(group="simple"))


def test_offset_delete_refuses_topics_the_consumer_group_subscribes_to() -> None:
    rt = Runtime()
    (a, _b), generation = rt.stable_group("a", "b")  # both subscribe to "orders"
    rt.commit(a, generation, {("orders", 0): 1, ("legacy", 0): 2})
    request = OffsetDeleteRequest(
        group_id=GROUP,
        topics=(
            OffsetDeleteRequestTopic(
                name="orders", partitions=(OffsetDeleteRequestPartition(partition_index=0),)
            ),
            OffsetDeleteRequestTopic(
                name="legacy", partitions=(OffsetDeleteRequestPartition(partition_index=0),)
            ),
        ),
    )
    response = rt.apply(rt.shard.delete_offsets(ctx(0), request))
    encodes(response)
    assert response.error_code == ErrorCode.none
    assert {(t.name, p.error_code) for t in response.topics for p in t.partitions} == {
        ("orders", ErrorCode.group_subscribed_to_topic),
        ("legacy", ErrorCode.none),
    }
    assert rt.fetch() == {("orders", 0): (1, "")}
    missing = OffsetDeleteRequest(group_id="nope", topics=())
    assert (
        rt.apply(rt.shard.delete_offsets(ctx(0), missing)).error_code
        == ErrorCode.group_id_not_found
    )


def test_an_empty_group_whose_offsets_are_all_deleted_stays_until_expiration() -> None:
    """Kafka 4.3 keeps the group (kafka-consumer-groups --delete-offsets then --delete
    both succeed); the offset expiration check removes it later."""
    config = GroupCoordinatorConfig(
        group_initial_rebalance_delay_ms=0, offsets_retention_check_interval_ms=10_000
    )
    rt = Runtime(config)
    rt.commit("", -1, {("orders", 0): 5}, group="simple")
    request = OffsetDeleteRequest(
        group_id="simple",
        topics=(
            OffsetDeleteRequestTopic(
                name="orders", partitions=(OffsetDeleteRequestPartition(partition_index=0),)
            ),
        ),
    )
    assert rt.apply(rt.shard.delete_offsets(ctx(0), request)).error_code == ErrorCode.none
    assert rt.fetch("simple") == {}
    group = rt.shard.group("simple")
    assert group is not None and group.is_in(GroupState.EMPTY)
    assert rt.log[-1][1] is None and rt.log[-1][0] != encode_key(GroupMetadataKey(group="simple"))
    rt.advance(10_000)
    assert rt.shard.group("simple") is None
    assert rt.log[-1] == (encode_key(GroupMetadataKey(group="simple")), None)


# ========================================================== admin and lifecycle


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


def test_session_timers_are_rearmed_by_heartbeats() -> None:
    rt = Runtime()
    (a, _b), generation = rt.stable_group("a", "b")
    key = HeartbeatDeadline(GROUP, a)
    rt.advance(5_000)
    rt.heartbeat(a, generation)
    assert rt.timers[key] == rt.now + SESSION_MS


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


# ===================================================================== replay


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
    for key, value in rt.log:
        fresh.replay(key, value)
    result = fresh.on_loaded()
    assert snapshot(fresh) == expected
    # Loaded members must heartbeat to the new coordinator to stay.
    armed = {op.key for op in result.timers if isinstance(op, ScheduleTimer)}
    assert {HeartbeatDeadline(GROUP, a), HeartbeatDeadline(GROUP, b)} <= armed


def test_replay_skips_records_of_other_group_types() -> None:
    shard = GroupCoordinatorShard(CONFIG)
    shard.replay(struct.pack(">h", 3) + struct.pack(">h", 1) + b"g", b"\x00\x00")
    assert shard.group_ids() == []


@pytest.mark.parametrize("version", [3, 4, 5])
def test_describe_versions_do_not_hide_unknown_groups_as_errors(version: int) -> None:
    rt = Runtime()
    assert rt.shard.describe_group(ctx(version), "nope").error_code == ErrorCode.none
