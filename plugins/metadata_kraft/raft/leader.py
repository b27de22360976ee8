"""The leader's bookkeeping (Kafka's ``LeaderState``): each replica's progress, the
high watermark, check-quorum, and the view DescribeQuorum shows."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "CHECK_QUORUM_TIMEOUT_FACTOR",
    "OBSERVER_SESSION_TIMEOUT_MS",
    "LeaderProgress",
    "ReplicaProgress",
]

# LeaderState's constants in Kafka 4.3.1 (javap -constants).
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5
OBSERVER_SESSION_TIMEOUT_MS = 300_000


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one replica (DescribeQuorum's ReplicaState)."""

    replica_id: int
    end_offset: int | None = None
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    # The leader's end offset when this replica last fetched: a replica that reaches
    # it by its next fetch was caught up at that previous fetch.
    leader_end_at_last_fetch: int = -1


@dataclass(slots=True)
class LeaderProgress:
    """Progress of every replica of the leader's epoch, and the high watermark rule."""

    local_id: int
    epoch: int
    voters: frozenset[int]
    epoch_start_offset: int
    check_quorum_timeout_ms: int
    now_ms: int
    granting_voters: frozenset[int] = frozenset()
    high_watermark: int | None = None
    replicas: dict[int, ReplicaProgress] = field(default_factory=dict)
    observers: dict[int, ReplicaProgress] = field(default_factory=dict)
    # Voters that still owe an acknowledgement of BeginQuorumEpoch (by answer or fetch).
    unacked_voters: set[int] = field(default_factory=set)
    _fetched_voters: set[int] = field(default_factory=set)
    _check_quorum_deadline_ms: int = 0

    def __post_init__(self) -> None:
        for voter in self.voters:
            self.replicas[voter] = ReplicaProgress(voter)
        self.unacked_voters = set(self.voters - {self.local_id})
        self._check_quorum_deadline_ms = self.now_ms + self.check_quorum_timeout_ms

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    # -- check quorum ---------------------------------------------------------------

    @property
    def check_quorum_deadline_ms(self) -> int:
        """When the leader must resign unless a majority of voters fetched by then
        (1.5 x fetch timeout after the last time they had). A single voter never does."""
        if len(self.voters) == 1 or self.local_id not in self.voters:
            return 2**62
        return self._check_quorum_deadline_ms

    def time_until_check_quorum_expires(self, now_ms: int) -> int:
        """0 once the leader must resign (check quorum)."""
        return max(0, self.check_quorum_deadline_ms - now_ms)

    def _record_voter_fetch(self, voter: int, now_ms: int) -> None:
        self._fetched_voters.add(voter)
        # The leader counts itself.
        if len(self._fetched_voters - {self.local_id}) + 1 >= self.majority:
            self._fetched_voters.clear()
            self._check_quorum_deadline_ms = now_ms + self.check_quorum_timeout_ms

    def update_check_quorum(self, replica_id: int, now_ms: int) -> None:
        """A voter's FetchSnapshot keeps the leader's check-quorum alive, as a Fetch."""
        if replica_id in self.voters and replica_id != self.local_id:
            self._record_voter_fetch(replica_id, now_ms)

    # -- progress ---------------------------------------------------------------------

    def acknowledge(self, voter: int) -> None:
        self.unacked_voters.discard(voter)

    def update_local(self, flushed_end_offset: int, now_ms: int) -> bool:
        """The leader's own offset counts only once flushed; True when the HW moved."""
        progress = self.replicas.get(self.local_id)
        if progress is None:
            return False
        if progress.end_offset is not None and flushed_end_offset < progress.end_offset:
            raise ValueError(
                f"the leader's flushed offset went back from {progress.end_offset} "
                f"to {flushed_end_offset}")
        progress.end_offset = flushed_end_offset
        progress.last_fetch_ms = progress.last_caught_up_ms = now_ms
        return self._maybe_update_high_watermark()

    def update_replica(self, replica_id: int, fetch_offset: int, leader_end_offset: int,
                       now_ms: int) -> bool:
        """A Fetch from ``replica_id`` at ``fetch_offset``; True when the HW moved.
        Voters move the HW and keep check-quorum alive; observers are only shown."""
        if replica_id == self.local_id:
            raise ValueError("the leader does not fetch from itself")
        is_voter = replica_id in self.voters
        table = self.replicas if is_voter else self.observers
        progress = table.get(replica_id)
        if progress is None:
            progress = table[replica_id] = ReplicaProgress(replica_id)
        if fetch_offset >= leader_end_offset:
            progress.last_caught_up_ms = now_ms
        elif progress.leader_end_at_last_fetch >= 0 and \
                fetch_offset >= progress.leader_end_at_last_fetch:
            progress.last_caught_up_ms = progress.last_fetch_ms
        progress.end_offset = fetch_offset
        progress.last_fetch_ms = now_ms
        progress.leader_end_at_last_fetch = leader_end_offset
        if not is_voter:
            return False
        self.acknowledge(replica_id)
        self._record_voter_fetch(replica_id, now_ms)
        return self._maybe_update_high_watermark()

    def _maybe_update_high_watermark(self) -> bool:
        """The offset a majority of voters has (index voters/2 of the end offsets sorted
        descending) becomes the HW once it is past the epoch start offset, so a record of
        this epoch is committed first; it never moves back."""
        offsets = sorted((p.end_offset for p in self.replicas.values()
                          if p.end_offset is not None), reverse=True)
        index = len(self.voters) // 2
        if index >= len(offsets):
            return False
        candidate = offsets[index]
        if candidate <= self.epoch_start_offset:
            return False
        if self.high_watermark is not None and candidate <= self.high_watermark:
            return False
        self.high_watermark = candidate
        return True

    def voters_by_descending_fetch_offset(self) -> list[int]:
        """The other voters, most caught up first: the preferred successors of a
        resigning leader."""
        others = [p for v, p in self.replicas.items() if v != self.local_id]
        others.sort(key=lambda p: (-(p.end_offset if p.end_offset is not None else -1),
                                   p.replica_id))
        return [p.replica_id for p in others]

    # -- DescribeQuorum ---------------------------------------------------------------

    def expire_observers(self, now_ms: int) -> None:
        """Drop observers that have not fetched for OBSERVER_SESSION_TIMEOUT_MS."""
        for replica_id in [r for r, p in self.observers.items()
                           if now_ms - p.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS]:
            del self.observers[replica_id]

    def describe(self, now_ms: int) -> tuple[list[ReplicaProgress], list[ReplicaProgress]]:
        """(voters, observers) as DescribeQuorum shows them, sorted by id."""
        self.expire_observers(now_ms)
        return (sorted(self.replicas.values(), key=lambda p: p.replica_id),
                sorted(self.observers.values(), key=lambda p: p.replica_id))
