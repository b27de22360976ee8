"""Conformance of WriteTxnMarkers, TxnOffsetCommit and DescribeProducers, each case at
every version Kafkernel advertises, sent to Kafka and to Kafkernel and compared field by
field. Markers are written on ordinary topics (a producer's state then shows in
DescribeProducers, its last timestamp compared only for being set). A TxnOffsetCommit
that reaches the coordinator is not compared: Kafka 4 first verifies the producer's
transaction with its transaction coordinator (KIP-890), which is not served yet."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.reference.conformance import (
    Case,
    body,
    cases,
    create_topic,
    part,
    unique,
    wait_for,
)
from tests.reference.diff import Pair

WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT, DESCRIBE_PRODUCERS = 27, 28, 61
PRODUCER_ID = 424_242


def markers(v: int, topic: str, partitions: tuple[int, ...], *, commit: bool = True,
            producer_epoch: int = 0, coordinator_epoch: int = 0) -> Any:
    return body(WRITE_TXN_MARKERS, v, markers=(part(
        WRITE_TXN_MARKERS, v, "WritableTxnMarker", producer_id=PRODUCER_ID,
        producer_epoch=producer_epoch, transaction_result=commit,
        coordinator_epoch=coordinator_epoch,
        topics=(part(WRITE_TXN_MARKERS, v, "WritableTxnMarkerTopic", name=topic,
                     partition_indexes=partitions),)),))


def describe(topic: str, partitions: tuple[int, ...]) -> Any:
    return body(DESCRIBE_PRODUCERS, 0, topics=(part(
        DESCRIBE_PRODUCERS, 0, "TopicRequest", name=topic, partition_indexes=partitions),))


def create_hosted_topic(pair: Pair, topic: str, partitions: int) -> None:
    """The topic on both brokers, once Kafka hosts its replicas too: its metadata names
    the leaders a moment before the replicas exist (markers would then find none)."""
    create_topic(pair, topic, partitions=partitions)
    indexes = tuple(range(partitions))
    wait_for(pair.kafka, "the replicas exist", lambda: all(
        p.error_code == ErrorCode.none
        for p in pair.kafka.send(describe(topic, indexes)).topics[0].partitions))


def marker_errors(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): p.error_code
            for m in answer.markers for t in m.topics for p in t.partitions}


def write_markers_to_an_unknown_topic(pair: Pair, v: int) -> None:
    answers = pair.compare(markers(v, unique("absent"), (0, 1)))
    assert set(marker_errors(answers.kafka).values()) == {ErrorCode.unknown_topic_or_partition}


def write_markers_then_fenced_ones(pair: Pair, v: int) -> None:
    topic = unique("markers")
    create_hosted_topic(pair, topic, partitions=2)
    answers = pair.compare(markers(v, topic, (0, 1, 5), producer_epoch=3,
                                   coordinator_epoch=7))
    assert marker_errors(answers.kafka) == {(topic, 0): ErrorCode.none,
                                            (topic, 1): ErrorCode.none,
                                            (topic, 5): ErrorCode.unknown_topic_or_partition}
    # An older coordinator epoch, then an older producer epoch: refused by the log.
    answers = pair.compare(markers(v, topic, (0,), producer_epoch=3, coordinator_epoch=6,
                                   commit=False))
    assert marker_errors(answers.kafka) == {(topic, 0): ErrorCode.transaction_coordinator_fenced}
    pair.compare(markers(v, topic, (1,), producer_epoch=2, coordinator_epoch=7))


def describe_producers_after_markers(pair: Pair, v: int) -> None:
    topic = unique("producers")
    create_hosted_topic(pair, topic, partitions=2)
    pair.compare(describe(topic, (0, 1, 9)))
    pair.compare(markers(1, topic, (1,), producer_epoch=2, coordinator_epoch=4))
    answers = pair.send(describe(topic, (0, 1)))

    def timestamps_set(answer: Any) -> Any:
        return dataclasses.replace(answer, topics=tuple(
            dataclasses.replace(t, partitions=tuple(
                dataclasses.replace(p, active_producers=tuple(
                    dataclasses.replace(s, last_timestamp=s.last_timestamp > 0)
                    for s in p.active_producers))
                for p in t.partitions))
            for t in answer.topics))

    kafka, kafkernel = timestamps_set(answers.kafka), timestamps_set(answers.kafkernel)
    pair.assert_same(type(answers)(kafka, kafkernel))
    (state,) = next(p for p in kafka.topics[0].partitions if p.partition_index == 1) \
        .active_producers
    assert (state.producer_id, state.producer_epoch, state.coordinator_epoch) == (
        PRODUCER_ID, 2, 4)


def describe_producers_of_unknown_and_invalid_topics(pair: Pair, v: int) -> None:
    pair.compare(describe(unique("absent"), (0,)))
    pair.compare(describe("not/valid", (0,)))


def txn_offset_commit_to_an_unknown_topic(pair: Pair, v: int) -> None:
    request = body(TXN_OFFSET_COMMIT, v, transactional_id=unique("txn"), group_id=unique("g"),
                   producer_id=PRODUCER_ID, producer_epoch=0, generation_id=-1, member_id="",
                   group_instance_id=None, topics=(part(
                       TXN_OFFSET_COMMIT, v, "TxnOffsetCommitRequestTopic",
                       name=unique("absent"), partitions=(part(
                           TXN_OFFSET_COMMIT, v, "TxnOffsetCommitRequestPartition",
                           partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                           committed_metadata=""),)),))
    answers = pair.compare(request)
    assert answers.kafka.topics[0].partitions[0].error_code == \
        ErrorCode.unknown_topic_or_partition


CASES: list[tuple[int, Case]] = [
    (WRITE_TXN_MARKERS, write_markers_to_an_unknown_topic),
    (WRITE_TXN_MARKERS, write_markers_then_fenced_ones),
    (DESCRIBE_PRODUCERS, describe_producers_after_markers),
    (DESCRIBE_PRODUCERS, describe_producers_of_unknown_and_invalid_topics),
    (TXN_OFFSET_COMMIT, txn_offset_commit_to_an_unknown_topic),
]


@pytest.mark.parametrize(("api_key", "version", "case"), cases(*CASES))
def test_conformance(shared: Pair, api_key: int, version: int, case: Case) -> None:
    case(shared, version)
