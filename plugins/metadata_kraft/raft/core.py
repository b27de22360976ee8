"""The event-driven Raft node (Kafka's ``KafkaRaftClient``), sans-io.

The driver feeds it events and executes the actions it returns, **in order**:

- ``on_request(request_id, request, now)``: a Vote, BeginQuorumEpoch, EndQuorumEpoch,
  Fetch or DescribeQuorum from a peer; answered by a ``Respond`` now or later (a Fetch
  with nothing new is parked up to its MaxWaitMs);
- ``on_response(source, correlation_id, response, now)`` and
  ``on_send_failed(destination, correlation_id, now)`` for the ``Send`` actions;
- ``on_tick(now)`` at ``next_deadline()`` (or sooner);
- ``append(records, now)`` (leader only) and ``on_flushed(now)`` once a ``Flush``
  completed.

``PersistQuorumState`` must be durable before the driver executes any later action
(``Send``/``Respond`` that depend on the new epoch or vote). The log is read and
appended synchronously through ``RaftLog``; only its flush is asynchronous. A voter
fetches again only once its log is flushed, so the offset the leader counts is durable.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from . import messages as m
from .actions import (
    Action,
    Commit,
    Fatal,
    Flush,
    LeaderChanged,
    NotLeaderError,
    PersistQuorumState,
    Respond,
    Send,
)
from .election import ReplicaKey, is_log_up_to_date, strict_exponential_backoff_ms
from .log import RaftLog, Validation
from .quorum_store import ElectionRecord
from .state import (
    Candidate,
    Follower,
    Leader,
    Prospective,
    QuorumState,
    RaftConfig,
    Resigned,
    Unattached,
    VoterSet,
)

__all__ = [
    "Action",
    "Commit",
    "Fatal",
    "Flush",
    "LeaderChanged",
    "NotLeaderError",
    "PersistQuorumState",
    "RaftNode",
    "Respond",
    "Send",
]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    deadline_ms: int
    kind: str


@dataclass(slots=True)
class _ParkedFetch:
    request_id: int
    request: m.FetchRequest
    deadline_ms: int


_FAR = 2**62


class RaftNode:
    """One voter or observer of the metadata quorum."""

    def __init__(self, *, node_id: int, voters: VoterSet, log: RaftLog,
                 election: ElectionRecord, now_ms: int, config: RaftConfig | None = None,
                 rng: random.Random | None = None, cluster_id: str | None = None) -> None:
        self.node_id = node_id
        self.log = log
        self.config = config or RaftConfig()
        self.cluster_id = cluster_id
        self.rng = rng or random.Random()
        self.quorum = QuorumState(node_id, voters, self.config, self.rng)
        self.quorum.initialize(election, log.last_fetched_epoch, now_ms)
        self.high_watermark = -1  # the largest committed offset reported (exclusive)
        self.fatal: str | None = None
        self._actions: list[Action] = []
        self._in_flight: dict[int, _InFlight] = {}
        self._backoff_until: dict[int, int] = {}
        self._next_correlation = 0
        self._parked: list[_ParkedFetch] = []
        self._flush_requested = log.flushed_offset
        self._last_leader: tuple[int, int | None] | None = None
        self._shutting_down = False
        self._persist_if_needed()

    # -- the driver's entry points ------------------------------------------------------

    def start(self, now_ms: int) -> list[Action]:
        """Actions due at start-up (a quorum-state rewrite, first requests)."""
        return self._finish(now_ms)

    def on_tick(self, now_ms: int) -> list[Action]:
        return self._finish(now_ms)

    def on_flushed(self, now_ms: int) -> list[Action]:
        state = self.quorum.state
        if isinstance(state, Leader) and \
                state.progress.update_local(self.log.flushed_offset, now_ms):
            self._on_leader_high_watermark(state)
        return self._finish(now_ms)

    def append(self, records: Sequence[bytes], now_ms: int) -> tuple[list[Action], int]:
        """Append as leader in the current epoch: (actions, offset of the last record).
        The records are committed once a ``Commit`` passes that offset."""
        state = self.quorum.state
        if not isinstance(state, Leader) or self._shutting_down:
            raise NotLeaderError(f"node {self.node_id} is not the leader")
        last = self.log.append_as_leader(records, state.epoch)
        self._request_flush()
        self._complete_parked(now_ms, only_new_data=True)
        return self._finish(now_ms), last

    def resign(self, now_ms: int) -> list[Action]:
        """Graceful shutdown of a leader: resign and tell the voters (EndQuorumEpoch)."""
        self._shutting_down = True
        state = self.quorum.state
        if isinstance(state, Leader):
            self._transition_to_resigned(state, now_ms)
        return self._finish(now_ms)

    def on_send_failed(self, destination: int, correlation_id: int,
                       now_ms: int) -> list[Action]:
        flight = self._in_flight.get(destination)
        if flight is not None and flight.correlation_id == correlation_id:
            del self._in_flight[destination]
            self._backoff_until[destination] = now_ms + self.config.retry_backoff_ms
        return self._finish(now_ms)

    def on_response(self, source: int, correlation_id: int, response: m.RaftResponse,
                    now_ms: int) -> list[Action]:
        flight = self._in_flight.get(source)
        if flight is None or flight.correlation_id != correlation_id:
            return self._finish(now_ms)  # a reply to a request we gave up on
        del self._in_flight[source]
        ok = self._handle_response(source, flight.kind, response, now_ms)
        if not ok:
            self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
        return self._finish(now_ms)

    def on_request(self, request_id: int, request: m.RaftRequest,
                   now_ms: int) -> list[Action]:
        if isinstance(request, m.VoteRequest):
            self._respond(request_id, self._handle_vote(request, now_ms))
        elif isinstance(request, m.BeginQuorumEpochRequest):
            self._respond(request_id, self._handle_begin_quorum_epoch(request, now_ms))
        elif isinstance(request, m.EndQuorumEpochRequest):
            self._respond(request_id, self._handle_end_quorum_epoch(request, now_ms))
        elif isinstance(request, m.FetchRequest):
            self._handle_fetch(request_id, request, now_ms)
        elif isinstance(request, m.DescribeQuorumRequest):
            self._respond(request_id, self._handle_describe_quorum(request, now_ms))
        elif isinstance(request, m.FetchSnapshotRequest):
            self._respond(request_id, self._handle_fetch_snapshot(request, now_ms))
        else:
            raise TypeError(f"not a Raft request: {type(request).__name__}")
        return self._finish(now_ms)

    def next_deadline(self) -> int:
        """The latest time the driver should call ``on_tick`` by."""
        state = self.quorum.state
        deadlines = [flight.deadline_ms for flight in self._in_flight.values()]
        deadlines += [p.deadline_ms for p in self._parked]
        deadlines += [t for t in self._backoff_until.values()]
        if isinstance(state, Leader):
            deadlines.append(state.progress.check_quorum_deadline_ms)
        elif isinstance(state, Follower):
            if self.quorum.is_voter:  # an observer never times out of following
                deadlines.append(state.fetch_deadline_ms)
        else:
            deadlines.append(state.election_deadline_ms)
        return min(deadlines, default=_FAR)

    # -- actions and transitions ----------------------------------------------------------

    def _persist_if_needed(self) -> None:
        record = self.quorum.take_persist()
        if record is not None:
            self._actions.append(PersistQuorumState(record))

    def _respond(self, request_id: int, response: m.RaftResponse) -> None:
        self._actions.append(Respond(request_id, response))

    def _request_flush(self) -> None:
        if self.log.end_offset > self._flush_requested:
            self._flush_requested = self.log.end_offset
            self._actions.append(Flush(self.log.end_offset))

    def _after_transition(self, now_ms: int) -> None:
        """Every transition: persist first, forget requests of the old state (Kafka's
        resetConnections), answer parked fetches with the new state's answer."""
        self._persist_if_needed()
        self._in_flight.clear()
        self._backoff_until.clear()
        self._complete_parked(now_ms, only_new_data=False)

    def _finish(self, now_ms: int) -> list[Action]:
        if self.fatal is None:
            self._poll(now_ms)
        leader = (self.quorum.epoch, self.quorum.leader_id)
        if leader != self._last_leader:
            self._last_leader = leader
            self._actions.append(LeaderChanged(*leader))
        actions, self._actions = self._actions, []
        return actions

    def _die(self, reason: str) -> None:
        logger.error("raft node %s stops: %s", self.node_id, reason)
        self.fatal = reason
        self._actions.append(Fatal(reason))

    def _transition_to_unattached(self, epoch: int, now_ms: int) -> None:
        self.quorum.transition_to_unattached(epoch, now_ms)
        self._after_transition(now_ms)

    def _transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        self.quorum.transition_to_follower(epoch, leader_id, now_ms)
        self._after_transition(now_ms)

    def _transition_to_prospective(self, now_ms: int) -> None:
        self.quorum.transition_to_prospective(now_ms)
        self._after_transition(now_ms)
        self._maybe_transition_forward(now_ms)

    def _transition_to_candidate(self, now_ms: int) -> None:
        self.quorum.transition_to_candidate(now_ms)
        self._after_transition(now_ms)
        self._maybe_transition_forward(now_ms)

    def _maybe_transition_forward(self, now_ms: int) -> None:
        state = self.quorum.state
        if isinstance(state, Prospective) and state.election.is_granted():
            self._transition_to_candidate(now_ms)
        elif isinstance(state, Candidate) and state.election.is_granted():
            self._transition_to_leader(state, now_ms)

    def _transition_to_leader(self, state: Candidate, now_ms: int) -> None:
        epoch_start = self.log.end_offset
        leader = self.quorum.transition_to_leader(epoch_start, now_ms)
        self._after_transition(now_ms)
        # The LeaderChangeMessage opens the epoch: the HW moves only past it, so a
        # record of this epoch is committed before anything is acted on.
        self.log.append_leader_change(
            leader.epoch, self.node_id, sorted(self.quorum.voters.ids),
            sorted(leader.progress.granting_voters))
        self._request_flush()
        if self.log.flushed_offset >= self.log.end_offset and \
                leader.progress.update_local(self.log.flushed_offset, now_ms):
            self._on_leader_high_watermark(leader)

    def _transition_to_resigned(self, state: Leader, now_ms: int) -> None:
        self.quorum.transition_to_resigned(
            state.progress.voters_by_descending_fetch_offset(), now_ms)
        self._after_transition(now_ms)

    def _prospective_lost(self, state: Prospective, now_ms: int) -> None:
        """A lost or timed-out pre-vote: back to the last leader, else unattached."""
        if state.leader_id is not None:
            self._transition_to_follower(state.epoch, state.leader_id, now_ms)
        else:
            self._transition_to_unattached(state.epoch, now_ms)

    def _commit(self, high_watermark: int) -> None:
        if high_watermark > self.high_watermark:
            self.high_watermark = high_watermark
            self._actions.append(Commit(high_watermark))

    def _on_leader_high_watermark(self, state: Leader) -> None:
        if state.progress.high_watermark is not None:
            self._commit(state.progress.high_watermark)

    # -- polling (timers and outbound requests) ---------------------------------------------

    def _can_send(self, destination: int, now_ms: int) -> bool:
        flight = self._in_flight.get(destination)
        if flight is not None:
            if now_ms < flight.deadline_ms:
                return False
            del self._in_flight[destination]  # timed out: the answer is ignored if it comes
        return now_ms >= self._backoff_until.get(destination, 0)

    def _send(self, destination: int, kind: str, request: m.RaftRequest, now_ms: int) -> None:
        self._next_correlation += 1
        self._in_flight[destination] = _InFlight(
            self._next_correlation, now_ms + self.config.request_timeout_ms, kind)
        self._backoff_until.pop(destination, None)
        self._actions.append(Send(destination, self._next_correlation, request))

    def _poll(self, now_ms: int) -> None:
        # Requests past their timeout are given up on (a late answer is ignored) and
        # finished backoffs are forgotten, so next_deadline() only names future times.
        for destination in [d for d, t in self._backoff_until.items() if t <= now_ms]:
            del self._backoff_until[destination]
        for destination in [d for d, f in self._in_flight.items() if f.deadline_ms <= now_ms]:
            del self._in_flight[destination]
            self._backoff_until[destination] = now_ms + self.config.retry_backoff_ms
        for _ in range(8):  # a transition may make the new state due at once
            state = self.quorum.state
            before = state
            if isinstance(state, Leader):
                self._poll_leader(state, now_ms)
            elif isinstance(state, Candidate):
                self._poll_candidate(state, now_ms)
            elif isinstance(state, Prospective):
                self._poll_prospective(state, now_ms)
            elif isinstance(state, Follower):
                self._poll_follower(state, now_ms)
            elif isinstance(state, Resigned):
                self._poll_resigned(state, now_ms)
            else:
                self._poll_unattached(state, now_ms)
            if self.quorum.state is before:
                return

    def _poll_leader(self, state: Leader, now_ms: int) -> None:
        if state.progress.time_until_check_quorum_expires(now_ms) == 0:
            logger.info("raft node %s resigns epoch %s: no fetch from a majority within %s ms",
                        self.node_id, state.epoch, state.progress.check_quorum_timeout_ms)
            self._transition_to_resigned(state, now_ms)
            return
        for parked in [p for p in self._parked if p.deadline_ms <= now_ms]:
            self._parked.remove(parked)
            self._respond(parked.request_id, self._try_complete_fetch(parked.request, now_ms))
        for voter in sorted(state.progress.unacked_voters):
            if self._can_send(voter, now_ms):
                self._send(voter, "begin", m.begin_quorum_epoch_request(
                    self.cluster_id, voter, self.node_id, state.epoch), now_ms)

    def _send_votes(self, voters: frozenset[int], epoch: int, pre_vote: bool,
                    now_ms: int) -> None:
        for voter in sorted(voters - {self.node_id}):
            if self._can_send(voter, now_ms):
                self._send(voter, "prevote" if pre_vote else "vote", m.vote_request(
                    self.cluster_id, voter, self.node_id, epoch, self.log.last_fetched_epoch,
                    self.log.end_offset, pre_vote), now_ms)

    def _poll_candidate(self, state: Candidate, now_ms: int) -> None:
        if now_ms >= state.election_deadline_ms:
            self._transition_to_prospective(now_ms)
        elif not state.election.is_rejected():
            self._send_votes(state.election.unrecorded(), state.epoch, False, now_ms)

    def _poll_prospective(self, state: Prospective, now_ms: int) -> None:
        if now_ms >= state.election_deadline_ms:
            self._prospective_lost(state, now_ms)
        else:
            self._send_votes(state.election.unrecorded(), state.epoch, True, now_ms)

    def _poll_follower(self, state: Follower, now_ms: int) -> None:
        if self.quorum.is_voter and now_ms >= state.fetch_deadline_ms:
            self._transition_to_prospective(now_ms)
            return
        if state.leader_id in self._backoff_until:
            # The leader did not answer: ask any voter who leads now (Kafka's
            # maybeSendFetchToBestNode). An observer stays a follower until told.
            self._fetch_from_any_voter(state.epoch, now_ms)
        else:
            self._maybe_fetch(state.leader_id, state.epoch, now_ms)

    def _poll_unattached(self, state: Unattached, now_ms: int) -> None:
        if self.quorum.is_voter and now_ms >= state.election_deadline_ms:
            self._transition_to_prospective(now_ms)
            return
        self._fetch_from_any_voter(state.epoch, now_ms)

    def _fetch_from_any_voter(self, epoch: int, now_ms: int) -> None:
        """Ask a voter (Kafka: any bootstrap server) who leads; one request at a time."""
        if not self._in_flight:
            others = [v for v in sorted(self.quorum.voters.ids - {self.node_id})
                      if v not in self._backoff_until]
            if others:
                self._maybe_fetch(self.rng.choice(others), epoch, now_ms)

    def _poll_resigned(self, state: Resigned, now_ms: int) -> None:
        if now_ms >= state.election_deadline_ms:
            self._transition_to_unattached(state.epoch + 1, now_ms)
            return
        for voter in sorted(state.unacked_voters):
            if self._can_send(voter, now_ms):
                self._send(voter, "end", m.end_quorum_epoch_request(
                    self.cluster_id, self.node_id, state.epoch, state.preferred_successors),
                    now_ms)

    def _maybe_fetch(self, destination: int, epoch: int, now_ms: int) -> None:
        # A voter fetches again only once what it appended is durable: the leader
        # counts its fetch offset toward the high watermark.
        if self.log.flushed_offset < self.log.end_offset:
            return
        if self._can_send(destination, now_ms):
            self._send(destination, "fetch", m.fetch_request(
                self.cluster_id, self.node_id, epoch, self.log.end_offset,
                self.log.last_fetched_epoch, self.config.fetch_max_wait_ms,
                self.config.fetch_max_bytes), now_ms)

    # -- inbound requests -----------------------------------------------------------------

    def _cluster_id_ok(self, api: str, cluster_id: str | None) -> bool:
        if cluster_id is None or self.cluster_id is None or cluster_id == self.cluster_id:
            return True
        self._refused(api, f"cluster id {cluster_id!r} is not ours ({self.cluster_id!r})")
        return False

    def _refused(self, api: str, reason: str) -> None:
        """One line for a request we answer with an error: bad input, not our failure."""
        logger.info("raft node %s refuses a %s request: %s", self.node_id, api, reason)

    def _validate_voter_only(self, remote_id: int, epoch: int) -> ErrorCode | None:
        if epoch < self.quorum.epoch:
            return ErrorCode.fenced_leader_epoch
        if remote_id < 0:
            return ErrorCode.invalid_request
        return None

    def _validate_leader_only(self, epoch: int) -> ErrorCode | None:
        if epoch < self.quorum.epoch:
            return ErrorCode.fenced_leader_epoch
        if epoch > self.quorum.epoch:
            return ErrorCode.unknown_leader_epoch
        if not isinstance(self.quorum.state, Leader):
            return ErrorCode.not_leader_or_follower
        if self._shutting_down:
            return ErrorCode.broker_not_available
        return None

    def _leader_and_epoch(self) -> tuple[int, int]:
        leader = self.quorum.leader_id
        return (-1 if leader is None else leader), self.quorum.epoch

    def _maybe_transition(self, leader_id: int | None, epoch: int, now_ms: int) -> None:
        """Follow what a peer told us: a known leader at >= our epoch, or a newer epoch."""
        state = self.quorum.state
        if leader_id is not None and leader_id != self.node_id and (
                epoch > self.quorum.epoch
                or (epoch == self.quorum.epoch and self.quorum.leader_id is None
                    and not isinstance(state, Leader))):
            self._transition_to_follower(epoch, leader_id, now_ms)
        elif epoch > self.quorum.epoch:
            self._transition_to_unattached(epoch, now_ms)

    def _handle_vote(self, request: m.VoteRequest, now_ms: int) -> m.VoteResponse:
        if not self._cluster_id_ok("Vote", request.cluster_id):
            return m.vote_response(ErrorCode.inconsistent_cluster_id)
        if not m.single_partition(request):
            self._refused("Vote", "it does not name exactly __cluster_metadata-0")
            return m.vote_response(ErrorCode.invalid_request)
        part = request.topics[0].partitions[0]
        leader, epoch = self._leader_and_epoch()
        illegal_epoch = (part.last_offset_epoch > part.replica_epoch if part.pre_vote
                         else part.last_offset_epoch >= part.replica_epoch)
        if part.last_offset < 0 or part.last_offset_epoch < 0 or illegal_epoch:
            self._refused("Vote", f"last offset {part.last_offset} in epoch "
                          f"{part.last_offset_epoch} for epoch {part.replica_epoch}")
            return m.vote_response(ErrorCode.none, ErrorCode.invalid_request, leader, epoch)
        error = self._validate_voter_only(part.replica_id, part.replica_epoch)
        if error is not None:
            return m.vote_response(ErrorCode.none, error, leader, epoch)
        if part.replica_epoch > self.quorum.epoch:
            self._transition_to_unattached(part.replica_epoch, now_ms)
        leader, epoch = self._leader_and_epoch()
        if request.voter_id >= 0 and request.voter_id != self.node_id:
            self._refused("Vote", f"it is meant for voter {request.voter_id}")
            return m.vote_response(ErrorCode.none, ErrorCode.invalid_voter_key, leader, epoch)
        # A node that does not see itself as a voter still votes, as Kafka's does: with
        # KIP-853 a new voter may not have replicated the VotersRecord naming it yet.
        up_to_date = is_log_up_to_date(part.last_offset_epoch, part.last_offset,
                                       self.log.last_fetched_epoch, self.log.end_offset)
        candidate = ReplicaKey(part.replica_id, part.replica_directory_id)
        granted = self.quorum.can_grant_vote(candidate, up_to_date, part.pre_vote)
        state = self.quorum.state
        if granted and not part.pre_vote and isinstance(state, Unattached | Prospective) \
                and state.voted is None:
            self.quorum.add_vote(candidate)
            self._persist_if_needed()  # durable before the grant leaves
        return m.vote_response(ErrorCode.none, ErrorCode.none, leader, epoch, granted)

    def _handle_begin_quorum_epoch(self, request: m.BeginQuorumEpochRequest,
                                   now_ms: int) -> m.BeginQuorumEpochResponse:
        if not self._cluster_id_ok("BeginQuorumEpoch", request.cluster_id):
            return m.begin_quorum_epoch_response(ErrorCode.inconsistent_cluster_id)
        if not m.single_partition(request):
            self._refused("BeginQuorumEpoch", "it does not name exactly __cluster_metadata-0")
            return m.begin_quorum_epoch_response(ErrorCode.invalid_request)
        part = request.topics[0].partitions[0]
        error = self._validate_voter_only(part.leader_id, part.leader_epoch)
        if error is None and request.voter_id >= 0 and request.voter_id != self.node_id:
            error = ErrorCode.invalid_voter_key
        if error is None:
            self._maybe_transition(part.leader_id, part.leader_epoch, now_ms)
        leader, epoch = self._leader_and_epoch()
        return m.begin_quorum_epoch_response(ErrorCode.none, error or ErrorCode.none,
                                             leader, epoch)

    def _handle_end_quorum_epoch(self, request: m.EndQuorumEpochRequest,
                                 now_ms: int) -> m.EndQuorumEpochResponse:
        if not self._cluster_id_ok("EndQuorumEpoch", request.cluster_id):
            return m.end_quorum_epoch_response(ErrorCode.inconsistent_cluster_id)
        if not m.single_partition(request):
            self._refused("EndQuorumEpoch", "it does not name exactly __cluster_metadata-0")
            return m.end_quorum_epoch_response(ErrorCode.invalid_request)
        part = request.topics[0].partitions[0]
        error = self._validate_voter_only(part.leader_id, part.leader_epoch)
        if error is None:
            self._maybe_transition(part.leader_id, part.leader_epoch, now_ms)
            state = self.quorum.state
            if isinstance(state, Follower) and state.leader_id == part.leader_id:
                preferred = [c.candidate_id for c in part.preferred_candidates]
                position = preferred.index(self.node_id) if self.node_id in preferred \
                    else len(preferred)
                backoff = strict_exponential_backoff_ms(
                    position, len(preferred), self.config.election_backoff_max_ms)
                state.fetch_deadline_ms = now_ms + backoff
        leader, epoch = self._leader_and_epoch()
        return m.end_quorum_epoch_response(ErrorCode.none, error or ErrorCode.none,
                                           leader, epoch)

    def _handle_fetch(self, request_id: int, request: m.FetchRequest, now_ms: int) -> None:
        if not self._cluster_id_ok("Fetch", request.cluster_id):
            self._respond(request_id, m.fetch_response(ErrorCode.inconsistent_cluster_id))
            return
        if not m.single_partition(request):
            self._refused("Fetch", "it does not name exactly __cluster_metadata-0")
            self._respond(request_id, m.fetch_response(ErrorCode.invalid_request))
            return
        part = request.topics[0].partitions[0]
        if m.fetch_max_wait_ms(request) < 0 or part.fetch_offset < 0 \
                or part.last_fetched_epoch < 0 \
                or part.last_fetched_epoch > part.current_leader_epoch:
            self._refused("Fetch", f"offset {part.fetch_offset}, last fetched epoch "
                          f"{part.last_fetched_epoch}, leader epoch "
                          f"{part.current_leader_epoch}, max wait "
                          f"{m.fetch_max_wait_ms(request)} ms")
            leader, epoch = self._leader_and_epoch()
            self._respond(request_id, m.fetch_response(
                ErrorCode.none, ErrorCode.invalid_request, leader_id=leader, epoch=epoch))
            return
        response = self._try_complete_fetch(request, now_ms)
        data = response.responses[0].partitions[0] if response.responses else None
        if data is None or data.error_code is not ErrorCode.none or data.records \
                or m.fetch_max_wait_ms(request) == 0 or data.diverging_epoch.epoch >= 0 \
                or data.snapshot_id.epoch >= 0:
            self._respond(request_id, response)
        else:
            self._parked.append(_ParkedFetch(
                request_id, request, now_ms + m.fetch_max_wait_ms(request)))

    def _try_complete_fetch(self, request: m.FetchRequest, now_ms: int) -> m.FetchResponse:
        part = request.topics[0].partitions[0]
        error = self._validate_leader_only(part.current_leader_epoch)
        leader, epoch = self._leader_and_epoch()
        if error is not None:
            return m.fetch_response(ErrorCode.none, error, leader_id=leader, epoch=epoch)
        state = self.quorum.state
        assert isinstance(state, Leader)
        latest = self.log.latest_snapshot()
        if part.fetch_offset == 0 and latest is not None and latest != (0, 0):
            # An empty follower is better served by the latest snapshot (not bootstrap's).
            validation = Validation("snapshot", latest[1], latest[0])
        else:
            validation = self.log.validate(part.fetch_offset, part.last_fetched_epoch)
        records = b""
        diverging = snapshot = None
        if validation.kind == "valid":
            records = self.log.read(part.fetch_offset,
                                    min(part.partition_max_bytes, self.config.fetch_max_bytes))
            replica_id = request.replica_state.replica_id
            if replica_id >= 0 and replica_id != self.node_id and \
                    state.progress.update_replica(replica_id, part.fetch_offset,
                                                  self.log.end_offset, now_ms):
                self._on_leader_high_watermark(state)
        elif validation.kind == "diverging":
            diverging = (validation.epoch, validation.end_offset)
        else:
            snapshot = (validation.end_offset, validation.epoch)
        hw = state.progress.high_watermark
        return m.fetch_response(
            ErrorCode.none, leader_id=leader, epoch=epoch,
            high_watermark=-1 if hw is None else hw, log_start_offset=self.log.start_offset,
            diverging=diverging, snapshot=snapshot, records=records)

    def _complete_parked(self, now_ms: int, only_new_data: bool) -> None:
        for parked in list(self._parked):
            offset = parked.request.topics[0].partitions[0].fetch_offset
            if only_new_data and self.log.end_offset <= offset:
                continue
            self._parked.remove(parked)
            self._respond(parked.request_id, self._try_complete_fetch(parked.request, now_ms))

    def _handle_fetch_snapshot(self, request: m.FetchSnapshotRequest,
                               now_ms: int) -> m.FetchSnapshotResponse:
        """Kafka's ``handleFetchSnapshotRequest``: a slice of one of the leader's snapshot
        files (never the bootstrap 0-0), not aligned to batches."""
        if not self._cluster_id_ok("FetchSnapshot", request.cluster_id):
            return m.fetch_snapshot_response(ErrorCode.inconsistent_cluster_id)
        if len(request.topics) != 1 or len(request.topics[0].partitions) != 1:
            self._refused("FetchSnapshot", "it does not name exactly one partition")
            return m.fetch_snapshot_response(ErrorCode.invalid_request)
        if not m.single_partition(request):
            return m.fetch_snapshot_response(ErrorCode.none, ErrorCode.unknown_topic_or_partition)
        part = request.topics[0].partitions[0]
        leader, epoch = self._leader_and_epoch()
        error = self._validate_leader_only(part.current_leader_epoch)
        sid = (int(part.snapshot_id.end_offset), int(part.snapshot_id.epoch))
        size = None if sid == (0, 0) else self.log.snapshot_size(sid)
        read = None
        if error is None:
            if size is None:
                error = ErrorCode.snapshot_not_found
            elif not 0 <= part.position < size:
                error = ErrorCode.position_out_of_range
            else:
                read = self.log.read_snapshot(sid, int(part.position), min(
                    int(request.max_bytes), self.config.fetch_snapshot_max_bytes))
                error = ErrorCode.snapshot_not_found if read is None else None  # deleted since
        if read is None:
            return m.fetch_snapshot_response(ErrorCode.none, error or ErrorCode.none,
                                             leader_id=leader, epoch=epoch)
        state = self.quorum.state
        assert isinstance(state, Leader)
        state.progress.update_check_quorum(int(request.replica_id), now_ms)
        return m.fetch_snapshot_response(
            ErrorCode.none, leader_id=leader, epoch=epoch, snapshot=sid, size=read[0],
            position=int(part.position), records=read[1])

    def _handle_describe_quorum(self, request: m.DescribeQuorumRequest,
                                now_ms: int) -> m.DescribeQuorumResponse:
        if not m.single_partition(request):
            return m.describe_quorum_response(ErrorCode.unknown_topic_or_partition)
        state = self.quorum.state
        if not isinstance(state, Leader):
            # Kafka's answer names no leader: leader 0, epoch 0, HW 0 (checked on 4.3.1).
            return m.describe_quorum_response(ErrorCode.not_leader_or_follower, leader_id=0,
                                              epoch=0, high_watermark=0)
        voters, observers = state.progress.describe(now_ms)
        hw = state.progress.high_watermark
        return m.describe_quorum_response(
            ErrorCode.none, leader_id=self.node_id, epoch=state.epoch,
            high_watermark=-1 if hw is None else hw, voters=voters, observers=observers)

    # -- responses ------------------------------------------------------------------------

    def _handle_common(self, error: ErrorCode, leader_id: int, epoch: int,
                       now_ms: int) -> bool | None:
        """Kafka's ``maybeHandleCommonResponse``: None when the caller goes on; else
        whether the response was handled without error."""
        leader = None if leader_id < 0 else leader_id
        if epoch < self.quorum.epoch or error is ErrorCode.unknown_leader_epoch:
            return True  # stale, or the peer is behind us: nothing to learn
        if epoch > self.quorum.epoch or (leader is not None and self.quorum.leader_id is None
                                         and not isinstance(self.quorum.state, Leader)):
            self._maybe_transition(leader, epoch, now_ms)
            return True
        if error in (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower):
            return False
        return None

    def _handle_response(self, source: int, kind: str, response: m.RaftResponse,
                         now_ms: int) -> bool:
        if response.error_code is ErrorCode.unsupported_version and kind == "prevote" \
                and isinstance(self.quorum.state, Prospective):
            # A voter too old for pre-vote: stand for election at once, as Kafka does.
            self._transition_to_candidate(now_ms)
            return True
        if response.error_code is not ErrorCode.none:
            logger.info("raft node %s: %s from node %s answered %s", self.node_id, kind,
                        source, response.error_code.name)
            return False
        if isinstance(response, m.FetchResponse):
            return self._handle_fetch_response(source, response, now_ms)
        if isinstance(response, m.DescribeQuorumResponse) or not m.single_partition(response):
            logger.info("raft node %s: a %s answer from node %s does not name exactly "
                        "__cluster_metadata-0", self.node_id, kind, source)
            return False
        part = response.topics[0].partitions[0]
        handled = self._handle_common(part.error_code, part.leader_id, part.leader_epoch,
                                      now_ms)
        if handled is not None:
            return handled
        if part.error_code is not ErrorCode.none:
            return False
        state = self.quorum.state
        if isinstance(response, m.VoteResponse):
            expected = "prevote" if isinstance(state, Prospective) else "vote"
            if isinstance(state, Prospective | Candidate) and kind == expected:
                if part.vote_granted:
                    state.election.record_granted(source)
                    self._maybe_transition_forward(now_ms)
                else:
                    state.election.record_rejected(source)
                    # A lost pre-vote returns at once; a rejected candidate waits out
                    # its election timeout, then becomes prospective again.
                    if isinstance(state, Prospective) and state.election.is_rejected():
                        self._prospective_lost(state, now_ms)
        elif isinstance(response, m.BeginQuorumEpochResponse):
            if isinstance(state, Leader):
                state.progress.acknowledge(source)
        elif isinstance(response, m.EndQuorumEpochResponse) and isinstance(state, Resigned):
            state.unacked_voters.discard(source)
        return True

    def _handle_fetch_response(self, source: int, response: m.FetchResponse,
                               now_ms: int) -> bool:
        if len(response.responses) != 1 or len(response.responses[0].partitions) != 1:
            return False
        data = response.responses[0].partitions[0]
        handled = self._handle_common(data.error_code, data.current_leader.leader_id,
                                      data.current_leader.leader_epoch, now_ms)
        if handled is not None:
            return handled
        if data.error_code is not ErrorCode.none:
            return False
        state = self.quorum.state
        if not isinstance(state, Follower) or state.leader_id != source:
            return True
        state.has_fetched_from_leader = True
        state.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        if data.diverging_epoch.epoch >= 0:
            our_epoch_end = self.log.end_offset_for_epoch(data.diverging_epoch.epoch)[1]
            truncate_to = min(data.diverging_epoch.end_offset, our_epoch_end)
            if truncate_to < self.high_watermark:
                self._die(f"leader {source} diverges at {truncate_to}, below the high "
                          f"watermark {self.high_watermark}")
                return True
            self.log.truncate_to(truncate_to)
            self._flush_requested = min(self._flush_requested, truncate_to)
            return True
        if data.snapshot_id.epoch >= 0:
            self._die(f"leader {source} sent snapshot {data.snapshot_id.end_offset}-"
                      f"{data.snapshot_id.epoch}: FetchSnapshot is not implemented yet")
            return True
        if data.records:
            self.log.append_as_follower(bytes(data.records))
            self._request_flush()
        if data.high_watermark >= 0:
            self._commit(min(data.high_watermark, self.log.end_offset))
        return True
