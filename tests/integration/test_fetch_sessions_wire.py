"""KIP-227 incremental fetch sessions over a socket, at every Fetch version with sessions
(v7+): a full fetch with epoch 0 opens one, incremental fetches answer only what
changed, long polls wait on every partition of the session, forgotten partitions leave
it, and the session errors come at the top level with no partitions."""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID
from kernel.handlers import fetch, produce
from kernel.protocol.build import request_module
from kernel.protocol.records import SimpleRecord, build_batch
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_log_apis_wire import build, topic_id, topic_ref, values_in
from tests.integration.test_produce_fetch import create_topic
from tests.integration.wire import request

SESSION_VERSIONS = list(range(7, fetch.MAX_VERSION + 1))
TIMEOUT = datetime.timedelta(seconds=5)


def produce_to(broker: EmbeddedBroker, name: str, partition: int, *values: bytes) -> None:
    m = request_module(produce.API_KEY, 9)
    data = build(m.PartitionProduceData, index=partition, records=build_batch(
        [SimpleRecord(key=b"k", value=v) for v in values]))
    body = build(m.ProduceRequest, acks=-1, timeout=TIMEOUT, topic_data=(
        build(m.TopicProduceData, name=name, partition_data=(data,)),))
    (topic,) = request(broker.bootstrap, body).responses
    assert topic.partition_responses[0].error_code == ErrorCode.none


class Fetcher:
    """One consumer's fetches of one topic in a session, at one version."""

    def __init__(self, broker: EmbeddedBroker, version: int, name: str,
                 tid: uuid.UUID | None = None) -> None:
        self.broker = broker
        self.version = version
        self.name = name
        self.tid = tid or topic_id(broker, name)
        self.m = request_module(fetch.API_KEY, version)

    def send(self, session_id: int, epoch: int, offsets: dict[int, int], *,
             forgotten: Iterable[int] = (), max_wait_ms: int = 0, min_bytes: int = 1) -> Any:
        m = self.m
        parts = tuple(build(m.FetchPartition, partition=p, fetch_offset=o,
                            current_leader_epoch=-1, last_fetched_epoch=-1,
                            log_start_offset=-1, partition_max_bytes=1 << 20)
                      for p, o in offsets.items())
        topics = (topic_ref(m.FetchTopic, self.name, self.tid, partitions=parts),) \
            if parts else ()
        forgotten = tuple(forgotten)
        forgotten_topics = (topic_ref(m.ForgottenTopic, self.name, self.tid,
                                      partitions=forgotten),) if forgotten else ()
        body = build(m.FetchRequest, replica_id=-1,
                     max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                     min_bytes=min_bytes, max_bytes=1 << 20, session_id=session_id,
                     session_epoch=epoch, topics=topics,
                     forgotten_topics_data=forgotten_topics)
        return request(self.broker.bootstrap, body)


def answered(response: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


def sessions(broker: EmbeddedBroker) -> tuple[float | None, float | None]:
    """The broker's session gauges, as /metrics shows them."""
    assert broker.broker is not None
    registry = broker.broker.metrics.registry
    return (registry.get_sample_value("kafkernel_incremental_fetch_sessions"),
            registry.get_sample_value("kafkernel_incremental_fetch_partitions_cached"))


@pytest.mark.parametrize("version", SESSION_VERSIONS)
def test_a_session_answers_only_what_changed(broker: EmbeddedBroker, version: int) -> None:
    name = f"sessions-v{version}"
    create_topic(broker.bootstrap, name, partitions=3)
    produce_to(broker, name, 0, b"a", b"b")
    f = Fetcher(broker, version, name)

    full = f.send(INVALID_SESSION_ID, INITIAL_EPOCH, {0: 0, 1: 0, 2: 0})
    assert full.error_code == ErrorCode.none and full.session_id != INVALID_SESSION_ID
    parts = answered(full)
    assert sorted(parts) == [0, 1, 2]
    assert values_in(parts[0].records) == [b"a", b"b"] and parts[0].high_watermark == 2
    assert sessions(broker) == (1, 3)
    session_id = full.session_id

    # Partition 0 read to its end: only it is sent, with its new offset.
    nothing = f.send(session_id, 1, {0: 2})
    assert (nothing.error_code, nothing.session_id) == (ErrorCode.none, session_id)
    assert answered(nothing) == {}

    produce_to(broker, name, 2, b"c")
    news = answered(f.send(session_id, 2, {}))
    assert list(news) == [2]
    assert values_in(news[2].records) == [b"c"] and news[2].high_watermark == 1
    # The session kept partition 2's fetch offset (0): until the consumer moves it, the
    # records come again (the consumer asks for what it has not got).
    assert values_in(answered(f.send(session_id, 3, {})).get(2).records) == [b"c"]
    assert answered(f.send(session_id, 4, {2: 1})) == {}

    # Partitions forgotten leave the session; forgetting the last one closes it.
    assert answered(f.send(session_id, 5, {}, forgotten=[0, 1])) == {}
    assert sessions(broker) == (1, 1)
    closed = f.send(session_id, 6, {}, forgotten=[2])
    assert (closed.error_code, closed.session_id, closed.responses) == (
        ErrorCode.none, INVALID_SESSION_ID, ())
    assert sessions(broker) == (0, 0)


@pytest.mark.parametrize("version", [7, 12, 13, fetch.MAX_VERSION])
def test_session_errors_are_answered_at_the_top_level(broker: EmbeddedBroker,
                                                      version: int) -> None:
    name = f"session-errors-v{version}"
    create_topic(broker.bootstrap, name)
    f = Fetcher(broker, version, name)
    session_id = f.send(INVALID_SESSION_ID, INITIAL_EPOCH, {0: 0}).session_id
    assert session_id != INVALID_SESSION_ID

    def refused(response: Any, error: ErrorCode) -> None:
        assert (response.error_code, response.session_id, response.responses) == (
            error, INVALID_SESSION_ID, ())

    refused(f.send(session_id ^ 0x5A5A, 1, {}), ErrorCode.fetch_session_id_not_found)
    refused(f.send(session_id, 7, {0: 0}), ErrorCode.invalid_fetch_session_epoch)
    # Topic ids (v13+) on one side of the session only.
    other = Fetcher(broker, 12 if version >= 13 else 13, name)
    refused(other.send(session_id, 1, {}), ErrorCode.fetch_session_topic_id_error)
    # None of that moved the session: epoch 1 still continues it.
    assert f.send(session_id, 1, {}).session_id == session_id
    # A full fetch with epoch -1 closes it and opens none.
    final = f.send(session_id, FINAL_EPOCH, {0: 0})
    assert final.session_id == INVALID_SESSION_ID and list(answered(final)) == [0]
    refused(f.send(session_id, 2, {}), ErrorCode.fetch_session_id_not_found)


def test_fetch_v4_to_v6_never_open_a_session(broker: EmbeddedBroker) -> None:
    name = "no-sessions"
    create_topic(broker.bootstrap, name)
    for version in (4, 5, 6):
        body = Fetcher(broker, version, name).send(INVALID_SESSION_ID, INITIAL_EPOCH, {0: 0})
        assert list(answered(body)) == [0]
    assert sessions(broker) == (0, 0)


def test_an_incremental_long_poll_waits_on_every_partition(broker: EmbeddedBroker) -> None:
    name = "session-poll"
    create_topic(broker.bootstrap, name, partitions=2)
    f = Fetcher(broker, fetch.MAX_VERSION, name)
    session_id = f.send(INVALID_SESSION_ID, INITIAL_EPOCH, {0: 0, 1: 0}).session_id
    # Nothing new: held for max_wait, then answered with no partitions.
    started = time.monotonic()
    empty = f.send(session_id, 1, {}, max_wait_ms=300)
    assert 0.25 <= time.monotonic() - started < 5
    assert (empty.session_id, answered(empty)) == (session_id, {})
    # Records on a partition the request did not name wake it.
    timer = threading.Timer(0.5, produce_to, (broker, name, 1, b"wake"))
    timer.start()
    started = time.monotonic()
    woken = f.send(session_id, 2, {}, max_wait_ms=20_000)
    timer.join()
    assert time.monotonic() - started < 10
    assert list(answered(woken)) == [1]
    assert values_in(answered(woken)[1].records) == [b"wake"]


def test_a_duplicate_incremental_fetch_gets_an_epoch_error(broker: EmbeddedBroker) -> None:
    """A request waiting in the purgatory while another one with the same epoch went
    through (on another connection) is answered INVALID_FETCH_SESSION_EPOCH, with the
    session's id, as Kafka's updateAndGenerateResponseData answers it."""
    name = "session-duplicate"
    create_topic(broker.bootstrap, name)
    f = Fetcher(broker, fetch.MAX_VERSION, name)
    session_id = f.send(INVALID_SESSION_ID, INITIAL_EPOCH, {0: 0}).session_id
    waiting: list[Any] = []
    thread = threading.Thread(target=lambda: waiting.append(
        f.send(session_id, 1, {}, max_wait_ms=1500)))
    thread.start()
    time.sleep(0.5)
    # The same epoch again is refused at once: the waiting request moved the session on.
    assert f.send(session_id, 1, {}).error_code == ErrorCode.invalid_fetch_session_epoch
    assert f.send(session_id, 2, {}).error_code == ErrorCode.none
    thread.join()
    (late,) = waiting
    assert (late.error_code, late.session_id, late.responses) == (
        ErrorCode.invalid_fetch_session_epoch, session_id, ())


def test_an_unknown_topic_id_stays_in_the_session_answered_with_its_error(
        broker: EmbeddedBroker) -> None:
    name = "session-known"
    create_topic(broker.bootstrap, name)
    known = Fetcher(broker, fetch.MAX_VERSION, name)
    unknown = Fetcher(broker, fetch.MAX_VERSION, "nowhere", tid=uuid.uuid4())
    m = known.m
    body = build(m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=300),
                 min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=0, topics=(
                     build(m.FetchTopic, topic_id=known.tid, partitions=(build(
                         m.FetchPartition, partition=0, fetch_offset=0,
                         partition_max_bytes=1024),)),
                     build(m.FetchTopic, topic_id=unknown.tid, partitions=(build(
                         m.FetchPartition, partition=0, fetch_offset=0,
                         partition_max_bytes=1024),))))
    # As Kafka: a partition refused before reading does not cut the long poll short.
    started = time.monotonic()
    full = request(broker.bootstrap, body)
    assert time.monotonic() - started >= 0.25
    errors = {t.topic_id: t.partitions[0].error_code for t in full.responses}
    assert errors == {known.tid: ErrorCode.none, unknown.tid: ErrorCode.unknown_topic_id}
    # The error is answered on every incremental fetch, the quiet partition is not.
    again = known.send(full.session_id, 1, {})
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in again.responses] == [
        (unknown.tid, [ErrorCode.unknown_topic_id])]


def test_a_deleted_topic_is_answered_with_its_error(broker: EmbeddedBroker) -> None:
    from confluent_kafka.admin import AdminClient

    name = "session-deleted"
    create_topic(broker.bootstrap, name)
    f = Fetcher(broker, fetch.MAX_VERSION, name)
    session_id = f.send(INVALID_SESSION_ID, INITIAL_EPOCH, {0: 0}).session_id
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([name])[name].result(10)
    deadline = time.monotonic() + 10
    while broker.broker.metadata.image.topic(name) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (topic,) = f.send(session_id, 1, {}).responses
    assert topic.partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_a_full_cache_answers_session_id_0(broker_factory: Any) -> None:
    broker = broker_factory({"max.incremental.fetch.session.cache.slots": 1})
    name = "session-slots"
    create_topic(broker.bootstrap, name, partitions=2)
    f = Fetcher(broker, fetch.MAX_VERSION, name)
    first = f.send(INVALID_SESSION_ID, INITIAL_EPOCH, {0: 0}).session_id
    assert first != INVALID_SESSION_ID
    # The one slot holds a young consumer session: no other consumer may evict it, even
    # with more partitions; it goes on with full fetches, answered in full.
    second = f.send(INVALID_SESSION_ID, INITIAL_EPOCH, {0: 0, 1: 0})
    assert second.session_id == INVALID_SESSION_ID and sorted(answered(second)) == [0, 1]
    assert f.send(first, 1, {}).session_id == first
