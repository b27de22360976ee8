"""The classic group (JoinGroup/SyncGroup protocol) as plain objects, no I/O.

A :class:`GroupMetadata` holds what Kafka's ``GroupMetadata``/``ClassicGroup`` holds:
state, generation, selected protocol, leader, members, static members (group.instance.id
-> member id), pending members (KIP-394) and pending-sync members; its committed
offsets are the offset manager's (``offsets.py``). Requests parked on a member (a
JoinGroup waiting for the join phase to end, a SyncGroup waiting for the leader's
assignment) are kept as opaque *reply handles* the caller gave us; the classic group
manager turns them into completions.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "GroupMetadata",
    "GroupState",
    "MemberMetadata",
    "OffsetExpirationCondition",
    "TopicPartition",
    "parse_subscribed_topics",
]

CONSUMER_PROTOCOL_TYPE = "consumer"

TopicPartition = tuple[str, int]
ReplyHandle = Hashable


class GroupState(enum.Enum):
    """Values are the names Kafka shows in ListGroups and DescribeGroups."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def valid_previous_states(self) -> frozenset[GroupState]:
        match self:
            case GroupState.PREPARING_REBALANCE:
                return frozenset(
                    (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)
                )
            case GroupState.COMPLETING_REBALANCE:
                return frozenset((GroupState.PREPARING_REBALANCE,))
            case GroupState.STABLE:
                return frozenset((GroupState.COMPLETING_REBALANCE,))
            case GroupState.EMPTY:
                return frozenset((GroupState.PREPARING_REBALANCE,))
            case GroupState.DEAD:
                return frozenset(GroupState)


class OffsetExpirationCondition(NamedTuple):
    """When the group's committed offsets expire (Kafka's OffsetExpirationCondition):
    once retention has passed since ``base_timestamp_ms`` (None: since each offset's
    commit), except offsets of ``kept_topics``."""

    base_timestamp_ms: int | None
    kept_topics: frozenset[str]


@dataclass(slots=True, eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    """(protocol name, member metadata) in the member's order of preference."""
    assignment: bytes = b""
    join_reply: ReplyHandle | None = None
    """Handle of the JoinGroup parked until the join phase completes (awaiting join)."""
    sync_reply: ReplyHandle | None = None
    """Handle of the SyncGroup parked until the leader's assignment (awaiting sync)."""
    is_new: bool = False
    """Joined in this rebalance and has not had a JoinGroup response yet; such a member
    cannot heartbeat, so only the new-member join timeout protects against it."""

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_reply is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_reply is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same metadata, same order: a rejoin that changes nothing."""
        return self.supported_protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """Whether a session timeout firing now should spare the member (Kafka's rule)."""
        if self.is_new:
            # New members can be expired even while awaiting join.
            return False
        # A member parked in JoinGroup/SyncGroup cannot heartbeat; the join and sync
        # deadlines police it instead.
        return self.is_awaiting_join or self.is_awaiting_sync


@dataclass(slots=True, eq=False)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    current_state_timestamp_ms: int | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> current member id."""
    pending_members: set[str] = field(default_factory=set)
    """Member ids handed out with MEMBER_ID_REQUIRED, not yet joined (KIP-394)."""
    pending_sync_members: set[str] = field(default_factory=set)
    """Members that got a JoinGroup response this generation but sent no SyncGroup yet."""
    new_member_added: bool = False
    """Set while the initial rebalance delay runs; another member joined, so wait more."""
    initial_join_delay_ms: int | None = None
    """The join phase of an Empty group first waits group.initial.rebalance.delay.ms, in
    steps, up to the rebalance timeout (Kafka's InitialDelayedJoin). None otherwise."""
    initial_join_remaining_ms: int = 0
    subscribed_topics: frozenset[str] | None = None
    """Topics the consumer group subscribes to; None when unknown (not a consumer group
    or unparsable metadata), which counts as subscribed to everything."""

    # ----------------------------------------------------------------- state machine

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in GroupState.PREPARING_REBALANCE.valid_previous_states()

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in state.valid_previous_states():
            raise IllegalGroupTransition(
                f"group {self.group_id} cannot move from {self.state.value} to {state.value}"
            )
        self.state = state
        self.current_state_timestamp_ms = now_ms

    # ------------------------------------------------------------------------ members

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def add(self, member: MemberMetadata, join_reply: ReplyHandle | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(
                    f"static member {member.group_instance_id} is already in {self.group_id}"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        member.join_reply = join_reply
        self.members[member.member_id] = member
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_reply: ReplyHandle | None,
    ) -> ReplyHandle | None:
        """Apply a rejoin; returns the reply handle it supersedes (a JoinGroup the same
        member left parked, e.g. before reconnecting), which the caller must answer."""
        member.supported_protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        superseded, member.join_reply = member.join_reply, join_reply
        return superseded

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[MemberMetadata, ReplyHandle | None, ReplyHandle | None]:
        """Move a static member to a new member id, keeping everything else.

        Returns the member and the old member id's parked join and sync handles, which
        the caller must answer with FENCED_INSTANCE_ID (the old instance is a zombie).
        """
        member = self.members.pop(old_member_id)
        fenced_join, fenced_sync = member.join_reply, member.sync_reply
        member.join_reply = member.sync_reply = None
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return member, fenced_join, fenced_sync

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = client_id if group_instance_id is None else group_instance_id
        return f"{prefix}-{uuid.uuid4()}"

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count() == len(self.members) and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False when the
        group has no leader or nobody rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ---------------------------------------------------------------------- protocols

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        candidates = set(first.protocol_names())
        for member in members:
            candidates.intersection_update(member.protocol_names())
        return candidates

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Kafka's ``selectProtocol``: each member votes for its preferred protocol among
        those all members support; most votes wins. Ties go to the protocol voted first
        in member order (Kafka leaves ties to hash order; this keeps replays equal)."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.subscribed_topics = self.compute_subscribed_topics()
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscribed_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # ------------------------------------------------------------------------ offsets

    def offset_expiration_condition(self) -> OffsetExpirationCondition | None:
        """By Kafka's rules: an Empty group expires all offsets once retention has passed
        since it became Empty; a Stable consumer group only offsets of topics it no
        longer subscribes to; a group that never had members (simple consumers) by
        commit timestamp; others (None) keep everything."""
        if self.protocol_type is not None and self.state is GroupState.EMPTY:
            # Groups loaded from old records have no state timestamp: fall back to the
            # commit timestamp, as Kafka does.
            return OffsetExpirationCondition(self.current_state_timestamp_ms, frozenset())
        if (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.state is GroupState.STABLE
        ):
            return OffsetExpirationCondition(None, self.subscribed_topics)
        if self.protocol_type is None:
            return OffsetExpirationCondition(None, frozenset())
        return None


class IllegalGroupTransition(RuntimeError):
    """A state change the classic protocol does not allow: a bug, not a client error."""


_SUBSCRIPTION_HEAD = struct.Struct(">hi")
_STRING_LENGTH = struct.Struct(">h")


def parse_subscribed_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription. Every version starts with version 0's
    layout (int16 version, array of topic names), so reading that prefix works for all
    versions, as Kafka does. None when the bytes do not follow it."""
    try:
        _, count = _SUBSCRIPTION_HEAD.unpack_from(metadata, 0)
        pos = _SUBSCRIPTION_HEAD.size
        if count < 0:
            return None
        topics = []
        for _ in range(count):
            (n,) = _STRING_LENGTH.unpack_from(metadata, pos)
            pos += _STRING_LENGTH.size
            if n < 0 or pos + n > len(metadata):
                return None
            topics.append(metadata[pos : pos + n].decode())
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
