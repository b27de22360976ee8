"""Each rule of the sans-io Raft core on its own: the quorum-state file, vote granting,
timers, the leader's high watermark and check quorum, start-up states, and the
request validation and error codes of Kafka 4.3.1's KafkaRaftClient."""

from __future__ import annotations

import io
import logging
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from plugins.metadata_kraft.raft import messages as m
from plugins.metadata_kraft.raft import quorum_store
from plugins.metadata_kraft.raft.core import (
    Commit,
    Fatal,
    Flush,
    NotLeaderError,
    PersistQuorumState,
    RaftNode,
    Respond,
    Send,
)
from plugins.metadata_kraft.raft.election import (
    EpochElection,
    ReplicaKey,
    StateKind,
    can_grant_vote,
    random_election_timeout_ms,
    strict_exponential_backoff_ms,
)
from plugins.metadata_kraft.raft.leader import OBSERVER_SESSION_TIMEOUT_MS, LeaderProgress
from plugins.metadata_kraft.raft.log import InMemoryRaftLog
from plugins.metadata_kraft.raft.quorum_store import ElectionRecord, QuorumStateError
from plugins.metadata_kraft.raft.state import (
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

VOTERS = VoterSet(frozenset({1, 2, 3}))

# -- quorum-state ---------------------------------------------------------------------


def test_quorum_state_v1_is_kafkas_text() -> None:
    directory = uuid.UUID("27c68003-c7cb-42dd-9baa-cd494fec4c81")
    text = quorum_store.encode(ElectionRecord(2, None, 1, directory), 1)
    assert text == ('{"leaderId":-1,"leaderEpoch":2,"votedId":1,'
                    '"votedDirectoryId":"J8aAA8fLQt2bqs1JT-xMgQ","data_version":1}')
    assert quorum_store.parse(text) == (ElectionRecord(2, None, 1, directory), 1)


def test_quorum_state_v0_is_kafkas_text() -> None:
    text = quorum_store.encode(ElectionRecord(5, 3, 3), 0, frozenset({3, 1, 2}))
    assert text == ('{"clusterId":"","leaderId":3,"leaderEpoch":5,"votedId":3,'
                    '"appliedOffset":0,"currentVoters":[{"voterId":1},{"voterId":2},'
                    '{"voterId":3}],"data_version":0}')
    assert quorum_store.parse(text) == (ElectionRecord(5, 3, 3), 0)


def test_quorum_state_without_a_vote_writes_the_zero_uuid() -> None:
    text = quorum_store.encode(ElectionRecord(1), 1)
    assert '"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA"' in text
    assert quorum_store.parse(text)[0] == ElectionRecord(1)


@pytest.mark.parametrize("text, problem", [
    ("", "empty"),
    ("{not json", "not JSON"),
    ('{"leaderId":-1,"leaderEpoch":1,"votedId":-1}', "no data_version"),
    ('{"leaderId":-1,"leaderEpoch":1,"votedId":-1,"data_version":2}', "0-1"),
    ('{"leaderId":"x","leaderEpoch":1,"votedId":-1,"data_version":1}', "leaderId"),
])
def test_a_bad_quorum_state_is_refused_with_its_reason(text: str, problem: str) -> None:
    with pytest.raises(QuorumStateError, match=problem):
        quorum_store.parse(text)


def test_quorum_state_write_is_atomic_and_read_back(tmp_path: Path) -> None:
    assert quorum_store.read(tmp_path) == ElectionRecord()  # no file: epoch 0
    record = ElectionRecord(7, 2, 2)
    quorum_store.write_atomic(tmp_path, quorum_store.encode(record, 1))
    assert quorum_store.read(tmp_path) == record
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quorum-state"]


# -- elections ------------------------------------------------------------------------

A, B = ReplicaKey(1), ReplicaKey(2)


@pytest.mark.parametrize("kind, kwargs, pre_vote, up_to_date, granted", [
    # Unattached/Prospective: a pre-vote on the log alone
    (StateKind.UNATTACHED, {"voted": B}, True, True, True),
    (StateKind.UNATTACHED, {}, True, False, False),
    # a real vote: the same candidate again (no log check), never another one
    (StateKind.UNATTACHED, {"voted": A}, False, False, True),
    (StateKind.UNATTACHED, {"voted": B}, False, True, False),
    (StateKind.PROSPECTIVE, {"voted": B}, False, True, False),
    # a known leader: no real vote
    (StateKind.UNATTACHED, {"leader_id": 3}, False, True, False),
    (StateKind.UNATTACHED, {}, False, True, True),
    (StateKind.UNATTACHED, {}, False, False, False),
    # a follower: pre-vote only, and only before it fetched from its leader
    (StateKind.FOLLOWER, {"has_fetched_from_leader": False}, True, True, True),
    (StateKind.FOLLOWER, {"has_fetched_from_leader": True}, True, True, False),
    (StateKind.FOLLOWER, {"has_fetched_from_leader": False}, False, True, False),
    # candidate and resigned: pre-vote only
    (StateKind.CANDIDATE, {}, True, True, True),
    (StateKind.CANDIDATE, {}, False, True, False),
    (StateKind.RESIGNED, {}, True, True, True),
    (StateKind.RESIGNED, {}, True, False, False),
    (StateKind.LEADER, {}, True, True, False),
    (StateKind.LEADER, {}, False, True, False),
])
def test_vote_granting_follows_kafkas_can_grant_vote(
        kind: StateKind, kwargs: dict[str, Any], pre_vote: bool, up_to_date: bool,
        granted: bool) -> None:
    assert can_grant_vote(kind, candidate=A, log_up_to_date=up_to_date, pre_vote=pre_vote,
                          **kwargs) is granted


def test_a_vote_recorded_without_directory_matches_any_directory() -> None:
    assert ReplicaKey(1).matches(ReplicaKey(1, uuid.uuid4()))
    assert not ReplicaKey(1, uuid.uuid4()).matches(ReplicaKey(1, uuid.uuid4()))


def test_tally_grants_on_a_majority_and_rejects_when_it_is_out_of_reach() -> None:
    election = EpochElection(frozenset({1, 2, 3, 4, 5}))
    election.record_granted(1)
    election.record_granted(2)
    assert not election.is_granted()
    election.record_rejected(3)
    election.record_rejected(4)
    assert not election.is_rejected()
    assert not election.record_granted(3)  # a rejection stands
    assert not election.record_granted(9)  # not a voter
    election.record_rejected(5)
    assert election.is_rejected()
    assert election.unrecorded() == frozenset()


def test_election_timeout_is_timeout_plus_random_timeout() -> None:
    rng = random.Random(1)
    draws = {random_election_timeout_ms(1000, rng) for _ in range(2000)}
    assert min(draws) >= 1000 and max(draws) < 2000 and len(draws) > 500


@pytest.mark.parametrize("position, total, expected", [
    (0, 3, 0), (1, 3, 250), (2, 3, 500), (3, 3, 1000), (-1, 3, 1000),
    (1, 1, 1000), (1, 2, 500), (4, 5, 496), (1, 5, 62),  # integer shifts, as Java
])
def test_end_quorum_epoch_successor_backoff(position: int, total: int, expected: int) -> None:
    assert strict_exponential_backoff_ms(position, total, 1000) == expected


# -- the leader's high watermark and check quorum ---------------------------------------


def _progress(voters: set[int], epoch_start: int = 10, now: int = 0) -> LeaderProgress:
    return LeaderProgress(local_id=1, epoch=3, voters=frozenset(voters),
                          epoch_start_offset=epoch_start, check_quorum_timeout_ms=3000,
                          now_ms=now)


def test_high_watermark_is_the_majority_offset_past_the_epoch_start() -> None:
    progress = _progress({1, 2, 3})
    assert not progress.update_replica(2, 10, 12, 0)  # at the epoch start: not yet
    assert not progress.update_local(12, 0)
    assert progress.high_watermark is None
    assert progress.update_replica(2, 11, 12, 1)
    assert progress.high_watermark == 11
    # index voters/2 of the offsets sorted descending: the slowest of a majority
    assert progress.update_replica(3, 12, 12, 2)
    assert progress.high_watermark == 12


def test_high_watermark_never_moves_back_and_observers_do_not_count() -> None:
    progress = _progress({1, 2, 3}, epoch_start=0)
    progress.update_local(20, 0)
    progress.update_replica(2, 15, 20, 0)
    assert progress.high_watermark == 15
    assert not progress.update_replica(2, 5, 20, 1)  # a restarted voter, lost its tail
    assert progress.high_watermark == 15
    assert not progress.update_replica(9, 20, 20, 2)  # an observer
    assert progress.high_watermark == 15


def test_the_leaders_own_offset_counts_only_once_flushed() -> None:
    progress = _progress({1, 2, 3}, epoch_start=0)
    progress.update_replica(2, 8, 20, 0)
    progress.update_replica(3, 8, 20, 0)
    assert progress.high_watermark == 8  # the leader has flushed nothing yet
    progress.update_local(6, 0)
    with pytest.raises(ValueError, match="went back"):
        progress.update_local(5, 0)


def test_check_quorum_expires_without_a_majority_of_fetches() -> None:
    progress = _progress({1, 2, 3, 4, 5})
    assert progress.time_until_check_quorum_expires(2999) == 1
    progress.update_replica(2, 0, 0, 2000)  # one voter + the leader: not a majority
    assert progress.time_until_check_quorum_expires(3000) == 0
    progress.update_replica(3, 0, 0, 3000)
    assert progress.time_until_check_quorum_expires(3000) == 3000
    assert _progress({1}).time_until_check_quorum_expires(10**9) > 0  # single voter


def test_describe_quorum_drops_observers_idle_for_five_minutes() -> None:
    progress = _progress({1, 2, 3})
    progress.update_replica(7, 0, 0, 1000)
    progress.update_replica(8, 0, 0, 2000)
    voters, observers = progress.describe(1000 + OBSERVER_SESSION_TIMEOUT_MS)
    assert [v.replica_id for v in voters] == [1, 2, 3]
    assert [o.replica_id for o in observers] == [8]


# -- start-up and transitions ---------------------------------------------------------


def _quorum(local_id: int = 1, voters: VoterSet = VOTERS) -> QuorumState:
    return QuorumState(local_id, voters, RaftConfig(), random.Random(0))


@pytest.mark.parametrize("record, log_epoch, state_type, epoch", [
    (ElectionRecord(3), 5, Unattached, 5),  # quorum-state behind the log
    (ElectionRecord(4, 1, 1), 4, Resigned, 4),  # we led: never vote or lead again in it
    (ElectionRecord(4, None, 1), 3, Candidate, 4),  # we voted for ourselves
    (ElectionRecord(4, 2, 2), 3, Follower, 4),
    (ElectionRecord(4, None, 2), 3, Unattached, 4),
    (ElectionRecord(), 0, Unattached, 0),
])
def test_start_up_state(record: ElectionRecord, log_epoch: int, state_type: type,
                        epoch: int) -> None:
    quorum = _quorum()
    quorum.initialize(record, log_epoch, 0)
    assert type(quorum.state) is state_type and quorum.epoch == epoch


def test_only_durable_changes_are_persisted() -> None:
    quorum = _quorum()
    quorum.initialize(ElectionRecord(1), 0, 0)
    assert quorum.take_persist() is None
    quorum.transition_to_prospective(0)  # memory only
    assert quorum.take_persist() is None
    quorum.transition_to_candidate(0)
    assert quorum.take_persist() == ElectionRecord(2, None, 1)
    assert isinstance(quorum.state, Candidate)
    quorum.state.election.record_granted(2)
    quorum.transition_to_leader(0, 0)
    assert quorum.take_persist() == ElectionRecord(2, 1, 1)
    quorum.transition_to_resigned([2, 3], 0)  # memory only
    assert quorum.take_persist() is None
    quorum.transition_to_unattached(3, 0)
    assert quorum.take_persist() == ElectionRecord(3)


def test_observers_never_start_elections() -> None:
    quorum = _quorum(local_id=9)
    quorum.initialize(ElectionRecord(), 0, 0)
    assert isinstance(quorum.state, Unattached)
    assert quorum.state.election_deadline_ms > 10**12
    with pytest.raises(ValueError):
        quorum.transition_to_prospective(0)


def test_a_second_leader_in_one_epoch_is_refused() -> None:
    quorum = _quorum()
    quorum.initialize(ElectionRecord(4, 2, None), 0, 0)
    with pytest.raises(ValueError, match="two leaders"):
        quorum.transition_to_follower(4, 3, 0)


# -- the node: requests, validation, error codes ----------------------------------------


NO_ELECTION = ElectionRecord()


def _node(node_id: int = 1, record: ElectionRecord = NO_ELECTION,
          log: InMemoryRaftLog | None = None, voters: VoterSet = VOTERS) -> RaftNode:
    return RaftNode(node_id=node_id, voters=voters, log=log or InMemoryRaftLog(),
                    election=record, now_ms=0, rng=random.Random(0), cluster_id="kraft")


def _responses(actions: list[Any]) -> list[Any]:
    return [a.response for a in actions if isinstance(a, Respond)]


def _vote(node: RaftNode, candidate: int, epoch: int, last_epoch: int = 0,
          last_offset: int = 0, pre_vote: bool = False, cluster_id: str | None = "kraft",
          voter_id: int = -1, now: int = 0) -> tuple[Any, list[Any]]:
    actions = node.on_request(1, m.vote_request(cluster_id, voter_id, candidate, epoch,
                                                last_epoch, last_offset, pre_vote), now)
    (response,) = _responses(actions)
    return response, actions


def _vote_part(response: m.VoteResponse) -> Any:
    return response.topics[0].partitions[0]


def test_a_granted_vote_is_persisted_before_the_answer_and_survives_a_restart() -> None:
    node = _node()
    response, actions = _vote(node, candidate=2, epoch=1)
    assert _vote_part(response).vote_granted
    kinds = [type(a) for a in actions if isinstance(a, PersistQuorumState | Respond)]
    assert kinds == [PersistQuorumState, PersistQuorumState, Respond]
    persisted = [a.record for a in actions if isinstance(a, PersistQuorumState)][-1]
    assert persisted == ElectionRecord(1, None, 2)
    # Another candidate in the same epoch is refused, also after a restart.
    assert not _vote_part(_vote(node, candidate=3, epoch=1)[0]).vote_granted
    restarted = _node(record=persisted)
    assert not _vote_part(_vote(restarted, candidate=3, epoch=1)[0]).vote_granted
    assert _vote_part(_vote(restarted, candidate=2, epoch=1)[0]).vote_granted


def test_a_node_outside_the_voter_set_votes_as_kafkas_does() -> None:
    observer = _node(9)  # a KIP-853 voter may not know yet that it is one
    response, _ = _vote(observer, candidate=2, epoch=1)
    assert _vote_part(response).vote_granted
    assert observer.quorum.voted() == ReplicaKey(2)


def test_a_pre_vote_changes_nothing_and_checks_the_log() -> None:
    log = InMemoryRaftLog()
    log.append_as_leader([b"a", b"b"], 3)
    node = _node(record=ElectionRecord(3), log=log)
    response, actions = _vote(node, candidate=2, epoch=3, last_epoch=3, last_offset=2,
                              pre_vote=True)
    assert _vote_part(response).vote_granted
    assert not [a for a in actions if isinstance(a, PersistQuorumState)]
    assert node.quorum.voted() is None and node.quorum.epoch == 3
    behind, _ = _vote(node, candidate=2, epoch=3, last_epoch=3, last_offset=1, pre_vote=True)
    assert not _vote_part(behind).vote_granted


@pytest.mark.parametrize("kwargs, top, partition", [
    ({"cluster_id": "other"}, ErrorCode.inconsistent_cluster_id, None),
    ({"last_epoch": 2, "epoch": 2}, ErrorCode.none, ErrorCode.invalid_request),  # real vote
    ({"last_epoch": 3, "epoch": 2, "pre_vote": True}, ErrorCode.none,
     ErrorCode.invalid_request),
    ({"last_offset": -1}, ErrorCode.none, ErrorCode.invalid_request),
    ({"epoch": 1}, ErrorCode.none, ErrorCode.fenced_leader_epoch),
    ({"candidate": -5}, ErrorCode.none, ErrorCode.invalid_request),
    ({"voter_id": 3}, ErrorCode.none, ErrorCode.invalid_voter_key),
])
def test_vote_validation(kwargs: dict[str, Any], top: ErrorCode,
                         partition: ErrorCode | None) -> None:
    node = _node(record=ElectionRecord(2))
    args: dict[str, Any] = {"candidate": 2, "epoch": 3, **kwargs}
    response, _ = _vote(node, **args)
    assert response.error_code is top
    if partition is not None:
        assert _vote_part(response).error_code is partition


def test_a_bad_request_is_one_log_line_naming_the_problem(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # A logging.config.dictConfig elsewhere in the session disables existing loggers.
    monkeypatch.setattr(logging.getLogger("plugins.metadata_kraft.raft.core"), "disabled",
                        False)
    node = _node(record=ElectionRecord(2))
    with caplog.at_level("INFO", logger="plugins.metadata_kraft.raft.core"):
        _vote(node, candidate=2, epoch=3, cluster_id="other")
    (record,) = caplog.records
    assert "refuses a Vote request" in record.getMessage()
    assert "'other'" in record.getMessage() and record.exc_info is None


def test_a_pre_vote_with_equal_last_epoch_is_legal() -> None:
    node = _node(record=ElectionRecord(2))
    response, _ = _vote(node, candidate=2, epoch=2, last_epoch=2, pre_vote=True)
    assert _vote_part(response).error_code is ErrorCode.none


def test_a_request_for_another_partition_is_invalid() -> None:
    node = _node()
    request = m.vote_request("kraft", -1, 2, 1, 0, 0, False)
    bad = type(request)(cluster_id="kraft", voter_id=request.voter_id, topics=(
        type(request.topics[0])(topic_name=request.topics[0].topic_name,
                                partitions=request.topics[0].partitions * 2),))
    (response,) = _responses(node.on_request(1, bad, 0))
    assert response.error_code is ErrorCode.invalid_request


def _single_leader(node_id: int = 1) -> tuple[RaftNode, InMemoryRaftLog]:
    """A node of a one-voter quorum, elected and with its LeaderChange committed."""
    log = InMemoryRaftLog()
    node = _node(node_id, log=log, voters=VoterSet(frozenset({node_id})))
    actions = node.on_tick(10**4)
    assert isinstance(node.quorum.state, Leader)
    assert any(isinstance(a, Flush) for a in actions)
    log.flush(log.end_offset)
    assert Commit(1) in node.on_flushed(10**4)
    return node, log


def test_a_single_voter_elects_itself_and_commits_once_flushed() -> None:
    node, log = _single_leader()
    actions, last = node.append([b"x", b"y"], 10**4)
    assert last == 2 and not [a for a in actions if isinstance(a, Commit)]
    log.flush(log.end_offset)
    assert Commit(3) in node.on_flushed(10**4)
    with pytest.raises(NotLeaderError):
        _node(2).append([b"z"], 0)


def _fetch(node: RaftNode, replica: int, epoch: int, offset: int, last_epoch: int,
           max_wait: int = 0, now: int = 10**4) -> list[Any]:
    return _responses(node.on_request(7, m.fetch_request(
        "kraft", replica, epoch, offset, last_epoch, max_wait, 1 << 20), now))


def _fetch_part(response: m.FetchResponse) -> Any:
    return response.responses[0].partitions[0]


@pytest.mark.parametrize("epoch, offset, last_epoch, error", [
    (0, 0, 0, ErrorCode.fenced_leader_epoch),
    (2, 0, 0, ErrorCode.unknown_leader_epoch),
    (1, 0, 2, ErrorCode.invalid_request),  # LastFetchedEpoch > CurrentLeaderEpoch
    (1, -1, 0, ErrorCode.invalid_request),
])
def test_fetch_validation(epoch: int, offset: int, last_epoch: int, error: ErrorCode) -> None:
    node, _ = _single_leader()
    (response,) = _fetch(node, 5, epoch, offset, last_epoch)
    assert _fetch_part(response).error_code is error
    assert _fetch_part(response).current_leader.leader_epoch == 1


def test_fetch_from_a_non_leader_names_the_leader() -> None:
    node = _node(2, record=ElectionRecord(4, 1, None))
    (response,) = _fetch(node, 5, 4, 0, 0)
    part = _fetch_part(response)
    assert part.error_code is ErrorCode.not_leader_or_follower
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (1, 4)


def test_fetch_of_a_diverging_log_answers_the_divergence() -> None:
    node, _ = _single_leader()
    node.append([b"a"], 10**4)
    # A replica claiming epoch 0 up to offset 3: our epoch 0 ends at offset 0.
    (response,) = _fetch(node, 5, 1, 3, 0)
    part = _fetch_part(response)
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (0, 0)
    assert not part.records


def test_a_fetch_with_nothing_new_waits_for_an_append_or_max_wait() -> None:
    node, log = _single_leader()
    assert _fetch(node, 5, 1, log.end_offset, 1, max_wait=500) == []
    actions, _ = node.append([b"new"], 10**4 + 1)
    (response,) = _responses(actions)
    assert _fetch_part(response).records
    assert _fetch(node, 5, 1, log.end_offset, 1, max_wait=500) == []
    (empty,) = _responses(node.on_tick(10**4 + 500))
    assert not _fetch_part(empty).records and _fetch_part(empty).high_watermark == 1


def test_describe_quorum_on_the_leader_and_elsewhere() -> None:
    node, _ = _single_leader()
    _fetch(node, 8, 1, 0, 0)  # an observer
    (response,) = _responses(node.on_request(3, m.DescribeQuorumRequest(topics=(
        m.dq_req.TopicData(topic_name=m.TopicName(m.METADATA_TOPIC),
                           partitions=(m.dq_req.PartitionData(partition_index=m.i32(0)),)),)),
        10**4))
    part = response.topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.leader_epoch, part.high_watermark) == (
        ErrorCode.none, 1, 1, 1)
    assert [v.replica_id for v in part.current_voters] == [1]
    assert [(o.replica_id, o.log_end_offset) for o in part.observers] == [(8, 0)]
    follower = _node(2, record=ElectionRecord(1, 1, None))
    (other,) = _responses(follower.on_request(3, m.DescribeQuorumRequest(topics=(
        m.dq_req.TopicData(topic_name=m.TopicName("other"),
                           partitions=(m.dq_req.PartitionData(partition_index=m.i32(0)),)),)),
        0))
    assert other.topics[0].partitions[0].error_code is ErrorCode.unknown_topic_or_partition
    (mine,) = _responses(follower.on_request(4, m.DescribeQuorumRequest(topics=(
        m.dq_req.TopicData(topic_name=m.TopicName(m.METADATA_TOPIC),
                           partitions=(m.dq_req.PartitionData(partition_index=m.i32(0)),)),)),
        0))
    part = mine.topics[0].partitions[0]
    # Kafka's follower does not name the leader here: 0, 0, 0 (docs/kraft-reference-facts).
    assert (part.error_code, part.leader_id, part.leader_epoch, part.high_watermark) == (
        ErrorCode.not_leader_or_follower, 0, 0, 0)


def _begin(node: RaftNode, leader: int, epoch: int) -> Any:
    (response,) = _responses(node.on_request(2, m.begin_quorum_epoch_request(
        "kraft", node.node_id, leader, epoch), 0))
    return response.topics[0].partitions[0]


def test_begin_quorum_epoch_makes_a_follower_and_fences_old_epochs() -> None:
    node = _node(2, record=ElectionRecord(3))
    part = _begin(node, 1, 4)
    assert (part.error_code, part.leader_id, part.leader_epoch) == (ErrorCode.none, 1, 4)
    assert isinstance(node.quorum.state, Follower)
    assert _begin(node, 3, 2).error_code is ErrorCode.fenced_leader_epoch


def test_end_quorum_epoch_lets_the_first_preferred_successor_start_at_once() -> None:
    first = _node(2, record=ElectionRecord(4, 1, None))
    first.on_request(3, m.end_quorum_epoch_request("kraft", 1, 4, [2, 3]), 100)
    assert isinstance(first.quorum.state, Prospective)
    second = _node(3, record=ElectionRecord(4, 1, None))
    second.on_request(3, m.end_quorum_epoch_request("kraft", 1, 4, [2, 3]), 100)
    assert isinstance(second.quorum.state, Follower)
    assert second.quorum.state.fetch_deadline_ms == 100 + 500  # (1000 >> 1) << 0


def test_a_follower_that_fetched_from_its_leader_refuses_pre_votes() -> None:
    node = _node(2, record=ElectionRecord(4, 1, None))
    (send,) = [a for a in node.on_tick(0) if isinstance(a, Send)]
    assert isinstance(send.request, m.FetchRequest) and send.destination == 1
    node.on_response(1, send.correlation_id, m.fetch_response(
        ErrorCode.none, leader_id=1, epoch=4, high_watermark=0), 1)
    response, _ = _vote(node, candidate=3, epoch=4, pre_vote=True)
    assert not _vote_part(response).vote_granted


def test_divergence_below_the_high_watermark_stops_the_node() -> None:
    log = InMemoryRaftLog()
    log.append_as_leader([b"a", b"b", b"c"], 1)
    log.flush(3)
    node = _node(2, record=ElectionRecord(2, 1, None), log=log)
    sends = [a for a in node.on_tick(0) if isinstance(a, Send)]
    (send,) = [a for a in node.on_response(1, sends[0].correlation_id, m.fetch_response(
        ErrorCode.none, leader_id=1, epoch=2, high_watermark=3), 1) if isinstance(a, Send)]
    assert node.high_watermark == 3
    actions = node.on_response(1, send.correlation_id, m.fetch_response(
        ErrorCode.none, leader_id=1, epoch=2, diverging=(1, 1)), 3)
    assert [a for a in actions if isinstance(a, Fatal)]
    assert log.end_offset == 3  # nothing committed was truncated


@pytest.mark.parametrize("build", [
    lambda: m.vote_request("c", 2, 1, 3, 2, 10, True),
    lambda: m.vote_response(ErrorCode.none, ErrorCode.none, 1, 3, True),
    lambda: m.begin_quorum_epoch_request("c", 2, 1, 3),
    lambda: m.begin_quorum_epoch_response(ErrorCode.none, ErrorCode.none, 1, 3),
    lambda: m.end_quorum_epoch_request("c", 1, 3, [2, 3]),
    lambda: m.end_quorum_epoch_response(ErrorCode.none, ErrorCode.none, 1, 3),
    lambda: m.fetch_request("c", 2, 3, 10, 2, 500, 1 << 20),
    lambda: m.fetch_response(ErrorCode.none, leader_id=1, epoch=3, high_watermark=5,
                             diverging=(2, 7), records=b"\x00" * 4),
    lambda: m.describe_quorum_response(ErrorCode.not_leader_or_follower),
])
def test_every_message_round_trips_through_kios_wire_codec(build: Any) -> None:
    message = build()
    buffer = io.BytesIO()
    entity_writer(type(message))(buffer, message)
    decoded, _ = entity_reader(type(message))(memoryview(buffer.getvalue()), 0)
    assert decoded == message


# -- elections and timeouts, end to end on one node -----------------------------------


def _sends(actions: list[Any]) -> list[Send]:
    return [a for a in actions if isinstance(a, Send)]


def _prospective(node_id: int = 1) -> tuple[RaftNode, list[Send]]:
    """A voter whose election timeout passed: Prospective, its pre-votes sent."""
    node = _node(node_id, record=ElectionRecord(3))
    sends = _sends(node.on_tick(10**4))
    assert isinstance(node.quorum.state, Prospective) and node.quorum.epoch == 3
    assert {s.destination for s in sends} == {2, 3}
    assert all(s.request.topics[0].partitions[0].pre_vote for s in sends)
    return node, sends


def _answer_votes(node: RaftNode, sends: list[Send], granted: bool, now: int) -> list[Any]:
    actions: list[Any] = []
    for send in sends:
        part = send.request.topics[0].partitions[0]
        actions += node.on_response(send.destination, send.correlation_id, m.vote_response(
            ErrorCode.none, ErrorCode.none, -1, part.replica_epoch, granted), now)
    return actions


def _candidate() -> tuple[RaftNode, list[Send]]:
    """A voter whose pre-vote won: Candidate in epoch 4, its real votes sent."""
    node, pre_votes = _prospective()
    actions = _answer_votes(node, pre_votes[:1], True, 10**4 + 1)
    assert isinstance(node.quorum.state, Candidate) and node.quorum.epoch == 4
    persist = [i for i, a in enumerate(actions) if isinstance(a, PersistQuorumState)]
    votes = _sends(actions)
    assert persist and votes and persist[0] < actions.index(votes[0])  # own vote first
    assert not any(v.request.topics[0].partitions[0].pre_vote for v in votes)
    return node, votes


def test_a_lost_pre_vote_returns_at_once() -> None:
    node, pre_votes = _prospective()
    _answer_votes(node, pre_votes, False, 10**4 + 1)
    assert isinstance(node.quorum.state, Unattached) and node.quorum.epoch == 3


def test_a_won_pre_vote_stands_for_election_and_a_won_vote_leads() -> None:
    node, votes = _candidate()
    actions = _answer_votes(node, votes[:1], True, 10**4 + 2)
    assert isinstance(node.quorum.state, Leader)
    assert PersistQuorumState(ElectionRecord(4, 1, 1)) in actions
    assert {type(s.request) for s in _sends(actions)} == {m.BeginQuorumEpochRequest}


def test_a_rejected_candidate_waits_out_its_timeout_then_is_prospective_again() -> None:
    node, votes = _candidate()
    state = node.quorum.state
    assert isinstance(state, Candidate)
    _answer_votes(node, votes, False, 10**4 + 2)
    assert node.quorum.state is state  # no backoff, no new election yet
    node.on_tick(state.election_deadline_ms)
    assert isinstance(node.quorum.state, Prospective) and node.quorum.epoch == 4


def test_a_prospective_facing_a_voter_without_pre_vote_stands_at_once() -> None:
    node, pre_votes = _prospective()
    node.on_response(pre_votes[0].destination, pre_votes[0].correlation_id,
                     m.vote_response(ErrorCode.unsupported_version), 10**4)
    assert isinstance(node.quorum.state, Candidate)


def test_a_voter_follower_times_out_into_prospective() -> None:
    voter = _node(2, record=ElectionRecord(4, 1, None))
    voter.on_tick(2000)
    assert isinstance(voter.quorum.state, Prospective)


def test_an_observer_whose_leader_is_silent_asks_the_other_voters() -> None:
    observer = _node(9, record=ElectionRecord(4, 1, None))
    (to_leader,) = _sends(observer.on_tick(0))
    assert to_leader.destination == 1
    (to_voter,) = _sends(observer.on_tick(2000))  # request timeout: the leader is silent
    assert to_voter.destination in {2, 3}
    assert isinstance(observer.quorum.state, Follower)
    observer.on_response(to_voter.destination, to_voter.correlation_id, m.fetch_response(
        ErrorCode.none, ErrorCode.not_leader_or_follower, leader_id=2, epoch=5), 2001)
    state = observer.quorum.state
    assert isinstance(state, Follower) and (state.leader_id, state.epoch) == (2, 5)


def test_an_observer_finds_the_leader_through_any_voter() -> None:
    observer = _node(9)
    (send,) = _sends(observer.on_tick(0))
    assert isinstance(send.request, m.FetchRequest) and send.destination in {1, 2, 3}
    observer.on_response(send.destination, send.correlation_id, m.fetch_response(
        ErrorCode.none, ErrorCode.not_leader_or_follower, leader_id=3, epoch=6), 5)
    state = observer.quorum.state
    assert isinstance(state, Follower) and (state.leader_id, state.epoch) == (3, 6)


def test_a_leader_without_fetches_from_a_majority_resigns() -> None:
    node, votes = _candidate()
    _answer_votes(node, votes[:1], True, 10**4)
    assert isinstance(node.quorum.state, Leader)
    deadline = 10**4 + 3000  # 1.5 x controller.quorum.fetch.timeout.ms
    node.on_tick(deadline - 1)
    assert isinstance(node.quorum.state, Leader)
    actions = node.on_tick(deadline)
    assert isinstance(node.quorum.state, Resigned)
    assert {type(s.request) for s in _sends(actions)} == {m.EndQuorumEpochRequest}
