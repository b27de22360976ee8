"""Drives the group coordinator shard without sockets, for the unit tests of its
managers (test_group_classic.py, test_group_offsets.py, test_group_shard.py).

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

from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.serial import entity_writer

from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.context import RequestContext
from plugins.coordinator.group import GroupState
from plugins.coordinator.records import (
    Record,
)
from plugins.coordinator.result import (
    CancelTimer,
    CoordinatorResult,
    ScheduleTimer,
    TimerKey,
)
from plugins.coordinator.shard import GroupCoordinatorShard

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
            dict(shard.offsets(group_id)),
        )
    return out
