"""KIP-227 fetch sessions without a broker: FetchSessionCache.new_context's decisions
(Kafka's FetchManager.newContext), what an incremental answer leaves out (Kafka's
updateAndGenerateResponseData) and the cache's eviction rules (Kafka's tryEvict), on
the Fetch handler's own partition state; and a replica fetcher's side of its session
(Kafka's FetchSessionHandler)."""

from __future__ import annotations

import itertools
import uuid

import pytest
from kio.schema.errors import ErrorCode

from kernel.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchSessionCache,
    FullFetch,
    IncrementalFetch,
    SessionError,
    Sessionless,
    next_epoch,
)
from kernel.handlers.fetch import FetchPartitionState
from kernel.replica.fetcher import LeaderSession

TOPIC = "orders"
TOPIC_ID = uuid.uuid4()
EVICTION_MS = 120_000
V12, V13 = 12, 13  # by topic names, by topic ids


def fetched(index: int, offset: int = 0, *, hw: int = 10, records: bytes = b"",
            error: ErrorCode = ErrorCode.none, topic_id: uuid.UUID | None = None,
            max_bytes: int = 1024) -> FetchPartitionState:
    s = FetchPartitionState(TOPIC, topic_id, index, offset, max_bytes, -1, -1, -1)
    s.high_watermark, s.last_stable_offset, s.log_start_offset = hw, hw, 0
    s.records, s.error = records, error
    return s


def cache(slots: int = 10) -> FetchSessionCache:
    ids = itertools.count(1)
    return FetchSessionCache(slots, EVICTION_MS, random_id=lambda: next(ids))


def open_session(c: FetchSessionCache, partitions: list[FetchPartitionState], now: int = 0,
                 *, version: int = V12, follower: bool = False) -> int:
    context = c.new_context(version, INVALID_SESSION_ID, INITIAL_EPOCH, follower,
                            partitions, (), now)
    assert isinstance(context, FullFetch)
    return context.session_id(partitions, now)


def incremental(c: FetchSessionCache, session_id: int, epoch: int,
                sent: list[FetchPartitionState] = (), forgotten: list = (), now: int = 0,
                version: int = V12) -> IncrementalFetch:
    context = c.new_context(version, session_id, epoch, False, sent, forgotten, now)
    assert isinstance(context, IncrementalFetch), context
    return context


def test_epochs_follow_kafkas_fetch_metadata() -> None:
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_a_full_fetch_with_epoch_0_creates_a_session_at_epoch_1() -> None:
    c = cache()
    session_id = open_session(c, [fetched(0), fetched(1)])
    assert session_id != INVALID_SESSION_ID
    session = c.get(session_id)
    assert session is not None and session.epoch == 1 and not session.privileged
    assert [cp.index for cp in session.partitions.values()] == [0, 1]
    assert session.partitions[(TOPIC, 0)].high_watermark == 10
    assert (len(c), c.num_partitions) == (1, 2)


def test_epoch_minus_1_is_sessionless_and_closes_the_session_named() -> None:
    c = cache()
    session_id = open_session(c, [fetched(0)])
    assert isinstance(c.new_context(V12, 0, FINAL_EPOCH, False, [fetched(0)], (), 0),
                      Sessionless)
    assert c.get(session_id) is not None
    assert isinstance(c.new_context(V12, session_id, FINAL_EPOCH, False, [], (), 0),
                      Sessionless)
    assert c.get(session_id) is None and c.num_partitions == 0


def test_a_full_fetch_naming_a_session_replaces_it() -> None:
    c = cache()
    old = open_session(c, [fetched(0)])
    context = c.new_context(V12, old, INITIAL_EPOCH, False, [fetched(1)], (), 0)
    assert isinstance(context, FullFetch)
    new = context.session_id([fetched(1)], 0)
    assert c.get(old) is None and new not in (old, INVALID_SESSION_ID)


def test_session_errors() -> None:
    c = cache()
    session_id = open_session(c, [fetched(0)])
    assert c.new_context(V12, session_id + 100, 1, False, [], (), 0) == SessionError(
        ErrorCode.fetch_session_id_not_found)
    assert c.new_context(V12, session_id, 2, False, [], (), 0) == SessionError(
        ErrorCode.invalid_fetch_session_epoch)
    # A session by topic names is not continued by a request by topic ids, nor the reverse.
    assert c.new_context(V13, session_id, 1, False, [], (), 0) == SessionError(
        ErrorCode.fetch_session_topic_id_error)
    by_id = open_session(c, [fetched(0, topic_id=TOPIC_ID)], version=V13)
    assert c.new_context(V12, by_id, 1, False, [], (), 0) == SessionError(
        ErrorCode.fetch_session_topic_id_error)
    # None of these moved the session on.
    incremental(c, session_id, 1)


def test_an_incremental_fetch_adds_updates_and_forgets_partitions() -> None:
    c = cache()
    session_id = open_session(c, [fetched(0), fetched(1)])
    context = incremental(c, session_id, 1, [fetched(1, 5, max_bytes=99), fetched(2)],
                          [(TOPIC, 0)])
    session = context.session
    assert session.epoch == 2
    assert [(cp.index, cp.fetch_offset, cp.max_bytes) for cp in session.partitions.values()] \
        == [(1, 5, 99), (2, 0, 1024)]
    assert c.num_partitions == 2
    # The same epoch again (a retried request) is refused: the session moved on.
    assert c.new_context(V12, session_id, 1, False, [], (), 0) == SessionError(
        ErrorCode.invalid_fetch_session_epoch)


def test_forgetting_every_partition_closes_the_session() -> None:
    c = cache()
    session_id = open_session(c, [fetched(0)])
    context = c.new_context(V12, session_id, 1, False, [], [(TOPIC, 0)], 0)
    assert isinstance(context, Sessionless)
    assert c.get(session_id) is None and len(c) == 0


def test_sessions_by_topic_id_key_partitions_by_id() -> None:
    c = cache()
    session_id = open_session(c, [fetched(0, topic_id=TOPIC_ID), fetched(1, topic_id=TOPIC_ID)],
                              version=V13)
    # Forgotten by name, nothing goes; by id, the partition goes.
    context = incremental(c, session_id, 1, [], [(TOPIC, 0), (TOPIC_ID, 1)], version=V13)
    assert list(context.session.partitions) == [(TOPIC_ID, 0)]


def test_an_incremental_answer_has_only_partitions_with_something_to_report() -> None:
    c = cache()
    parts = [fetched(i) for i in range(4)]
    session_id = open_session(c, parts)
    context = incremental(c, session_id, 1)
    now = [fetched(0), fetched(1, hw=11), fetched(2, records=b"x" * 10),
           fetched(3, error=ErrorCode.not_leader_or_follower, hw=-1)]
    error, answered = context.answer(now)
    assert error == ErrorCode.none
    assert [p.index for p in answered] == [1, 2, 3]
    # A partition that returned records goes to the end of the fetch order.
    assert [cp.index for cp in context.session.partitions.values()] == [0, 1, 3, 2]

    # Nothing changed: nothing answered; the error is answered every time.
    context = incremental(c, session_id, 2)
    error, answered = context.answer([fetched(0), fetched(1, hw=11), fetched(2),
                                      fetched(3, error=ErrorCode.not_leader_or_follower)])
    assert [p.index for p in answered] == [3]
    # Once the error clears, the partition is answered again even at its old offsets.
    context = incremental(c, session_id, 3)
    error, answered = context.answer([fetched(0), fetched(1, hw=11), fetched(2),
                                      fetched(3)])
    assert [p.index for p in answered] == [3]


def test_log_start_offset_last_stable_offset_and_diverging_epochs_are_answered() -> None:
    c = cache()
    session_id = open_session(c, [fetched(0), fetched(1), fetched(2)])
    context = incremental(c, session_id, 1)
    moved_start, lso_behind, diverging = fetched(0), fetched(1), fetched(2)
    moved_start.log_start_offset = 3
    lso_behind.last_stable_offset = 7
    diverging.diverging = (1, 5)
    _, answered = context.answer([moved_start, lso_behind, diverging])
    assert [p.index for p in answered] == [0, 1, 2]


def test_an_answer_after_the_session_moved_on_is_an_epoch_error() -> None:
    """Kafka checks the epoch again when it answers: a request that waited in the
    purgatory while a duplicate of it went through gets INVALID_FETCH_SESSION_EPOCH."""
    c = cache()
    session_id = open_session(c, [fetched(0)])
    first = incremental(c, session_id, 1)
    incremental(c, session_id, 2)
    assert first.answer([fetched(0, records=b"x")]) == (ErrorCode.invalid_fetch_session_epoch,
                                                        [])


def test_a_full_cache_answers_session_id_0_while_nothing_may_be_evicted() -> None:
    c = cache(slots=2)
    open_session(c, [fetched(0)], now=0)
    open_session(c, [fetched(0)], now=1)
    # Young consumer sessions are not evictable by a consumer, however large.
    assert open_session(c, [fetched(i) for i in range(5)], now=2) == INVALID_SESSION_ID
    assert len(c) == 2 and c.evictions == 0


def test_the_least_recently_used_session_is_evicted_once_stale() -> None:
    c = cache(slots=2)
    first = open_session(c, [fetched(0)], now=0)
    second = open_session(c, [fetched(0)], now=1)
    incremental(c, first, 1, now=10)  # first is now the more recently used
    assert open_session(c, [fetched(0)], now=EVICTION_MS + 2) != INVALID_SESSION_ID
    assert c.get(second) is None and c.get(first) is not None
    assert c.evictions == 1 and c.num_partitions == 2


def test_a_follower_evicts_a_consumers_session_and_not_the_reverse() -> None:
    c = cache(slots=1)
    consumer = open_session(c, [fetched(0), fetched(1)], now=0)
    follower = open_session(c, [fetched(0)], now=1, follower=True)
    assert follower != INVALID_SESSION_ID and c.get(consumer) is None
    assert c.get(follower).privileged
    assert open_session(c, [fetched(i) for i in range(9)], now=2) == INVALID_SESSION_ID


def test_an_old_session_is_evicted_by_a_larger_one_only() -> None:
    """Not stale (used recently) but created long ago: evictable by a newcomer with more
    partitions; with as many, the existing session is kept."""
    c = cache(slots=1)
    old = open_session(c, [fetched(0), fetched(1)], now=0)
    incremental(c, old, 1, now=EVICTION_MS + 1)  # touched: not stale, but old
    assert open_session(c, [fetched(0), fetched(1)], now=EVICTION_MS + 2) == \
        INVALID_SESSION_ID
    bigger = open_session(c, [fetched(i) for i in range(3)], now=EVICTION_MS + 3)
    assert bigger != INVALID_SESSION_ID and c.get(old) is None
    assert c.evictions == 1 and c.num_partitions == 3


def test_a_cache_of_0_slots_never_makes_a_session() -> None:
    c = cache(slots=0)
    assert open_session(c, [fetched(0)]) == INVALID_SESSION_ID


@pytest.mark.parametrize("follower", [False, True])
def test_session_ids_are_unique_and_never_0(follower: bool) -> None:
    ids = iter([0, 7, 7, 8])
    c = FetchSessionCache(10, EVICTION_MS, random_id=lambda: next(ids))
    assert open_session(c, [fetched(0)], follower=follower) == 7
    assert open_session(c, [fetched(0)], follower=follower) == 8


# -- the follower's side: its fetcher's session at the leader -------------------------

def test_a_fetchers_session_sends_only_what_changed_and_forgets_what_it_no_longer_wants(
        ) -> None:
    a, b, c = (TOPIC_ID, 0), (TOPIC_ID, 1), (TOPIC_ID, 2)
    session = LeaderSession()
    # Full: everything, nothing forgotten; the leader's id opens the session at epoch 1.
    assert session.next_fetch({a: (0, 0, 1, 0, -1), b: (0, 0, 1, 0, -1)}) == (
        {a: (0, 0, 1, 0, -1), b: (0, 0, 1, 0, -1)}, [])
    session.answered(ErrorCode.none, 77)
    assert (session.session_id, session.epoch) == (77, 1)
    # Incremental: a moved on, b backs off (left out), c is new.
    assert session.next_fetch({a: (5, 0, 1, 0, 0), c: (0, 0, 1, 0, -1)}) == (
        {a: (5, 0, 1, 0, 0), c: (0, 0, 1, 0, -1)}, [b])
    session.answered(ErrorCode.none, 77)
    assert session.epoch == 2
    assert session.next_fetch({a: (5, 0, 1, 0, 0), c: (0, 0, 1, 0, -1)}) == ({}, [])


@pytest.mark.parametrize(("error", "after"), [
    (ErrorCode.fetch_session_id_not_found, (INVALID_SESSION_ID, INITIAL_EPOCH)),
    (ErrorCode.invalid_fetch_session_epoch, (77, INITIAL_EPOCH)),
    (ErrorCode.fetch_session_topic_id_error, (77, INITIAL_EPOCH)),
])
def test_a_fetchers_session_error_starts_over_with_a_full_fetch(
        error: ErrorCode, after: tuple[int, int]) -> None:
    """An unknown session is asked for anew; any other error closes it with the next
    (full) fetch, which names it with epoch 0 (Kafka's nextCloseExisting)."""
    session = LeaderSession()
    session.next_fetch({(TOPIC_ID, 0): (0, 0, 1, 0, -1)})
    session.answered(ErrorCode.none, 77)
    session.answered(error, INVALID_SESSION_ID)
    assert (session.session_id, session.epoch) == after
    assert session.next_fetch({(TOPIC_ID, 0): (3, 0, 1, 0, -1)}) == (
        {(TOPIC_ID, 0): (3, 0, 1, 0, -1)}, [])


def test_a_fetchers_lost_answer_or_a_closed_session_starts_over() -> None:
    session = LeaderSession()
    session.next_fetch({(TOPIC_ID, 0): (0, 0, 1, 0, -1)})
    session.answered(ErrorCode.none, 77)
    session.failed()  # the answer never came: the session may have moved on
    assert (session.session_id, session.epoch) == (77, INITIAL_EPOCH)
    session.answered(ErrorCode.none, INVALID_SESSION_ID)  # full, and no session made
    assert (session.session_id, session.epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)


def test_a_throttled_answer_is_taken_back_and_a_throttled_full_fetch_keeps_no_session(
) -> None:
    """Kafka's getThrottledResponse: the incremental session remembers nothing of the
    answer it did not send (high watermarks, fetch order); a full fetch makes none."""
    c = cache()
    session_id = open_session(c, [fetched(i) for i in range(3)])
    context = incremental(c, session_id, 1)
    news = [fetched(0, hw=12), fetched(1), fetched(2)]
    _, answered = context.answer([news[0], fetched(1, records=b"x"), news[2]])
    assert [p.index for p in answered] == [0, 1]
    assert c.throttled(session_id, 1) == session_id
    assert [cp.index for cp in context.session.partitions.values()] == [0, 1, 2]
    _, answered = incremental(c, session_id, 2).answer(news)
    assert [p.index for p in answered] == [0]  # the high watermark is still news
    # Once another request moved the session on, an old answer is not taken back.
    later = incremental(c, session_id, 3)
    assert c.throttled(session_id, 2) == session_id
    _, answered = later.answer(news)
    assert answered == []

    other = open_session(c, [fetched(0)])
    assert c.throttled(other, INITIAL_EPOCH) == INVALID_SESSION_ID
    assert c.get(other) is None and c.get(session_id) is not None
