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

import dataclasses
import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from kio.schema.describe_groups.v6.response import DescribedGroup, DescribedGroupMember
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.join_group.v9.request import JoinGroupRequest
from kio.schema.join_group.v9.response import JoinGroupResponse, JoinGroupResponseMember
from kio.schema.leave_group.v5.request import LeaveGroupRequest
from kio.schema.leave_group.v5.response import LeaveGroupResponse, MemberResponse
from kio.schema.list_groups.v5.response import ListedGroup, ListGroupsResponse
from kio.schema.offset_commit.v9.request import OffsetCommitRequest
from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.schema.sync_group.v5.response import SyncGroupResponse

from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.context import NO_THROTTLE, RequestContext, group_status_error
from plugins.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from plugins.coordinator.records import (
    GroupMemberMetadata,
    GroupMetadataValue,
    Record,
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

UNKNOWN_MEMBER_ID = ""
CLASSIC_GROUP_TYPE = "classic"


@dataclass(frozen=True, slots=True)
class _Join:
    """One JoinGroup, with its timeouts already in milliseconds."""

    ctx: RequestContext
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    reply_to: Hashable
    reason: str


def _ms(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)


def _join_error(member_id: str, error: ErrorCode) -> JoinGroupResponse:
    return JoinGroupResponse(
        throttle_time=NO_THROTTLE,
        error_code=error,
        generation_id=-1,
        protocol_type=None,
        protocol_name=None,
        leader="",
        member_id=member_id,
        members=(),
    )


def _sync_error(error: ErrorCode) -> SyncGroupResponse:
    return SyncGroupResponse(throttle_time=NO_THROTTLE, error_code=error, assignment=b"")


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
        protocol = value.protocol or ""
        group = GroupMetadata(
            group_id=group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            current_state_timestamp_ms=(
                None if value.current_state_timestamp < 0 else value.current_state_timestamp
            ),
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            generation_id=value.generation,
            leader_id=value.leader,
        )
        for m in value.members:
            group.members[m.member_id] = MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                supported_protocols=[(protocol, m.subscription)],
                assignment=m.assignment,
            )
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.subscribed_topics = group.compute_subscribed_topics()
        self._groups[group_id] = group

    def on_loaded(self, fx: Effects) -> None:
        """Loaded members get a session timeout (they must heartbeat to this coordinator
        to stay); a group over group.max.size rebalances, as in Kafka."""
        for group in list(self._groups.values()):
            for member in group.members.values():
                fx.schedule(
                    HeartbeatDeadline(group.group_id, member.member_id), member.session_timeout_ms
                )
            if group.is_in(GroupState.STABLE) and len(group.members) > self._config.group_max_size:
                self._prepare_rebalance(group, fx, "loaded group is over group.max.size")

    def on_unloaded(self, fx: Effects) -> None:
        """Answer every parked request with NOT_COORDINATOR (clients then find the new
        coordinator), cancel the groups' timers and forget them."""
        for group in self._groups.values():
            for member in group.members.values():
                if member.join_reply is not None:
                    fx.complete(
                        member.join_reply, _join_error(member.member_id, ErrorCode.not_coordinator)
                    )
                if member.sync_reply is not None:
                    fx.complete(member.sync_reply, _sync_error(ErrorCode.not_coordinator))
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
            self._maybe_complete_join(group, fx)
        elif (
            member := group.members.get(member_id)
        ) is not None and not member.has_satisfied_heartbeat():
            log.info("member %s of group %s failed its session timeout", member_id, group_id)
            self._remove_member_and_update_group(
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
        self._complete_join(group, fx)
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
                self._answer_removed_member(member, fx)
            fx.cancel(HeartbeatDeadline(group_id, member_id))
        self._prepare_rebalance(group, fx, f"members {missing} sent no SyncGroup in time")
        return fx.result()

    # ================================================================ JoinGroup

    def join_group(
        self, ctx: RequestContext, request: JoinGroupRequest, reply_to: Hashable
    ) -> CoordinatorResult[JoinGroupResponse]:
        fx = Effects()
        error = self._status_error(request.group_id)
        if error is not None:
            fx.complete(reply_to, _join_error(request.member_id, error))
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
            fx.complete(reply_to, _join_error(request.member_id, ErrorCode.invalid_session_timeout))
            return fx.result_for(reply_to)

        join = _Join(
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
                fx.complete(reply_to, _join_error(join.member_id, ErrorCode.unknown_member_id))
                return fx.result_for(reply_to)
            group = GroupMetadata(
                group_id=request.group_id, current_state_timestamp_ms=self._clock()
            )
            self._groups[group.group_id] = group

        if not self._accept_joining_member(group, join.member_id):
            removed = group.remove(join.member_id)
            if removed is not None:
                self._answer_removed_member(removed, fx)
                fx.cancel(HeartbeatDeadline(group.group_id, removed.member_id))
            fx.complete(reply_to, _join_error(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown_member:
            self._new_member_join(group, join, fx)
        else:
            self._current_member_join(group, join, fx)

        self._maybe_complete_join(group, fx)
        return fx.result_for(reply_to)

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        max_size = self._config.group_max_size
        match group.state:
            case GroupState.EMPTY | GroupState.DEAD:
                return True
            case GroupState.PREPARING_REBALANCE:
                # Counting members that already rejoined (not the group size) lets a
                # lowered group.max.size shed the members that rejoin last.
                member = group.members.get(member_id)
                return (
                    member is not None and member.is_awaiting_join
                ) or group.awaiting_join_count() < max_size
            case _:
                return member_id in group.members or len(group.members) < max_size

    def _new_member_join(self, group: GroupMetadata, join: _Join, fx: Effects) -> None:
        if group.is_in(GroupState.DEAD):
            fx.complete(
                join.reply_to, _join_error(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available)
            )
            return
        if not group.supports_protocols(join.protocol_type, (p for p, _ in join.protocols)):
            fx.complete(
                join.reply_to, _join_error(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol)
            )
            return
        new_member_id = group.generate_member_id(join.ctx.client_id, join.group_instance_id)
        if join.group_instance_id is not None:
            old_member_id = group.static_members.get(join.group_instance_id)
            if old_member_id is not None:
                self._update_static_member_and_rebalance(
                    group, old_member_id, new_member_id, join, fx
                )
            else:
                self._add_member_and_rebalance(group, new_member_id, join, fx)
        elif join.ctx.api_version >= 4:
            # KIP-394: hand out the id first, so a client that times out and retries
            # does not leave a member behind for every attempt.
            group.pending_members.add(new_member_id)
            fx.schedule(HeartbeatDeadline(group.group_id, new_member_id), join.session_timeout_ms)
            fx.complete(join.reply_to, _join_error(new_member_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(group, new_member_id, join, fx)

    def _current_member_join(self, group: GroupMetadata, join: _Join, fx: Effects) -> None:
        member_id = join.member_id
        if group.is_in(GroupState.DEAD):
            fx.complete(join.reply_to, _join_error(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(join.protocol_type, (p for p, _ in join.protocols)):
            fx.complete(
                join.reply_to, _join_error(member_id, ErrorCode.inconsistent_group_protocol)
            )
            return
        if member_id in group.pending_members:
            if join.group_instance_id is not None:
                # Pending ids are only handed to dynamic members.
                fx.complete(join.reply_to, _join_error(member_id, ErrorCode.unknown_member_id))
                return
            self._add_member_and_rebalance(group, member_id, join, fx)
            return
        error = self._validate_current_member(group, member_id, join.group_instance_id)
        if error is not None:
            fx.complete(join.reply_to, _join_error(member_id, error))
            return
        member = group.members[member_id]
        match group.state:
            case GroupState.PREPARING_REBALANCE:
                self._update_member_and_rebalance(group, member, join, fx)
            case GroupState.COMPLETING_REBALANCE:
                if member.matches(join.protocols):
                    # Probably lost its JoinGroup response: send this generation again.
                    fx.complete(join.reply_to, self._join_response(group, member_id))
                else:
                    self._update_member_and_rebalance(group, member, join, fx)
            case GroupState.STABLE:
                if group.is_leader(member_id) or not member.matches(join.protocols):
                    # A leader rejoin forces a rebalance: that is how a consumer leader
                    # reacts to metadata changes that do not change any subscription.
                    self._update_member_and_rebalance(group, member, join, fx)
                else:
                    fx.complete(
                        join.reply_to, self._join_response(group, member_id, with_members=False)
                    )
            case _:
                fx.complete(join.reply_to, _join_error(member_id, ErrorCode.unknown_member_id))

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, join: _Join, fx: Effects
    ) -> None:
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=join.group_instance_id,
            client_id=join.ctx.client_id,
            client_host=join.ctx.client_host,
            rebalance_timeout_ms=join.rebalance_timeout_ms,
            session_timeout_ms=join.session_timeout_ms,
            protocol_type=join.protocol_type,
            supported_protocols=join.protocols,
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, join.reply_to)
        # A new member cannot heartbeat (its id is not known to it yet) and its socket
        # is muted while the JoinGroup is parked; bound how long it may stay parked.
        fx.schedule(
            HeartbeatDeadline(group.group_id, member_id), self._config.new_member_join_timeout_ms
        )
        self._maybe_prepare_rebalance(
            group, fx, f"adding new member {member_id}; client reason: {join.reason}"
        )

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, join: _Join, fx: Effects
    ) -> None:
        superseded = group.update_member(
            member,
            join.protocols,
            join.rebalance_timeout_ms,
            join.session_timeout_ms,
            join.reply_to,
        )
        if superseded is not None and superseded != join.reply_to:
            fx.complete(superseded, _join_error(member.member_id, ErrorCode.rebalance_in_progress))
        self._maybe_prepare_rebalance(
            group,
            fx,
            f"member {member.member_id} rejoined in {group.state.value}; client reason: "
            f"{join.reason}",
        )

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        join: _Join,
        fx: Effects,
    ) -> None:
        """A known group.instance.id joined without its member id (it restarted): it
        takes over under a new member id and the old id is fenced."""
        assert join.group_instance_id is not None
        current_leader = group.leader_id
        member, fenced_join, fenced_sync = group.replace_static_member(
            join.group_instance_id, old_member_id, new_member_id
        )
        if fenced_join is not None:
            fx.complete(fenced_join, _join_error(old_member_id, ErrorCode.fenced_instance_id))
        if fenced_sync is not None:
            fx.complete(fenced_sync, _sync_error(ErrorCode.fenced_instance_id))
        fx.cancel(HeartbeatDeadline(group.group_id, old_member_id))
        fx.schedule(HeartbeatDeadline(group.group_id, new_member_id), join.session_timeout_ms)
        group.update_member(
            member,
            join.protocols,
            join.rebalance_timeout_ms,
            join.session_timeout_ms,
            join.reply_to,
        )
        match group.state:
            case GroupState.STABLE:
                if group.protocol_name != group.select_protocol():
                    self._maybe_prepare_rebalance(
                        group,
                        fx,
                        f"static member {join.group_instance_id} rejoined with protocols "
                        f"that change the group's protocol",
                    )
                    return
                # Nothing changes for the others: persist the new member id, no rebalance.
                fx.records.append(
                    self._group_metadata_record(
                        group, {m.member_id: m.assignment for m in group.members.values()}
                    )
                )
                member.join_reply = None
                if join.ctx.api_version >= 9:
                    # KIP-814: a static leader learns it leads but must not reassign, as
                    # a Stable group would not distribute a new assignment.
                    is_leader = group.is_leader(new_member_id)
                    response = self._join_response(group, new_member_id, with_members=is_leader)
                    response = dataclasses.replace(response, skip_assignment=is_leader)
                else:
                    # Older clients: name the old leader id, so a restarted leader does not
                    # believe it leads and computes an assignment nobody would receive.
                    response = dataclasses.replace(
                        self._join_response(group, new_member_id, with_members=False),
                        leader=current_leader or "",
                    )
                fx.complete(join.reply_to, response)
            case GroupState.COMPLETING_REBALANCE:
                # The leader may already be assigning to the old member id; start over.
                self._prepare_rebalance(
                    group, fx, f"static member {join.group_instance_id} rejoined"
                )
            case GroupState.PREPARING_REBALANCE:
                pass
            case _:
                raise AssertionError(f"known static member in a {group.state.value} group")

    def _maybe_prepare_rebalance(self, group: GroupMetadata, fx: Effects, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, fx, reason)

    def _prepare_rebalance(self, group: GroupMetadata, fx: Effects, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # Members waiting in SyncGroup must rejoin instead.
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress, fx)
        self._remove_sync_expiration(group, fx)
        was_empty = group.is_in(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self._clock())
        log.info(
            "preparing to rebalance group %s with old generation %d: %s",
            group.group_id,
            group.generation_id,
            reason,
        )
        if was_empty:
            delay = self._config.group_initial_rebalance_delay_ms
            group.new_member_added = False
            group.initial_join_delay_ms = delay
            group.initial_join_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            fx.schedule(JoinDeadline(group.group_id), delay)
        else:
            group.initial_join_delay_ms = None
            fx.schedule(JoinDeadline(group.group_id), group.rebalance_timeout_ms())
            self._maybe_complete_join(group, fx)

    def _maybe_complete_join(self, group: GroupMetadata, fx: Effects) -> None:
        # The initial delay waits its full time on purpose: more members may be coming.
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and group.initial_join_delay_ms is None
            and group.has_all_members_joined()
        ):
            self._complete_join(group, fx)

    def _complete_join(self, group: GroupMetadata, fx: Effects) -> None:
        fx.cancel(JoinDeadline(group.group_id))
        group.initial_join_delay_ms = None
        group.new_member_added = False
        for member in group.not_yet_rejoined_members():
            # Static members keep their place: they may come back with the same id.
            if not member.is_static:
                group.remove(member.member_id)
                self._answer_removed_member(member, fx)
                fx.cancel(HeartbeatDeadline(group.group_id, member.member_id))
        if group.members and not group.maybe_elect_new_joined_leader():
            # Nobody rejoined: wait again until session timeouts clear the group out.
            log.warning("group %s could not rebalance: no member rejoined", group.group_id)
            fx.schedule(JoinDeadline(group.group_id), group.rebalance_timeout_ms())
            return
        now = self._clock()
        group.init_next_generation(now)
        if group.is_in(GroupState.EMPTY):
            log.info(
                "group %s with generation %d is now empty", group.group_id, group.generation_id
            )
            fx.records.append(self._group_metadata_record(group, {}))
            return
        log.info(
            "stabilized group %s generation %d with %d members",
            group.group_id,
            group.generation_id,
            len(group.members),
        )
        for member in group.members.values():
            if member.join_reply is not None:
                reply, member.join_reply = member.join_reply, None
                fx.complete(
                    reply,
                    self._join_response(
                        group, member.member_id, with_members=group.is_leader(member.member_id)
                    ),
                )
            fx.schedule(
                HeartbeatDeadline(group.group_id, member.member_id), member.session_timeout_ms
            )
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        fx.schedule(SyncDeadline(group.group_id, group.generation_id), group.rebalance_timeout_ms())

    def _join_response(
        self, group: GroupMetadata, member_id: str, *, with_members: bool | None = None
    ) -> JoinGroupResponse:
        if with_members is None:
            with_members = group.is_leader(member_id)
        members: tuple[JoinGroupResponseMember, ...] = ()
        if with_members and group.protocol_name is not None:
            members = tuple(
                JoinGroupResponseMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata(group.protocol_name),
                )
                for m in group.members.values()
            )
        return JoinGroupResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=False,
            member_id=member_id,
            members=members,
        )

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
            error = self._validate_sync(group, request)
        if error is not None:
            fx.complete(reply_to, _sync_error(error))
            return fx.result_for(reply_to)
        assert group is not None
        member = group.members[request.member_id]
        match group.state:
            case GroupState.EMPTY:
                fx.complete(reply_to, _sync_error(ErrorCode.unknown_member_id))
            case GroupState.PREPARING_REBALANCE:
                fx.complete(reply_to, _sync_error(ErrorCode.rebalance_in_progress))
            case GroupState.COMPLETING_REBALANCE:
                if member.sync_reply is not None and member.sync_reply != reply_to:
                    fx.complete(member.sync_reply, _sync_error(ErrorCode.rebalance_in_progress))
                member.sync_reply = reply_to
                self._remove_pending_sync_member(group, member.member_id, fx)
                if group.is_leader(member.member_id):
                    self._complete_sync(group, request, fx)
            case GroupState.STABLE:
                self._remove_pending_sync_member(group, member.member_id, fx)
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
                fx.complete(reply_to, _sync_error(ErrorCode.coordinator_not_available))
        return fx.result_for(reply_to)

    def _validate_sync(
        self, group: GroupMetadata | None, request: SyncGroupRequest
    ) -> ErrorCode | None:
        error = self._validate_generation_member(
            group, request.member_id, request.group_instance_id, request.generation_id
        )
        if error is not None:
            return error
        assert group is not None  # the checks above answer a missing group
        if request.protocol_type is not None and request.protocol_type != group.protocol_type:
            return ErrorCode.inconsistent_group_protocol
        if request.protocol_name is not None and request.protocol_name != group.protocol_name:
            return ErrorCode.inconsistent_group_protocol
        return None

    def _validate_generation_member(
        self, group: GroupMetadata | None, member_id: str, group_instance_id: str | None,
        generation_id: int,
    ) -> ErrorCode | None:
        """What SyncGroup and Heartbeat check first, in Kafka's order: the group exists
        and lives, the member is current, and it is of this generation."""
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        return None

    def _complete_sync(self, group: GroupMetadata, request: SyncGroupRequest, fx: Effects) -> None:
        """The leader's assignment: persist it, hand every member its part, go Stable."""
        given = {a.member_id: a.assignment for a in request.assignments}
        missing = [m for m in group.members if m not in given]
        if missing:
            log.warning(
                "group %s generation %d: empty assignment for members %s",
                group.group_id,
                group.generation_id,
                missing,
            )
        assignment = {m: given.get(m, b"") for m in group.members}
        fx.records.append(self._group_metadata_record(group, assignment))
        for member_id, member in group.members.items():
            member.assignment = assignment[member_id]
        self._propagate_assignment(group, ErrorCode.none, fx)
        group.transition_to(GroupState.STABLE, self._clock())

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode, fx: Effects) -> None:
        ok = error is ErrorCode.none
        for member in group.members.values():
            if member.sync_reply is None:
                continue
            reply, member.sync_reply = member.sync_reply, None
            fx.complete(
                reply,
                SyncGroupResponse(
                    throttle_time=NO_THROTTLE,
                    error_code=error,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment,
                ),
            )
            # Its session clock restarts now: a member parked in SyncGroup could not
            # heartbeat meanwhile.
            fx.schedule(
                HeartbeatDeadline(group.group_id, member.member_id), member.session_timeout_ms
            )

    def _reset_and_propagate_assignment_error(
        self, group: GroupMetadata, error: ErrorCode, fx: Effects
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error, fx)

    def _remove_pending_sync_member(
        self, group: GroupMetadata, member_id: str, fx: Effects
    ) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            fx.cancel(SyncDeadline(group.group_id, group.generation_id))

    def _remove_sync_expiration(self, group: GroupMetadata, fx: Effects) -> None:
        group.pending_sync_members.clear()
        fx.cancel(SyncDeadline(group.group_id, group.generation_id))

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
        error = self._validate_generation_member(
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
                member_error = self._leave(
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

    def _leave(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        reason: str | None,
        fx: Effects,
    ) -> ErrorCode:
        why = f"member left; client reason: {reason or 'not provided'}"
        if member_id == UNKNOWN_MEMBER_ID:
            # Admin removal of a static member by group.instance.id alone.
            current = (
                group.static_members.get(group_instance_id)
                if group_instance_id is not None
                else None
            )
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_member_and_update_group(group, group.members[current], fx, why)
            return ErrorCode.none
        if member_id in group.pending_members:
            group.remove(member_id)
            fx.cancel(HeartbeatDeadline(group.group_id, member_id))
            self._maybe_complete_join(group, fx)
            return ErrorCode.none
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        self._remove_member_and_update_group(group, group.members[member_id], fx, why)
        return ErrorCode.none

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, fx: Effects, reason: str
    ) -> None:
        self._answer_removed_member(member, fx)
        group.remove(member.member_id)
        fx.cancel(HeartbeatDeadline(group.group_id, member.member_id))
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, fx, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, fx)

    def _answer_removed_member(self, member: MemberMetadata, fx: Effects) -> None:
        """A removed member's parked requests get UNKNOWN_MEMBER_ID: if it is still
        alive it rejoins from scratch."""
        if member.join_reply is not None:
            fx.complete(
                member.join_reply, _join_error(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id)
            )
        if member.sync_reply is not None:
            fx.complete(member.sync_reply, _sync_error(ErrorCode.unknown_member_id))
        member.join_reply = member.sync_reply = None

    # ====================================================== for the offset manager

    def validate_offset_commit(
        self, ctx: RequestContext, group: GroupMetadata | None, request: OffsetCommitRequest
    ) -> ErrorCode | None:
        """Whether the group accepts the commit (Kafka's ClassicGroup.validateOffsetCommit)."""
        generation = request.generation_id_or_member_epoch
        if group is None:
            if generation < 0:
                # A simple consumer or the admin client, not using group management: the
                # group comes into being with its first offsets (see offsets.py).
                return None
            # v9+ tells the client the group is gone; older clients expect this instead.
            return (
                ErrorCode.group_id_not_found
                if ctx.api_version >= 9
                else ErrorCode.illegal_generation
            )
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation < 0 and group.is_in(GroupState.EMPTY):
            return None
        if (
            generation >= 0
            or request.member_id != UNKNOWN_MEMBER_ID
            or request.group_instance_id is not None
        ):
            error = self._validate_current_member(
                group, request.member_id, request.group_instance_id
            )
            if error is not None:
                return error
            if generation != group.generation_id:
                return ErrorCode.illegal_generation
        elif not group.is_in(GroupState.EMPTY):
            # Without member id and generation, only a group without members accepts.
            return ErrorCode.unknown_member_id
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # The member has this generation but no assignment yet; it will retry.
            return ErrorCode.rebalance_in_progress
        return None

    def validate_txn_offset_commit(
        self, group: GroupMetadata | None, member_id: str, group_instance_id: str | None,
        generation_id: int,
    ) -> ErrorCode | None:
        """Whether the group accepts a transactional commit (Kafka's
        validateTransactionalOffsetCommit): unlike OffsetCommit, the group's state is not
        enforced and a request without member and generation (v0-2) is accepted."""
        if group is None:
            # A simple group comes into being with the offsets; a generation names a group
            # that should exist.
            return None if generation_id < 0 else ErrorCode.illegal_generation
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        return None

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
        """This shard's part of ListGroups; the handler merges the shards' answers.
        Filters compare case-insensitively; an empty filter matches everything."""
        if not self._is_loaded():
            return ListGroupsResponse(
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.coordinator_load_in_progress,
                groups=(),
            )
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        listed = []
        if not types or CLASSIC_GROUP_TYPE in types:
            for group in self._groups.values():
                if group.is_in(GroupState.DEAD):
                    continue
                if states and group.state.value.lower() not in states:
                    continue
                listed.append(
                    ListedGroup(
                        group_id=group.group_id,
                        protocol_type=group.protocol_type or "",
                        group_state=group.state.value,
                        group_type=CLASSIC_GROUP_TYPE,
                    )
                )
        return ListGroupsResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(listed)
        )

    def describe_group(self, ctx: RequestContext, group_id: str) -> DescribedGroup:
        """One group of DescribeGroups. Member metadata and assignments are shown only
        when Stable, as in Kafka. The handler fills in authorized_operations."""
        if not self._is_loaded():
            return DescribedGroup(
                error_code=ErrorCode.coordinator_load_in_progress,
                group_id=group_id,
                group_state="",
                protocol_type="",
                protocol_data="",
                members=(),
            )
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            # v6 (KIP-1043) says so; older versions describe a Dead group without error.
            missing = ctx.api_version >= 6
            return DescribedGroup(
                error_code=ErrorCode.group_id_not_found if missing else ErrorCode.none,
                error_message=f"Group {group_id} not found." if missing else None,
                group_id=group_id,
                group_state=GroupState.DEAD.value,
                protocol_type="",
                protocol_data="",
                members=(),
            )
        stable = group.is_in(GroupState.STABLE) and group.protocol_name is not None
        members = tuple(
            DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=(
                    m.metadata(group.protocol_name)
                    if stable and group.protocol_name is not None
                    else b""
                ),
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            error_code=ErrorCode.none,
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=members,
        )

    # ================================================================== helpers

    def _status_error(self, group_id: str) -> ErrorCode | None:
        return group_status_error(group_id, loaded=self._is_loaded(), allow_empty_group_id=False)

    @staticmethod
    def _validate_current_member(
        group: GroupMetadata, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                # Another process took over this group.instance.id: this one is a zombie.
                return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        return None

    def _group_metadata_record(self, group: GroupMetadata, assignment: dict[str, bytes]) -> Record:
        protocol = group.protocol_name
        members = tuple(
            GroupMemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(protocol) if protocol is not None else b"",
                assignment=assignment.get(m.member_id, b""),
            )
            for m in group.members.values()
        )
        timestamp = group.current_state_timestamp_ms
        return group_metadata_record(
            group.group_id,
            GroupMetadataValue(
                protocol_type=group.protocol_type or "",
                generation=group.generation_id,
                protocol=protocol,
                leader=group.leader_id,
                members=members,
                current_state_timestamp=-1 if timestamp is None else timestamp,
            ),
        )
