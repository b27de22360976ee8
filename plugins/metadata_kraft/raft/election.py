"""Elections: vote tallies, who may grant a vote, and the timers (Kafka 4.3.1's
``EpochElection``, the ``canGrantVote`` of each epoch state, ``KafkaRaftClient``'s
``strictExponentialElectionBackoffMs``).

Kafka 4.3.1 has no random backoff after a lost election any more (pre-vote, KIP-996,
replaced it): a Prospective that a majority rejects returns at once to Follower or
Unattached, and a rejected Candidate waits out its election timeout and goes back to
Prospective. ``controller.quorum.election.backoff.max.ms`` only sizes the
EndQuorumEpoch successor backoff below.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from enum import Enum

__all__ = [
    "EpochElection",
    "ReplicaKey",
    "StateKind",
    "can_grant_vote",
    "is_log_up_to_date",
    "random_election_timeout_ms",
    "strict_exponential_backoff_ms",
]


@dataclass(frozen=True, slots=True, order=True)
class ReplicaKey:
    """A replica: its node id, and (KIP-853) the directory id of its metadata log."""

    id: int
    directory_id: uuid.UUID | None = None

    def matches(self, other: ReplicaKey) -> bool:
        """Kafka's rule for a recorded vote: same id, and same directory unless the
        recorded one has none."""
        if self.id != other.id:
            return False
        return self.directory_id is None or self.directory_id == other.directory_id


class StateKind(Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


def is_log_up_to_date(candidate_last_epoch: int, candidate_end_offset: int,
                      our_last_epoch: int, our_end_offset: int) -> bool:
    """The candidate's (last epoch, end offset) is at least ours (OffsetAndEpoch order)."""
    return (candidate_last_epoch, candidate_end_offset) >= (our_last_epoch, our_end_offset)


def can_grant_vote(kind: StateKind, *, candidate: ReplicaKey, log_up_to_date: bool,
                   pre_vote: bool, voted: ReplicaKey | None = None,
                   leader_id: int | None = None, has_fetched_from_leader: bool = False) -> bool:
    """Whether a node in state ``kind`` grants (pre-)vote to ``candidate`` in its epoch.

    - Unattached and Prospective: a pre-vote iff the log is up to date; a real vote to
      the candidate they already voted for (no log check), never while a leader is
      known, else iff the log is up to date.
    - Follower: only a pre-vote, only before it has fetched from its leader (so a
      partitioned voter cannot disturb a live leader), and only if the log is up to date.
    - Candidate and Resigned: only a pre-vote with an up-to-date log.
    - Leader: never.
    """
    if kind in (StateKind.UNATTACHED, StateKind.PROSPECTIVE):
        if pre_vote:
            return log_up_to_date
        if voted is not None:
            return voted.matches(candidate)
        if leader_id is not None:
            return False
        return log_up_to_date
    if kind is StateKind.FOLLOWER:
        return pre_vote and not has_fetched_from_leader and log_up_to_date
    if kind in (StateKind.CANDIDATE, StateKind.RESIGNED):
        return pre_vote and log_up_to_date
    return False


@dataclass(slots=True)
class EpochElection:
    """One election's tally over the voter set (the local voter votes for itself)."""

    voters: frozenset[int]
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def record_granted(self, voter: int) -> bool:
        """Record a grant; False when the voter already rejected or is not a voter."""
        if voter not in self.voters or voter in self.rejected:
            return False
        self.granted.add(voter)
        return True

    def record_rejected(self, voter: int) -> bool:
        if voter not in self.voters or voter in self.granted:
            return False
        self.rejected.add(voter)
        return True

    def is_granted(self) -> bool:
        return len(self.granted) >= self.majority

    def is_rejected(self) -> bool:
        """A majority can no longer be reached."""
        return len(self.voters) - len(self.rejected) < self.majority

    def unrecorded(self) -> frozenset[int]:
        return self.voters - self.granted - self.rejected


def random_election_timeout_ms(timeout_ms: int, rng: random.Random) -> int:
    """``timeout + random(0, timeout)``: Kafka's ``randomElectionTimeoutMs``."""
    if timeout_ms <= 0:
        return 0
    return timeout_ms + rng.randrange(timeout_ms)


def strict_exponential_backoff_ms(position: int, total: int, backoff_max_ms: int) -> int:
    """How long a preferred successor at ``position`` of ``total`` waits after
    EndQuorumEpoch before it starts an election: 0 for the first, the max for a voter
    not in the list, else ``(max >> (total - 1)) << (position - 1)`` capped at the max."""
    if position == 0:
        return 0
    if position < 0 or position >= total:
        return backoff_max_ms
    base = backoff_max_ms >> (total - 1)
    return min(backoff_max_ms, base << (position - 1))
