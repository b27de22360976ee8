"""Conformance of KIP-227 incremental fetch sessions: the same sequence of Fetch requests
to Kafka and to Kafkernel, each in the session that broker handed out, every answer
compared field by field (session ids for being 0 or not: each broker picks its own), at
every Fetch version with sessions (v7+). A full fetch with epoch 0 opens a session;
incremental fetches send changed partitions and forget others and are answered only
what changed; a wrong epoch, an unknown session, topic ids on one side only are session
errors; epoch -1 closes it."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.protocol.build import field_names, request_module
from kernel.protocol.records import SimpleRecord, build_batch
from tests.reference.conformance import (
    Case,
    body,
    cases,
    create_topic,
    part,
    topic_id_of,
    unique,
    wait_for,
)
from tests.reference.diff import Answers, Pair, Side
from tests.reference.test_conformance_log import (
    BASE_TIMESTAMP,
    FETCH,
    batch,
    compare_each,
    each,
    produce,
    produce_error,
)

INITIAL, FINAL = 0, -1

Build = Callable[[Side], Any]


class Sessions:
    """The session id each broker answered, by side."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def opened(self, answers: Answers) -> None:
        assert answers.kafka.error_code == ErrorCode.none, answers.kafka
        assert answers.kafka.session_id != 0, "Kafka opened no session"
        self.ids = {"kafka": answers.kafka.session_id,
                    "kafkernel": answers.kafkernel.session_id}


def topic(v: int, cls: str, side: Side, name: str, topic_id: uuid.UUID | None = None,
          **values: Any) -> Any:
    """A topic of a Fetch request: by id from v13 (the side's own, unless given)."""
    klass = getattr(request_module(FETCH, v), cls)
    if "topic_id" in field_names(klass):
        return part(FETCH, v, cls, topic_id=topic_id or topic_id_of(side, name), **values)
    return part(FETCH, v, cls, name=name, topic=name, **values)


def fetch_in(v: int, name: str, sessions: Sessions | int, epoch: int,
             offsets: dict[int, int], *, forgotten: Iterable[int] = (),
             extra: Iterable[tuple[str, uuid.UUID | None, int]] = (),
             max_wait_ms: int = 0) -> Build:
    """Fetch ``offsets`` of ``name`` (and the ``extra`` (topic, id, partition) at offset
    0) in the side's session, or in the session id given."""
    forgotten = tuple(forgotten)

    def partitions(items: Iterable[tuple[int, int]]) -> tuple[Any, ...]:
        return tuple(part(FETCH, v, "FetchPartition", partition=p, fetch_offset=o,
                          current_leader_epoch=-1, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)
                     for p, o in items)

    def build(side: Side) -> Any:
        session_id = sessions if isinstance(sessions, int) else sessions.ids[side.label]
        topics = [topic(v, "FetchTopic", side, name, partitions=partitions(offsets.items()))] \
            if offsets else []
        topics += [topic(v, "FetchTopic", side, other, tid, partitions=partitions([(p, 0)]))
                   for other, tid, p in extra]
        forgotten_topics = (topic(v, "ForgottenTopic", side, name, partitions=forgotten),) \
            if forgotten else ()
        return body(FETCH, v, replica_id=-1, max_wait=datetime.timedelta(
                    milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
                    isolation_level=0, session_id=session_id, session_epoch=epoch,
                    topics=tuple(topics), forgotten_topics_data=forgotten_topics,
                    rack_id="", cluster_id=None)
    return build


def served(pair: Pair, prefix: str, *values: bytes, partitions: int = 1) -> str:
    """A new topic with ``values`` in partition 0, written once every partition is
    fetched without an error on both brokers: Kafka serves a new partition some time
    after Metadata names its leader (bench/README.md)."""
    name = unique(prefix)
    create_topic(pair, name, partitions=partitions)
    every = fetch_in(13, name, 0, FINAL, dict.fromkeys(range(partitions), 0))
    for side in (pair.kafka, pair.kafkernel):
        wait_for(side, f"{name} is served", lambda s=side: all(
            p.error_code == ErrorCode.none
            for t in s.send(every(s)).responses for p in t.partitions), timeout=60)
    for i, value in enumerate(values):
        records = build_batch([SimpleRecord(key=b"k", value=value,
                                            timestamp=BASE_TIMESTAMP + i)])
        assert produce_error(each(pair, produce(13, name, records))) == ErrorCode.none
    return name


def partitions_answered(answers: Answers) -> list[int]:
    return sorted(p.partition_index for t in answers.kafka.responses for p in t.partitions)


def top_error(answers: Answers) -> ErrorCode:
    return answers.kafka.error_code


def a_session_from_start_to_close(pair: Pair, v: int) -> None:
    name = served(pair, "fs", b"a", b"b", partitions=3)
    sessions = Sessions()
    sessions.opened(compare_each(pair, fetch_in(v, name, 0, INITIAL, {0: 0, 1: 0, 2: 0})))

    # Partition 0 read to its end; nothing else changed: nothing answered.
    quiet = compare_each(pair, fetch_in(v, name, sessions, 1, {0: 2}))
    assert (top_error(quiet), partitions_answered(quiet)) == (ErrorCode.none, [])

    # Records on partition 1: only it is answered.
    assert produce_error(each(pair, produce(13, name, batch(b"c"), partition=1))) == \
        ErrorCode.none
    news = compare_each(pair, fetch_in(v, name, sessions, 2, {}))
    assert partitions_answered(news) == [1]

    # Partition 2 forgotten, then added again: answered as new to the session.
    assert partitions_answered(compare_each(
        pair, fetch_in(v, name, sessions, 3, {1: 1}, forgotten=[2]))) == []
    assert partitions_answered(compare_each(pair, fetch_in(v, name, sessions, 4, {2: 0}))) \
        == [2]

    # A long poll in the session with nothing new: answered empty when it runs out.
    waited = compare_each(pair, fetch_in(v, name, sessions, 5, {}, max_wait_ms=100))
    assert partitions_answered(waited) == []

    # Session errors, which leave the session where it was.
    assert top_error(compare_each(pair, fetch_in(v, name, sessions, 9, {}))) == \
        ErrorCode.invalid_fetch_session_epoch
    other_version = 12 if v >= 13 else 13
    assert top_error(compare_each(pair, fetch_in(other_version, name, sessions, 6, {}))) == \
        ErrorCode.fetch_session_topic_id_error
    assert top_error(compare_each(pair, fetch_in(v, name, sessions, 6, {}))) == \
        ErrorCode.none

    # Epoch -1 naming the session: a full fetch without one, and the session is gone.
    final = compare_each(pair, fetch_in(v, name, sessions, FINAL, {0: 0}))
    assert partitions_answered(final) == [0]
    assert top_error(compare_each(pair, fetch_in(v, name, sessions, 7, {}))) == \
        ErrorCode.fetch_session_id_not_found


def an_unknown_session(pair: Pair, v: int) -> None:
    name = served(pair, "fs-unknown", b"a")
    # No session has id 1 on either broker, but for a chance of one in 2^31.
    answers = compare_each(pair, fetch_in(v, name, 1, 1, {0: 0}))
    assert top_error(answers) == ErrorCode.fetch_session_id_not_found


def a_session_closed_by_forgetting_its_partitions(pair: Pair, v: int) -> None:
    name = served(pair, "fs-forget", b"a", partitions=2)
    sessions = Sessions()
    sessions.opened(compare_each(pair, fetch_in(v, name, 0, INITIAL, {0: 0, 1: 0})))
    closed = compare_each(pair, fetch_in(v, name, sessions, 1, {}, forgotten=[0, 1]))
    assert (top_error(closed), closed.kafka.session_id, closed.kafka.responses) == (
        ErrorCode.none, 0, ())
    assert top_error(compare_each(pair, fetch_in(v, name, sessions, 2, {}))) == \
        ErrorCode.fetch_session_id_not_found


def a_session_with_an_unknown_topic(pair: Pair, v: int) -> None:
    """The unknown topic (by name before v13, by id from v13) is answered with its error
    in the full fetch and again in every incremental one."""
    name = served(pair, "fs-known", b"a")
    missing = (unique("fs-missing"), uuid.uuid4(), 0)
    sessions = Sessions()
    sessions.opened(compare_each(pair, fetch_in(v, name, 0, INITIAL, {0: 0},
                                                extra=[missing])))
    again = compare_each(pair, fetch_in(v, name, sessions, 1, {0: 1}))
    (t,) = again.kafka.responses
    assert [p.error_code for p in t.partitions] == [
        ErrorCode.unknown_topic_id if v >= 13 else ErrorCode.unknown_topic_or_partition]


CASES: list[tuple[int, Case]] = [
    (FETCH, a_session_from_start_to_close),
    (FETCH, an_unknown_session),
    (FETCH, a_session_closed_by_forgetting_its_partitions),
    (FETCH, a_session_with_an_unknown_topic),
]


@pytest.mark.parametrize(("api_key", "version", "case"),
                         [p for p in cases(*CASES) if p.values[1] >= 7])
def test_conformance(shared: Pair, api_key: int, version: int, case: Case) -> None:
    case(shared, version)
