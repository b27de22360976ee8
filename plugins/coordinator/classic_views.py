"""What the classic group protocol reads from one group without changing it: the
record that persists a group and the group a record loads, the answers built from a
group (JoinGroup's, DescribeGroups', ListGroups'), and the checks a commit must pass.
Pure functions of a ``GroupMetadata``; the group manager owns the groups."""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.describe_groups.v6.response import DescribedGroup, DescribedGroupMember
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.response import JoinGroupResponse, JoinGroupResponseMember
from kio.schema.list_groups.v5.response import ListedGroup
from kio.schema.offset_commit.v9.request import OffsetCommitRequest
from kio.schema.sync_group.v5.response import SyncGroupResponse

from plugins.coordinator.context import NO_THROTTLE
from plugins.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from plugins.coordinator.records import (
    GroupMemberMetadata,
    GroupMetadataValue,
    Record,
    group_metadata_record,
)

UNKNOWN_MEMBER_ID = ""
CLASSIC_GROUP_TYPE = "classic"


# -- the group's record ------------------------------------------------------------

def classic_group_record(group: GroupMetadata, assignment: dict[str, bytes]) -> Record:
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


def group_from_record(group_id: str, value: GroupMetadataValue) -> GroupMetadata:
    """The group a loaded record describes: Stable with its members, else Empty."""
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
    return group


# -- answers -------------------------------------------------------------------------

def join_error(member_id: str, error: ErrorCode) -> JoinGroupResponse:
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


def sync_error(error: ErrorCode) -> SyncGroupResponse:
    return SyncGroupResponse(throttle_time=NO_THROTTLE, error_code=error, assignment=b"")


def join_response(
    group: GroupMetadata, member_id: str, *, with_members: bool | None = None
) -> JoinGroupResponse:
    """The JoinGroup answer of a member; the leader (or ``with_members``) gets every
    member's metadata for the chosen protocol."""
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


def listed_groups(
    groups: Iterable[GroupMetadata], states_filter: Iterable[str], types_filter: Iterable[str]
) -> tuple[ListedGroup, ...]:
    """ListGroups' entries. Filters compare case-insensitively; an empty filter matches
    everything."""
    states = {s.lower() for s in states_filter}
    types = {t.lower() for t in types_filter}
    if types and CLASSIC_GROUP_TYPE not in types:
        return ()
    return tuple(
        ListedGroup(
            group_id=group.group_id,
            protocol_type=group.protocol_type or "",
            group_state=group.state.value,
            group_type=CLASSIC_GROUP_TYPE,
        )
        for group in groups
        if not group.is_in(GroupState.DEAD)
        and (not states or group.state.value.lower() in states)
    )


def described_group(
    api_version: int, group_id: str, group: GroupMetadata | None
) -> DescribedGroup:
    """One group of DescribeGroups. Member metadata and assignments are shown only when
    Stable, as in Kafka."""
    if group is None or group.is_in(GroupState.DEAD):
        # v6 (KIP-1043) says so; older versions describe a Dead group without error.
        missing = api_version >= 6
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


# -- checks ------------------------------------------------------------------------

def current_member_error(
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


def member_generation_error(
    group: GroupMetadata, member_id: str, group_instance_id: str | None, generation_id: int,
) -> ErrorCode | None:
    """The member is current and of the group's generation."""
    error = current_member_error(group, member_id, group_instance_id)
    if error is not None:
        return error
    return ErrorCode.illegal_generation if generation_id != group.generation_id else None


def offset_commit_error(
    api_version: int, group: GroupMetadata | None, request: OffsetCommitRequest
) -> ErrorCode | None:
    """Whether the group accepts the commit (Kafka's ClassicGroup.validateOffsetCommit)."""
    generation = request.generation_id_or_member_epoch
    if group is None:
        if generation < 0:
            # A simple consumer or the admin client, not using group management: the
            # group comes into being with its first offsets (see offsets.py).
            return None
        # v9+ tells the client the group is gone; older clients expect this instead.
        return ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation
    if group.is_in(GroupState.DEAD):
        return ErrorCode.coordinator_not_available
    if generation < 0 and group.is_in(GroupState.EMPTY):
        return None
    if (
        generation >= 0
        or request.member_id != UNKNOWN_MEMBER_ID
        or request.group_instance_id is not None
    ):
        error = member_generation_error(group, request.member_id,
                                        request.group_instance_id, generation)
        if error is not None:
            return error
    elif not group.is_in(GroupState.EMPTY):
        # Without member id and generation, only a group without members accepts.
        return ErrorCode.unknown_member_id
    if group.is_in(GroupState.COMPLETING_REBALANCE):
        # The member has this generation but no assignment yet; it will retry.
        return ErrorCode.rebalance_in_progress
    return None


def txn_offset_commit_error(
    group: GroupMetadata | None, member_id: str, group_instance_id: str | None,
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
        return member_generation_error(group, member_id, group_instance_id, generation_id)
    return None
