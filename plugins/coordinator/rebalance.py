"""The classic group protocol's rebalance (Kafka's ClassicGroup transitions in
GroupMetadataManager): members joining and leaving, PreparingRebalance, the join's
completion with a new generation, and SyncGroup handing out the leader's assignment.
Each method changes the one group it is given; the group manager (``classic.py``)
owns the groups and routes requests and timers here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.schema.sync_group.v5.response import SyncGroupResponse

from plugins.coordinator.classic_views import (
    UNKNOWN_MEMBER_ID,
    classic_group_record,
    current_member_error,
    join_error,
    join_response,
    member_generation_error,
    sync_error,
)
from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.context import NO_THROTTLE, RequestContext
from plugins.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from plugins.coordinator.result import (
    Effects,
    HeartbeatDeadline,
    JoinDeadline,
    SyncDeadline,
)

log = logging.getLogger("plugins.coordinator.classic")


@dataclass(frozen=True, slots=True)
class Join:
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


class ClassicRebalance:
    """The transitions of one classic group; holds no group of its own."""

    def __init__(self, config: GroupCoordinatorConfig, clock: Callable[[], int]) -> None:
        """``clock`` returns milliseconds since the epoch."""
        self._config = config
        self._clock = clock

    def accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
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

    def new_member_join(self, group: GroupMetadata, join: Join, fx: Effects) -> None:
        if group.is_in(GroupState.DEAD):
            fx.complete(
                join.reply_to, join_error(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available)
            )
            return
        if not group.supports_protocols(join.protocol_type, (p for p, _ in join.protocols)):
            fx.complete(
                join.reply_to, join_error(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol)
            )
            return
        new_member_id = group.generate_member_id(join.ctx.client_id, join.group_instance_id)
        if join.group_instance_id is not None:
            old_member_id = group.static_members.get(join.group_instance_id)
            if old_member_id is not None:
                self.update_static_member_and_rebalance(
                    group, old_member_id, new_member_id, join, fx
                )
            else:
                self.add_member_and_rebalance(group, new_member_id, join, fx)
        elif join.ctx.api_version >= 4:
            # KIP-394: hand out the id first, so a client that times out and retries
            # does not leave a member behind for every attempt.
            group.pending_members.add(new_member_id)
            fx.schedule(HeartbeatDeadline(group.group_id, new_member_id), join.session_timeout_ms)
            fx.complete(join.reply_to, join_error(new_member_id, ErrorCode.member_id_required))
        else:
            self.add_member_and_rebalance(group, new_member_id, join, fx)

    def current_member_join(self, group: GroupMetadata, join: Join, fx: Effects) -> None:
        member_id = join.member_id
        if group.is_in(GroupState.DEAD):
            fx.complete(join.reply_to, join_error(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(join.protocol_type, (p for p, _ in join.protocols)):
            fx.complete(
                join.reply_to, join_error(member_id, ErrorCode.inconsistent_group_protocol)
            )
            return
        if member_id in group.pending_members:
            if join.group_instance_id is not None:
                # Pending ids are only handed to dynamic members.
                fx.complete(join.reply_to, join_error(member_id, ErrorCode.unknown_member_id))
                return
            self.add_member_and_rebalance(group, member_id, join, fx)
            return
        error = current_member_error(group, member_id, join.group_instance_id)
        if error is not None:
            fx.complete(join.reply_to, join_error(member_id, error))
            return
        member = group.members[member_id]
        match group.state:
            case GroupState.PREPARING_REBALANCE:
                self.update_member_and_rebalance(group, member, join, fx)
            case GroupState.COMPLETING_REBALANCE:
                if member.matches(join.protocols):
                    # Probably lost its JoinGroup response: send this generation again.
                    fx.complete(join.reply_to, join_response(group, member_id))
                else:
                    self.update_member_and_rebalance(group, member, join, fx)
            case GroupState.STABLE:
                if group.is_leader(member_id) or not member.matches(join.protocols):
                    # A leader rejoin forces a rebalance: that is how a consumer leader
                    # reacts to metadata changes that do not change any subscription.
                    self.update_member_and_rebalance(group, member, join, fx)
                else:
                    fx.complete(
                        join.reply_to, join_response(group, member_id, with_members=False)
                    )
            case _:
                fx.complete(join.reply_to, join_error(member_id, ErrorCode.unknown_member_id))

    def add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, join: Join, fx: Effects
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
        self.maybe_prepare_rebalance(
            group, fx, f"adding new member {member_id}; client reason: {join.reason}"
        )

    def update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, join: Join, fx: Effects
    ) -> None:
        superseded = group.update_member(
            member,
            join.protocols,
            join.rebalance_timeout_ms,
            join.session_timeout_ms,
            join.reply_to,
        )
        if superseded is not None and superseded != join.reply_to:
            fx.complete(superseded, join_error(member.member_id, ErrorCode.rebalance_in_progress))
        self.maybe_prepare_rebalance(
            group,
            fx,
            f"member {member.member_id} rejoined in {group.state.value}; client reason: "
            f"{join.reason}",
        )

    def update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        join: Join,
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
            fx.complete(fenced_join, join_error(old_member_id, ErrorCode.fenced_instance_id))
        if fenced_sync is not None:
            fx.complete(fenced_sync, sync_error(ErrorCode.fenced_instance_id))
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
                    self.maybe_prepare_rebalance(
                        group,
                        fx,
                        f"static member {join.group_instance_id} rejoined with protocols "
                        f"that change the group's protocol",
                    )
                    return
                # Nothing changes for the others: persist the new member id, no rebalance.
                fx.records.append(
                    classic_group_record(
                        group, {m.member_id: m.assignment for m in group.members.values()}
                    )
                )
                member.join_reply = None
                if join.ctx.api_version >= 9:
                    # KIP-814: a static leader learns it leads but must not reassign, as
                    # a Stable group would not distribute a new assignment.
                    is_leader = group.is_leader(new_member_id)
                    response = join_response(group, new_member_id, with_members=is_leader)
                    response = dataclasses.replace(response, skip_assignment=is_leader)
                else:
                    # Older clients: name the old leader id, so a restarted leader does not
                    # believe it leads and computes an assignment nobody would receive.
                    response = dataclasses.replace(
                        join_response(group, new_member_id, with_members=False),
                        leader=current_leader or "",
                    )
                fx.complete(join.reply_to, response)
            case GroupState.COMPLETING_REBALANCE:
                # The leader may already be assigning to the old member id; start over.
                self.prepare_rebalance(
                    group, fx, f"static member {join.group_instance_id} rejoined"
                )
            case GroupState.PREPARING_REBALANCE:
                pass
            case _:
                raise AssertionError(f"known static member in a {group.state.value} group")

    def maybe_prepare_rebalance(self, group: GroupMetadata, fx: Effects, reason: str) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, fx, reason)

    def prepare_rebalance(self, group: GroupMetadata, fx: Effects, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # Members waiting in SyncGroup must rejoin instead.
            self.reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress, fx)
        self.remove_sync_expiration(group, fx)
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
            self.maybe_complete_join(group, fx)

    def maybe_complete_join(self, group: GroupMetadata, fx: Effects) -> None:
        # The initial delay waits its full time on purpose: more members may be coming.
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and group.initial_join_delay_ms is None
            and group.has_all_members_joined()
        ):
            self.complete_join(group, fx)

    def complete_join(self, group: GroupMetadata, fx: Effects) -> None:
        fx.cancel(JoinDeadline(group.group_id))
        group.initial_join_delay_ms = None
        group.new_member_added = False
        for member in group.not_yet_rejoined_members():
            # Static members keep their place: they may come back with the same id.
            if not member.is_static:
                group.remove(member.member_id)
                self.answer_removed_member(member, fx)
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
            fx.records.append(classic_group_record(group, {}))
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
                    join_response(
                        group, member.member_id, with_members=group.is_leader(member.member_id)
                    ),
                )
            fx.schedule(
                HeartbeatDeadline(group.group_id, member.member_id), member.session_timeout_ms
            )
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        fx.schedule(SyncDeadline(group.group_id, group.generation_id), group.rebalance_timeout_ms())

    def validate_sync(
        self, group: GroupMetadata | None, request: SyncGroupRequest
    ) -> ErrorCode | None:
        error = self.validate_generation_member(
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

    def validate_generation_member(
        self, group: GroupMetadata | None, member_id: str, group_instance_id: str | None,
        generation_id: int,
    ) -> ErrorCode | None:
        """What SyncGroup and Heartbeat check first, in Kafka's order: the group exists
        and lives, the member is current, and it is of this generation."""
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        return member_generation_error(group, member_id, group_instance_id, generation_id)

    def complete_sync(self, group: GroupMetadata, request: SyncGroupRequest, fx: Effects) -> None:
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
        fx.records.append(classic_group_record(group, assignment))
        for member_id, member in group.members.items():
            member.assignment = assignment[member_id]
        self.propagate_assignment(group, ErrorCode.none, fx)
        group.transition_to(GroupState.STABLE, self._clock())

    def propagate_assignment(self, group: GroupMetadata, error: ErrorCode, fx: Effects) -> None:
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

    def reset_and_propagate_assignment_error(
        self, group: GroupMetadata, error: ErrorCode, fx: Effects
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
        self.propagate_assignment(group, error, fx)

    def remove_pending_sync_member(
        self, group: GroupMetadata, member_id: str, fx: Effects
    ) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            fx.cancel(SyncDeadline(group.group_id, group.generation_id))

    def remove_sync_expiration(self, group: GroupMetadata, fx: Effects) -> None:
        group.pending_sync_members.clear()
        fx.cancel(SyncDeadline(group.group_id, group.generation_id))

    def leave(
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
            self.remove_member_and_update_group(group, group.members[current], fx, why)
            return ErrorCode.none
        if member_id in group.pending_members:
            group.remove(member_id)
            fx.cancel(HeartbeatDeadline(group.group_id, member_id))
            self.maybe_complete_join(group, fx)
            return ErrorCode.none
        error = current_member_error(group, member_id, group_instance_id)
        if error is not None:
            return error
        self.remove_member_and_update_group(group, group.members[member_id], fx, why)
        return ErrorCode.none

    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, fx: Effects, reason: str
    ) -> None:
        self.answer_removed_member(member, fx)
        group.remove(member.member_id)
        fx.cancel(HeartbeatDeadline(group.group_id, member.member_id))
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(group, fx, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self.maybe_complete_join(group, fx)

    def answer_removed_member(self, member: MemberMetadata, fx: Effects) -> None:
        """A removed member's parked requests get UNKNOWN_MEMBER_ID: if it is still
        alive it rejoins from scratch."""
        if member.join_reply is not None:
            fx.complete(
                member.join_reply, join_error(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id)
            )
        if member.sync_reply is not None:
            fx.complete(member.sync_reply, sync_error(ErrorCode.unknown_member_id))
        member.join_reply = member.sync_reply = None
