"""A fetch throttled over its consumer byte-rate quota, in and out of KIP-227 sessions,
on Apache Kafka and on Kafkernel side by side (answers compared field by field, session
ids for being 0 or not). Kafka answers a throttled fetch with no partitions: a full
fetch asking for a session gets session id 0 and no session is made; an incremental
one keeps its session id, and the session remembers nothing of the answer it did not
send, so the next fetch reports what the throttled one would have."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from tests.reference.diff import Pair
from tests.reference.test_conformance_fetch_sessions import (
    INITIAL,
    Sessions,
    fetch_in,
    partitions_answered,
    served,
)
from tests.reference.test_conformance_log import batch, compare_each, each, produce, produce_error
from tests.reference.test_conformance_quotas import CLIENT, alter, remove_every_quota

# The client id tests.integration.wire sends, whose fetches the quota throttles.
CLIENT_ID = "wire-test"
VERSION = 12


def _set_quota(pair: Pair, rate: float | None) -> None:
    for side in (pair.kafka, pair.kafkernel):
        answer = alter(side.bootstrap, [([(CLIENT, CLIENT_ID)], [("consumer_byte_rate", rate)])])
        assert answer[0][1] == 0, answer


@pytest.fixture
def quota_removed_after(shared: Pair) -> Iterator[Pair]:
    try:
        yield shared
    finally:
        _set_quota(shared, None)
        remove_every_quota(shared.kafka.bootstrap)  # shared by later tests


def test_a_throttled_fetch_answers_as_kafka_in_sessions(quota_removed_after: Pair) -> None:
    pair = quota_removed_after
    name = served(pair, "fs-throttled", b"a", b"b")
    sessions = Sessions()
    sessions.opened(compare_each(pair, fetch_in(VERSION, name, 0, INITIAL, {0: 0})))
    # The high watermark moves on (2 -> 3) after the session last reported it.
    assert produce_error(each(pair, produce(13, name, batch(b"c")))) == ErrorCode.none
    _set_quota(pair, 1.0)  # one byte a second: any records are over it

    full = compare_each(pair, fetch_in(VERSION, name, 0, INITIAL, {0: 0}))
    assert full.kafka.throttle_time.total_seconds() > 0 and full.kafka.responses == ()
    assert (full.kafka.session_id, full.kafkernel.session_id) == (0, 0)

    incremental = compare_each(pair, fetch_in(VERSION, name, sessions, 1, {0: 0}))
    assert incremental.kafka.throttle_time.total_seconds() > 0
    assert incremental.kafka.responses == () and incremental.kafkernel.session_id != 0

    _set_quota(pair, None)
    time.sleep(0.5)
    # At the end of the log, no records: the new high watermark is still news.
    after = compare_each(pair, fetch_in(VERSION, name, sessions, 2, {0: 3}))
    assert partitions_answered(after) == [0]
