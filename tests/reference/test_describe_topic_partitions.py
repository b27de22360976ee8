"""DescribeTopicPartitions (KIP-966), Kafka 4.3 against Kafkernel: named topics, unknown
and invalid names, paging by a response partition limit and a cursor, and the cursors
Kafka refuses. Kafka 4's AdminClient describeTopics (kafka-topics --describe) uses this
API when the broker offers it."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.describe_topic_partitions.v0 import request as dtp
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName

from tests.reference.diff import Pair, Side
from tests.reference.test_internal_topics import create, topic_state, wait_for


def describe(*names: str, limit: int = 2000,
             cursor: tuple[str, int] | None = None) -> dtp.DescribeTopicPartitionsRequest:
    return dtp.DescribeTopicPartitionsRequest(
        topics=tuple(dtp.TopicRequest(name=TopicName(n)) for n in names),
        response_partition_limit=limit,
        cursor=None if cursor is None else dtp.Cursor(topic_name=TopicName(cursor[0]),
                                                      partition_index=cursor[1]))


def two_topics(pair: Pair) -> tuple[str, str]:
    """Topics "<prefix>-a" (2 partitions) and "<prefix>-b" (3) on both brokers; the
    prefix sorts after any other test's topics, so an all-topics page from "-a" on holds
    only these."""
    prefix = f"zz-dtp-{uuid.uuid4().hex[:8]}"
    a, b = f"{prefix}-a", f"{prefix}-b"

    def setup(side: Side) -> None:
        for name, partitions in ((a, 2), (b, 3)):
            (result,) = side.send(create(name, partitions=partitions)).topics
            assert result.error_code == ErrorCode.none, result
            wait_for(side, f"{name} led", lambda n=name, p=partitions: len(
                [q for q in topic_state(side, n).partitions if q.leader_id >= 0]) == p)

    pair.each(setup)
    return a, b


def same(pair: Pair, body: Any) -> Any:
    """Kafka's answer, once Kafkernel's is the same, topics in the same order."""
    answers = pair.compare(body)
    assert [t.name for t in answers.kafkernel.topics] == [t.name for t in answers.kafka.topics]
    return answers.kafka


def test_named_topics_unknown_and_invalid_names(pair: Pair) -> None:
    a, b = two_topics(pair)
    kafka = same(pair, describe(b, "no-such-topic", a, "bad/name"))
    assert [(t.name, t.error_code, len(t.partitions)) for t in kafka.topics] == [
        ("bad/name", ErrorCode.invalid_topic_exception, 0),
        ("no-such-topic", ErrorCode.unknown_topic_or_partition, 0),
        (a, ErrorCode.none, 2), (b, ErrorCode.none, 3)]
    assert kafka.next_cursor is None
    partition = kafka.topics[2].partitions[0]
    assert partition.eligible_leader_replicas == () and partition.last_known_elr == ()


def test_a_partition_limit_pages_with_a_cursor(pair: Pair) -> None:
    a, b = two_topics(pair)
    first = same(pair, describe(a, b, limit=3))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in first.topics] == [
        (a, [0, 1]), (b, [0])]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == (b, 1)
    rest = same(pair, describe(a, b, limit=3, cursor=(b, 1)))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in rest.topics] == [
        (b, [1, 2])]
    assert rest.next_cursor is None
    # A page that ends with a whole topic points at the next one's start.
    whole = same(pair, describe(a, b, limit=2))
    assert (whole.next_cursor.topic_name, whole.next_cursor.partition_index) == (b, 0)


def test_all_topics_from_a_cursor(pair: Pair) -> None:
    a, b = two_topics(pair)
    kafka = same(pair, describe(limit=2, cursor=(a, 1)))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in kafka.topics] == [
        (a, [1]), (b, [0])]
    assert (kafka.next_cursor.topic_name, kafka.next_cursor.partition_index) == (b, 1)


def test_a_cursor_outside_the_request_is_invalid(pair: Pair) -> None:
    a, b = two_topics(pair)
    for body in (describe(a, cursor=(b, 0)), describe(a, b, cursor=(a, -1))):
        kafka = same(pair, body)
        assert {t.error_code for t in kafka.topics} == {ErrorCode.invalid_request}
