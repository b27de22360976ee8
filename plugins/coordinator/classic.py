"""The classic group protocol of one ``__consumer_offsets`` partition (Kafka's
``GroupMetadataManager`` for classic groups): JoinGroup, SyncGroup, Heartbeat and
LeaveGroup, the rebalance timers (session, join and sync deadlines), and the group
admin views. It owns the partition's groups; their committed offsets are the offset
manager's, and the shard (``shard.py``) drives both.

Requests come in as kio entities of the newest version that names topics (JoinGroup v9,
SyncGroup v5, Heartbeat v4, LeaveGroup v5) and responses go out in those versions;
:func:`plugins.coordinator.versions.to_version` converts from and to the version on the
wire. Behaviour that depends on the request version reads
:attr:`RequestContext.api_version`. ``response`` is None when a request is parked
(JoinGroup waiting for the other members, SyncGroup waiting for the leader); its
response arrives later as a completion of some other call, under the ``reply_to``
handle the caller passed (hashable, not None, unique per request).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from datetime import timedelta

from kio.schema.describe_groups.v6.response import DescribedGroup
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.join_group.v9.request import JoinGroupRequest
from kio.schema.join_group.v9.response import JoinGroupResponse
from kio.schema.leave_group.v5.request import LeaveGroupRequest
from kio.schema.leave_group.v5.response import LeaveGroupResponse, MemberResponse
from kio.schema.list_groups.v5.response import ListGroupsResponse
from kio.schema.offset_commit.v9.request import OffsetCommitRequest
from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.schema.sync_group.v5.response import SyncGroupResponse

from plugins.coordinator.classic_views import (
    CLASSIC_GROUP_TYPE,
    UNKNOWN_MEMBER_ID,
    described_group,
    group_from_record,
    join_error,
    listed_groups,
    offset_commit_error,
    sync_error,
    txn_offset_commit_error,
)
from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.context import NO_THROTTLE, RequestContext, group_status_error
from plugins.coordinator.group import GroupMetadata, GroupState
from plugins.coordinator.rebalance import ClassicRebalance, Join
from plugins.coordinator.records import (
    GroupMetadataValue,
    group_metadata_record,
)
from plugins.coordinator.result import (
    CoordinatorResult,
    Effects,
    HeartbeatDeadline,
    JoinDeadline,
    SyncDeadline,
)

__all__ = ["CLASSIC_GROUP_TYPE", "UNKNOWN_MEMBER_ID", "ClassicGroupManager"]

log = logging.getLogger(__name__)



def _ms(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)


class ClassicGroupManager:
    """The classic groups of one ``__consumer_offsets`` partition."""

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        clock: Callable[[], int],
        is_loaded: Callable[[], bool],
    ) -> None:
        """``clock`` returns milliseconds since the epoch; ``is_loaded`` tells whether
        the shard has replayed its whole partition (the shard owns that state)."""
        self._config = config
        self._clock = clock
        self._is_loaded = is_loaded
        self._groups: dict[str, GroupMetadata] = {}
        self._rebalance = ClassicRebalance(config, clock)

    def group(self, group_id: str) -> GroupMetadata | None:
        """Read-only view for the offset manager, tests and metrics; mutate only through
        the operations."""
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def groups(self) -> list[GroupMetadata]:
        return list(self._groups.values())

    # ================================================================== loading

    def replay(self, group_id: str, value: GroupMetadataValue | None) -> None:
        """Apply a group metadata record (None: the group's tombstone)."""
        if value is None:
            self._groups.pop(group_id, None)
        else:
            self._load_group(group_id, value)

    def get_or_create_simple_group(self, group_id: str) -> GroupMetadata:
        """Offsets without group metadata: a simple consumer group (or one whose metadata
        was compacted away); Kafka keeps it as an Empty group."""
        group = self._groups.get(group_id)
        if group is None:
            group = GroupMetadata(group_id=group_id)
            self._groups[group_id] = group
        return group

    def _load_group(self, group_id: str, value: GroupMetadataValue) -> None:
        self._groups[group_id] = group_from_record(group_id, value)

    def on_loaded(self, fx: Effects) -> None:
        """Loaded members get a session timeout (they must heartbeat to this coordinator
        to stay); a group over group.max.size rebalances, as in Kafka."""
        for group in list(self._groups.values()):
            for member in group.members.values():
                fx.schedule(
                    HeartbeatDeadline(group.group_id, member.member_id), member.session_timeout_ms
                )
            if group.is_in(GroupState.STABLE) and len(group.members) > self._config.group_max_size:
                self._rebalance.prepare_rebalance(group, fx, "loaded group is over group.max.size")

    def on_unloaded(self, fx: Effects) -> None:
        """Answer every parked request with NOT_COORDINATOR (clients then find the new
        coordinator), cancel the groups' timers and forget them."""
        for group in self._groups.values():
            for member in group.members.values():
                if member.join_reply is not None:
                    fx.complete(
                        member.join_reply, join_error(member.member_id, ErrorCode.not_coordinator)
                    )
                if member.sync_reply is not None:
                    fx.complete(member.sync_reply, sync_error(ErrorCode.not_coordinator))
                member.join_reply = member.sync_reply = None
                fx.cancel(HeartbeatDeadline(group.group_id, member.member_id))
            for member_id in group.pending_members:
                fx.cancel(HeartbeatDeadline(group.group_id, member_id))
            fx.cancel(JoinDeadline(group.group_id))
            fx.cancel(SyncDeadline(group.group_id, group.generation_id))
            group.state = GroupState.DEAD
        self._groups.clear()

    # =================================================================== timers

    def on_session_timeout(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        """No heartbeat from the member (or no rejoin from a pending member, or a new
        member's JoinGroup parked too long): remove it, which may start a rebalance."""
        fx = Effects()
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return fx.result()
        if member_id in group.pending_members:
            group.remove(member_id)
            self._rebalance.maybe_complete_join(group, fx)
        elif (
            member := group.members.get(member_id)
        ) is not None and not member.has_satisfied_heartbeat():
            log.info("member %s of group %s failed its session timeout", member_id, group_id)
            self._rebalance.remove_member_and_update_group(
                group, member, fx, f"member {member_id} session timed out"
            )
        return fx.result()

    def on_join_deadline(self, group_id: str) -> CoordinatorResult[None]:
        """The join phase is over: form the next generation from whoever rejoined."""
        fx = Effects()
        group = self._groups.get(group_id)
        if group is None or not group.is_in(GroupState.PREPARING_REBALANCE):
            return fx.result()
        if group.initial_join_delay_ms is not None:
            remaining = group.initial_join_remaining_ms
            if group.new_member_added and remaining != 0:
                # More members arrived during the initial delay: wait another step,
                # never beyond the rebalance timeout.
                group.new_member_added = False
                delay = min(self._config.group_initial_rebalance_delay_ms, remaining)
                group.initial_join_remaining_ms = max(remaining - group.initial_join_delay_ms, 0)
                group.initial_join_delay_ms = delay
                fx.schedule(JoinDeadline(group_id), delay)
                return fx.result()
        self._rebalance.complete_join(group, fx)
        return fx.result()

    def on_sync_deadline(self, group_id: str, generation_id: int) -> CoordinatorResult[None]:
        """Members that did not send SyncGroup for this generation in time are removed
        and the group rebalances without them."""
        fx = Effects()
        group = self._groups.get(group_id)
        if (
            group is None
            or group.generation_id != generation_id
            or not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            or not group.pending_sync_members
        ):
            return fx.result()
        missing = sorted(group.pending_sync_members)
        for member_id in missing:
            member = group.remove(member_id)
            if member is not None:
                self._rebalance.answer_removed_member(member, fx)
            fx.cancel(HeartbeatDeadline(group_id, member_id))
        self._rebalance.prepare_rebalance(group, fx, f"members {missing} sent no SyncGroup in time")
        return fx.result()

    # ================================================================ JoinGroup

    def join_group(
        self, ctx: RequestContext, request: JoinGroupRequest, reply_to: Hashable
    ) -> CoordinatorResult[JoinGroupResponse]:
        fx = Effects()
        error = self._status_error(request.group_id)
        if error is not None:
            fx.complete(reply_to, join_error(request.member_id, error))
            return fx.result_for(reply_to)
        session_timeout_ms = _ms(request.session_timeout)
        rebalance_timeout_ms = _ms(request.rebalance_timeout)
        if rebalance_timeout_ms < 0:
            # JoinGroup v0 has no rebalance timeout; Kafka uses the session timeout.
            rebalance_timeout_ms = session_timeout_ms
        if not (
            self._config.group_min_session_timeout_ms
            <= session_timeout_ms
            <= self._config.group_max_session_timeout_ms
        ):
            fx.complete(reply_to, join_error(request.member_id, ErrorCode.invalid_session_timeout))
            return fx.result_for(reply_to)

        join = Join(
            ctx=ctx,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            reply_to=reply_to,
            reason=request.reason or "not provided",
        )
        is_unknown_member = join.member_id == UNKNOWN_MEMBER_ID
        group = self._groups.get(request.group_id)
        if group is None:
            # Only a member without an id may create a group; a member id for a group
            # we do not know is stale.
            if not is_unknown_member:
                fx.complete(reply_to, join_error(join.member_id, ErrorCode.unknown_member_id))
                return fx.result_for(reply_to)
            group = GroupMetadata(
                group_id=request.group_id, current_state_timestamp_ms=self._clock()
            )
            self._groups[group.group_id] = group

        if not self._rebalance.accept_joining_member(group, join.member_id):
            removed = group.remove(join.member_id)
            if removed is not None:
                self._rebalance.answer_removed_member(removed, fx)
                fx.cancel(HeartbeatDeadline(group.group_id, removed.member_id))
            fx.complete(reply_to, join_error(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown_member:
            self._rebalance.new_member_join(group, join, fx)
        else:
            self._rebalance.current_member_join(group, join, fx)

        self._rebalance.maybe_complete_join(group, fx)
        return fx.result_for(reply_to)

    # ================================================================ SyncGroup

    def sync_group(
        self, ctx: RequestContext, request: SyncGroupRequest, reply_to: Hashable
    ) -> CoordinatorResult[SyncGroupResponse]:
        fx = Effects()
        error = self._status_error(request.group_id)
        if error is ErrorCode.coordinator_load_in_progress:
            # The rebalance state was lost with the old coordinator; REBALANCE_IN_PROGRESS
            # makes the member rejoin, and old clients do not expect load-in-progress here.
            error = ErrorCode.rebalance_in_progress
        group = self._groups.get(request.group_id)
        if error is None:
            error = self._rebalance.validate_sync(group, request)
        if error is not None:
            fx.complete(reply_to, sync_error(error))
            return fx.result_for(reply_to)
        assert group is not None
        member = group.members[request.member_id]
        match group.state:
            case GroupState.EMPTY:
                fx.complete(reply_to, sync_error(ErrorCode.unknown_member_id))
            case GroupState.PREPARING_REBALANCE:
                fx.complete(reply_to, sync_error(ErrorCode.rebalance_in_progress))
            case GroupState.COMPLETING_REBALANCE:
                if member.sync_reply is not None and member.sync_reply != reply_to:
                    fx.complete(member.sync_reply, sync_error(ErrorCode.rebalance_in_progress))
                member.sync_reply = reply_to
                self._rebalance.remove_pending_sync_member(group, member.member_id, fx)
                if group.is_leader(member.member_id):
                    self._rebalance.complete_sync(group, request, fx)
            case GroupState.STABLE:
                self._rebalance.remove_pending_sync_member(group, member.member_id, fx)
                fx.complete(
                    reply_to,
                    SyncGroupResponse(
                        throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.none,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        assignment=member.assignment,
                    ),
                )
                fx.schedule(
                    HeartbeatDeadline(group.group_id, member.member_id), member.session_timeout_ms
                )
            case GroupState.DEAD:
                fx.complete(reply_to, sync_error(ErrorCode.coordinator_not_available))
        return fx.result_for(reply_to)

    # ================================================================ Heartbeat

    def heartbeat(
        self, ctx: RequestContext, request: HeartbeatRequest
    ) -> CoordinatorResult[HeartbeatResponse]:
        fx = Effects()
        error = self._status_error(request.group_id)
        if error is ErrorCode.coordinator_load_in_progress:
            # Kafka answers blindly while loading; the member's state is coming back.
            error = ErrorCode.none
        elif error is None:
            error = self._heartbeat(request, fx)
        return fx.result(HeartbeatResponse(throttle_time=NO_THROTTLE, error_code=error))

    def _heartbeat(self, request: HeartbeatRequest, fx: Effects) -> ErrorCode:
        group = self._groups.get(request.group_id)
        error = self._rebalance.validate_generation_member(
            group, request.member_id, request.group_instance_id, request.generation_id
        )
        if error is not None:
            return error
        assert group is not None  # the checks above answer a missing group
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.members[request.member_id]
        fx.schedule(HeartbeatDeadline(group.group_id, member.member_id), member.session_timeout_ms)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # =============================================================== LeaveGroup

    def leave_group(
        self, ctx: RequestContext, request: LeaveGroupRequest
    ) -> CoordinatorResult[LeaveGroupResponse]:
        """Batch leave (v3+). For v0-v2 build a one-member request and answer with that
        member's error as the top-level error."""
        fx = Effects()
        error = self._status_error(request.group_id)
        group = self._groups.get(request.group_id)
        if error is None and group is not None and group.is_in(GroupState.DEAD):
            error = ErrorCode.coordinator_not_available
        if error is not None:
            return fx.result(
                LeaveGroupResponse(throttle_time=NO_THROTTLE, error_code=error, members=())
            )
        members = []
        for identity in request.members:
            if group is None:
                member_error = ErrorCode.unknown_member_id
            else:
                member_error = self._rebalance.leave(
                    group, identity.member_id, identity.group_instance_id, identity.reason, fx
                )
            members.append(
                MemberResponse(
                    member_id=identity.member_id,
                    group_instance_id=identity.group_instance_id,
                    error_code=member_error,
                )
            )
        return fx.result(
            LeaveGroupResponse(
                throttle_time=NO_THROTTLE, error_code=ErrorCode.none, members=tuple(members)
            )
        )

    # ====================================================== for the offset manager

    def validate_offset_commit(
        self, ctx: RequestContext, group: GroupMetadata | None, request: OffsetCommitRequest
    ) -> ErrorCode | None:
        """Whether the group accepts the commit (Kafka's ClassicGroup.validateOffsetCommit)."""
        return offset_commit_error(ctx.api_version, group, request)

    def validate_txn_offset_commit(
        self, group: GroupMetadata | None, member_id: str, group_instance_id: str | None,
        generation_id: int,
    ) -> ErrorCode | None:
        """Whether the group accepts a transactional commit (Kafka's
        validateTransactionalOffsetCommit)."""
        return txn_offset_commit_error(group, member_id, group_instance_id, generation_id)

    def reschedule_heartbeat(self, group: GroupMetadata, member_id: str, fx: Effects) -> None:
        """A commit proves the member is alive; during PreparingRebalance it is still
        allowed, the heartbeat response tells the member to rejoin."""
        member = group.members.get(member_id)
        if member is not None and group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            fx.schedule(
                HeartbeatDeadline(group.group_id, member.member_id), member.session_timeout_ms
            )

    # ============================================================ group deletion

    def validate_delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups removes only Empty groups."""
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_in(GroupState.EMPTY):
            return ErrorCode.non_empty_group
        return ErrorCode.none

    def can_expire(self, group: GroupMetadata) -> bool:
        """An Empty group whose offsets all expired goes; one still handing out member
        ids (KIP-394) is about to be joined."""
        return group.is_in(GroupState.EMPTY) and not group.pending_members

    def delete_group(self, group_id: str, fx: Effects) -> None:
        """The group is Dead from now on; its tombstone removes it at replay."""
        group = self._groups.get(group_id)
        if group is not None:
            group.transition_to(GroupState.DEAD, self._clock())
        fx.records.append(group_metadata_record(group_id, None))

    # ================================================================ admin APIs

    def list_groups(
        self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
    ) -> ListGroupsResponse:
        """This shard's part of ListGroups; the handler merges the shards' answers."""
        if not self._is_loaded():
            return ListGroupsResponse(
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.coordinator_load_in_progress,
                groups=(),
            )
        return ListGroupsResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
            groups=listed_groups(self._groups.values(), states_filter, types_filter),
        )

    def describe_group(self, ctx: RequestContext, group_id: str) -> DescribedGroup:
        """One group of DescribeGroups. The handler fills in authorized_operations."""
        if not self._is_loaded():
            return DescribedGroup(
                error_code=ErrorCode.coordinator_load_in_progress,
                group_id=group_id,
                group_state="",
                protocol_type="",
                protocol_data="",
                members=(),
            )
        return described_group(ctx.api_version, group_id, self._groups.get(group_id))

    # ================================================================== helpers

    def _status_error(self, group_id: str) -> ErrorCode | None:
        return group_status_error(group_id, loaded=self._is_loaded(), allow_empty_group_id=False)
