"""kernel/replication_control.py: the controller rules, which both metadata backends run: Kafka's
replica placement with and without racks (AdminUtils, checked against the layouts of
Kafka's AdminRackAwareTest), leader elections and reassignment targets."""

from __future__ import annotations

from collections import Counter

import pytest

from kernel.cluster import NO_LEADER, ElectionType, PartitionState
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.replication_control import (
    RACKS_INCOMPLETE,
    assign_replicas,
    offline_election,
    rack_alternated,
    reassignment,
    requested_election,
)

RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_brokers_are_alternated_over_racks() -> None:
    assert rack_alternated(RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in RACKS.items() if b != 5}) == [0, 3, 1, 4, 2]


def test_rack_aware_layout_is_kafkas() -> None:
    layout = assign_replicas(sorted(RACKS), 7, 3, start_index=0, replica_shift=0, racks=RACKS)
    assert layout == [(0, 3, 1), (3, 1, 5), (1, 5, 4), (5, 4, 2), (4, 2, 0), (2, 0, 3),
                      (0, 4, 2)]


@pytest.mark.parametrize("start", [0, 1, 4])
def test_every_partition_spans_the_racks_and_leaders_spread(start: int) -> None:
    racks = {b: f"r{b % 3}" for b in range(9)}
    layout = assign_replicas(sorted(racks), 18, 3, start_index=start, replica_shift=start,
                             racks=racks)
    for replicas in layout:
        assert len(set(replicas)) == 3
        assert {racks[b] for b in replicas} == {"r0", "r1", "r2"}
    assert set(Counter(r[0] for r in layout).values()) == {2}  # each broker leads twice


def test_more_replicas_than_racks_uses_every_rack_and_no_broker_twice() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas in assign_replicas([1, 2, 3, 4], 8, 3, start_index=1, replica_shift=2,
                                    racks=racks):
        assert len(set(replicas)) == 3 and {racks[b] for b in replicas} == {"a", "b"}


def test_racks_on_some_brokers_only_are_refused_and_none_is_rack_unaware() -> None:
    with pytest.raises(KafkaError) as refused:
        assign_replicas([1, 2, 3], 1, 2, start_index=0, replica_shift=0,
                        racks={1: "a", 2: None, 3: "b"})
    assert refused.value.error_code == ErrorCode.unknown_server_error
    assert refused.value.message == RACKS_INCOMPLETE
    unaware = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0)
    assert assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0,
                           racks=dict.fromkeys(range(5))) == unaware
    assert unaware[:2] == [(0, 1, 2), (1, 2, 3)]


def state(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int,
          adding: tuple[int, ...] = (), removing: tuple[int, ...] = ()) -> PartitionState:
    return PartitionState(0, replicas, isr, leader, adding_replicas=adding,
                          removing_replicas=removing)


def test_offline_election_is_clean_unless_allowed() -> None:
    assert offline_election((1, 2, 3), (2, 3), {2, 3}, unclean=False) == (2, (2, 3))
    assert offline_election((1, 2, 3), (1,), {2, 3}, unclean=False) is None
    assert offline_election((1, 2, 3), (1,), {3, 2}, unclean=True) == (2, (2,))
    assert offline_election((1, 2, 3), (1,), set(), unclean=True) is None


def outcome(s: PartitionState, kind: ElectionType, live: set[int]) -> object:
    try:
        return requested_election(s, kind, live)
    except KafkaError as e:
        return e.error_code


def test_requested_elections_answer_as_kafkas_controller() -> None:
    preferred, unclean = ElectionType.PREFERRED, ElectionType.UNCLEAN
    assert outcome(state((1, 2), (1, 2), 1), preferred, {1, 2}) == ErrorCode.election_not_needed
    assert outcome(state((1, 2), (1, 2), 2), preferred, {1, 2}) == (1, (1, 2))
    assert outcome(state((1, 2), (2,), 2), preferred, {1, 2}) == \
        ErrorCode.preferred_leader_not_available
    assert outcome(state((1, 2), (1, 2), 2), preferred, {2}) == \
        ErrorCode.preferred_leader_not_available
    assert outcome(state((1, 2), (1, 2), 2), unclean, {1, 2}) == ErrorCode.election_not_needed
    assert outcome(state((1, 2), (1,), NO_LEADER), unclean, {2}) == (2, (2,))
    assert outcome(state((1, 2), (1,), 1), unclean, {2}) == (2, (2,))
    assert outcome(state((1, 2), (1,), NO_LEADER), unclean, set()) == \
        ErrorCode.eligible_leaders_not_available


def test_reassignment_targets_go_first_and_cancel_restores_the_origin() -> None:
    live = {1, 2, 3, 4, 5, 6}
    assert reassignment(state((1, 2, 3), (1, 2, 3), 1), (4, 5, 6), live) == (
        (4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert reassignment(state((1, 2, 3), (1, 2, 3), 1), (3, 4, 2), live) == (
        (3, 4, 2, 1), (4,), (1,))
    moving = state((3, 4, 2, 1), (1, 2, 3), 1, adding=(4,), removing=(1,))
    assert moving.target_replicas == (3, 4, 2) and moving.original_replicas == (3, 2, 1)
    assert reassignment(moving, None, live) == ((3, 2, 1), (), ())
    assert reassignment(moving, (5, 2), live) == ((5, 2, 3, 1), (5,), (3, 1))
    assert reassignment(state((1,), (1,), 1), (1,), live) == ((1,), (), ())


@pytest.mark.parametrize(("s", "target", "error"), [
    (None, (1,), ErrorCode.unknown_topic_or_partition),
    (state((1,), (1,), 1), None, ErrorCode.no_reassignment_in_progress),
    (state((1,), (1,), 1), (), ErrorCode.invalid_replica_assignment),
    (state((1,), (1,), 1), (2, 2), ErrorCode.invalid_replica_assignment),
    (state((1,), (1,), 1), (-1,), ErrorCode.invalid_replica_assignment),
    (state((1,), (1,), 1), (1, 9), ErrorCode.invalid_replica_assignment),
])
def test_reassignment_errors(s: PartitionState | None, target: tuple[int, ...] | None,
                             error: ErrorCode) -> None:
    with pytest.raises(KafkaError) as e:
        reassignment(s, target, {1, 2})
    assert e.value.error_code == error
