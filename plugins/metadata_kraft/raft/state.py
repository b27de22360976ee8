"""Epoch states and their transitions (Kafka's ``QuorumState`` and the ``*State``
classes), sans-io: time comes in as ``now_ms``, randomness from an injected
``random.Random``.

Durable before effect: a transition that changes (epoch, leader, vote) yields the new
``ElectionRecord`` in ``take_persist()``; the node turns it into a PersistQuorumState
action placed before anything that depends on it (Kafka's ``durableTransitionTo``).
Prospective and Resigned are memory-only, as in Kafka.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .election import (
    EpochElection,
    ReplicaKey,
    StateKind,
    can_grant_vote,
    random_election_timeout_ms,
)
from .leader import CHECK_QUORUM_TIMEOUT_FACTOR, LeaderProgress
from .quorum_store import ElectionRecord

__all__ = [
    "Candidate",
    "EpochState",
    "Follower",
    "Leader",
    "Prospective",
    "QuorumState",
    "RaftConfig",
    "Resigned",
    "Unattached",
    "VoterSet",
]


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Kafka's ``controller.quorum.*`` timers (4.3.1 defaults)."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500  # KafkaRaftClient.MAX_FETCH_WAIT_MS
    # The most a leader reads for one Fetch / FetchSnapshot, whatever the request asks:
    # a peer on the controller listener cannot make it hold a whole log in memory.
    fetch_max_bytes: int = 1_048_576
    fetch_snapshot_max_bytes: int = 1_048_576


@dataclass(frozen=True, slots=True)
class VoterSet:
    """The voters (static ids for kraft.version 0; KIP-853 adds directory ids and
    endpoints, and changes through the log)."""

    ids: frozenset[int]

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.ids

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def majority(self) -> int:
        return len(self.ids) // 2 + 1


@dataclass(slots=True)
class Unattached:
    epoch: int
    voted: ReplicaKey | None
    leader_id: int | None
    election_deadline_ms: int
    kind: StateKind = StateKind.UNATTACHED


@dataclass(slots=True)
class Prospective:
    """Asking for pre-votes in the current epoch; remembers the vote and the last
    leader, to return to them if the pre-vote is lost."""

    epoch: int
    voted: ReplicaKey | None
    leader_id: int | None
    election: EpochElection
    election_deadline_ms: int
    kind: StateKind = StateKind.PROSPECTIVE


@dataclass(slots=True)
class Candidate:
    epoch: int
    election: EpochElection
    election_deadline_ms: int
    kind: StateKind = StateKind.CANDIDATE


@dataclass(slots=True)
class Leader:
    epoch: int
    progress: LeaderProgress
    kind: StateKind = StateKind.LEADER

    @property
    def epoch_start_offset(self) -> int:
        return self.progress.epoch_start_offset


@dataclass(slots=True)
class Follower:
    epoch: int
    leader_id: int
    voted: ReplicaKey | None
    fetch_deadline_ms: int
    has_fetched_from_leader: bool = False
    kind: StateKind = StateKind.FOLLOWER


@dataclass(slots=True)
class Resigned:
    epoch: int
    election_deadline_ms: int
    preferred_successors: list[int]
    unacked_voters: set[int] = field(default_factory=set)
    kind: StateKind = StateKind.RESIGNED


EpochState = Unattached | Prospective | Candidate | Leader | Follower | Resigned

_FAR = 2**62


class QuorumState:
    """The node's current epoch state and the transitions between states."""

    def __init__(self, local_id: int, voters: VoterSet, config: RaftConfig,
                 rng: random.Random) -> None:
        self.local_id = local_id
        self.voters = voters
        self.config = config
        self.rng = rng
        self.state: EpochState = Unattached(0, None, None, _FAR)
        self._durable = ElectionRecord()
        self._pending: ElectionRecord | None = None

    # -- queries ------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def is_voter(self) -> bool:
        return self.local_id in self.voters

    @property
    def leader_id(self) -> int | None:
        state = self.state
        if isinstance(state, Leader):
            return self.local_id
        if isinstance(state, Follower | Unattached | Prospective):
            return state.leader_id
        return None

    def voted(self) -> ReplicaKey | None:
        state = self.state
        if isinstance(state, Unattached | Prospective | Follower):
            return state.voted
        if isinstance(state, Candidate | Leader):
            return ReplicaKey(self.local_id)
        return None

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        state = self.state
        return can_grant_vote(
            state.kind, candidate=candidate, log_up_to_date=log_up_to_date,
            pre_vote=pre_vote, voted=self.voted(), leader_id=self.leader_id,
            has_fetched_from_leader=isinstance(state, Follower)
            and state.has_fetched_from_leader)

    def take_persist(self) -> ElectionRecord | None:
        """The record a transition made durable-pending, once."""
        pending, self._pending = self._pending, None
        return pending

    # -- helpers ------------------------------------------------------------------------

    def _election_deadline(self, now_ms: int) -> int:
        if not self.is_voter:
            return _FAR  # observers never start elections
        return now_ms + random_election_timeout_ms(self.config.election_timeout_ms, self.rng)

    def _persist(self, record: ElectionRecord) -> None:
        if record != self._durable:
            self._durable = record
            self._pending = record

    def _record(self, epoch: int, leader_id: int | None,
                voted: ReplicaKey | None) -> ElectionRecord:
        return ElectionRecord(epoch=epoch, leader_id=leader_id,
                              voted_id=None if voted is None else voted.id,
                              voted_directory_id=None if voted is None else voted.directory_id)

    # -- start-up -----------------------------------------------------------------------

    def initialize(self, record: ElectionRecord, log_last_epoch: int, now_ms: int) -> None:
        """Kafka's ``QuorumState.initialize``: the state a node restarts in."""
        self._durable = record
        voted = None if record.voted_id is None else \
            ReplicaKey(record.voted_id, record.voted_directory_id)
        if record.epoch < log_last_epoch:
            # quorum-state lags the log (it was lost or replaced): start unattached at
            # the log's epoch, knowing nothing else about it.
            self.state = Unattached(log_last_epoch, None, None, self._election_deadline(now_ms))
            self._persist(self._record(log_last_epoch, None, None))
        elif record.leader_id == self.local_id:
            # We led this epoch: never vote in it again nor reuse its offsets.
            self.state = Resigned(record.epoch, self._election_deadline(now_ms), [],
                                  set(self.voters.ids - {self.local_id}))
        elif voted is not None and voted.id == self.local_id and self.is_voter:
            self.state = Candidate(record.epoch, self._new_election(),
                                   self._election_deadline(now_ms))
        elif record.leader_id is not None:
            self.state = Follower(record.epoch, record.leader_id, voted,
                                  now_ms + self.config.fetch_timeout_ms)
        else:
            self.state = Unattached(record.epoch, voted, None, self._election_deadline(now_ms))

    def _new_election(self) -> EpochElection:
        election = EpochElection(self.voters.ids)
        election.record_granted(self.local_id)
        return election

    # -- transitions --------------------------------------------------------------------

    def transition_to_unattached(self, epoch: int, now_ms: int,
                                 leader_id: int | None = None) -> None:
        if epoch < self.epoch:
            raise ValueError(f"cannot go back from epoch {self.epoch} to {epoch}")
        voted = self.voted() if epoch == self.epoch else None
        if epoch == self.epoch and isinstance(self.state, Candidate | Leader):
            raise ValueError(f"{self.state.kind.value} cannot become unattached in its epoch")
        self.state = Unattached(epoch, voted, leader_id, self._election_deadline(now_ms))
        self._persist(self._record(epoch, leader_id, voted))

    def add_vote(self, candidate: ReplicaKey) -> None:
        """Record a granted real vote (Unattached or Prospective without one)."""
        state = self.state
        if not isinstance(state, Unattached | Prospective) or state.voted is not None:
            raise ValueError(f"{state.kind.value} cannot record a vote")
        state.voted = candidate
        self._persist(self._record(state.epoch, state.leader_id, candidate))

    def transition_to_prospective(self, now_ms: int) -> None:
        if not self.is_voter:
            raise ValueError("an observer cannot become prospective")
        state = self.state
        if isinstance(state, Leader | Prospective):
            raise ValueError(f"{state.kind.value} cannot become prospective")
        voted = self.voted() if not isinstance(state, Candidate) else ReplicaKey(self.local_id)
        self.state = Prospective(state.epoch, voted, self.leader_id, self._new_election(),
                                 self._election_deadline(now_ms))

    def transition_to_candidate(self, now_ms: int) -> None:
        if not isinstance(self.state, Prospective):
            raise ValueError(f"{self.state.kind.value} cannot become candidate")
        epoch = self.epoch + 1
        self.state = Candidate(epoch, self._new_election(), self._election_deadline(now_ms))
        self._persist(self._record(epoch, None, ReplicaKey(self.local_id)))

    def transition_to_leader(self, epoch_start_offset: int, now_ms: int) -> Leader:
        state = self.state
        if not isinstance(state, Candidate) or not state.election.is_granted():
            raise ValueError(f"{state.kind.value} without a majority cannot lead")
        timeout = int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
        progress = LeaderProgress(
            local_id=self.local_id, epoch=state.epoch, voters=self.voters.ids,
            epoch_start_offset=epoch_start_offset, check_quorum_timeout_ms=timeout,
            now_ms=now_ms, granting_voters=frozenset(state.election.granted))
        leader = Leader(state.epoch, progress)
        self.state = leader
        self._persist(self._record(state.epoch, self.local_id, ReplicaKey(self.local_id)))
        return leader

    def transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        if leader_id == self.local_id:
            raise ValueError("a node cannot follow itself")
        state = self.state
        if epoch < self.epoch:
            raise ValueError(f"cannot follow epoch {epoch} from {self.epoch}")
        if epoch == self.epoch:
            if isinstance(state, Leader):
                raise ValueError(f"two leaders in epoch {epoch}: {self.local_id}, {leader_id}")
            if isinstance(state, Follower) and state.leader_id != leader_id:
                raise ValueError(f"two leaders in epoch {epoch}: {state.leader_id}, {leader_id}")
        voted = self.voted() if epoch == self.epoch else None
        self.state = Follower(epoch, leader_id, voted, now_ms + self.config.fetch_timeout_ms)
        self._persist(self._record(epoch, leader_id, voted))

    def transition_to_resigned(self, preferred_successors: list[int], now_ms: int) -> None:
        state = self.state
        if not isinstance(state, Leader):
            raise ValueError(f"{state.kind.value} cannot resign")
        self.state = Resigned(state.epoch, self._election_deadline(now_ms),
                              preferred_successors, set(self.voters.ids - {self.local_id}))
