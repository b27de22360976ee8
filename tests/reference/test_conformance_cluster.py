"""Conformance of the cluster-administration APIs: ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments and DescribeLogDirs, each case at every version Kafkernel
advertises, sent to the reference Kafka (one KRaft node) and to Kafkernel (the embedded
single-node metadata_kraft) and compared field by field. Authorization of these APIs is
in test_conformance_security.py."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.protocol.records import SimpleRecord, build_batch
from tests.reference.conformance import (
    TIMEOUT,
    Case,
    body,
    cases,
    create_topic,
    part,
    unique,
    wait_for,
)
from tests.reference.diff import Answers, Pair, Side
from tests.reference.test_conformance_log import (
    BASE_TIMESTAMP,
    each,
    produce,
    produce_error,
)

DESCRIBE_LOG_DIRS, ELECT_LEADERS = 35, 43
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
PREFERRED, UNCLEAN = 0, 1
NODE = 1  # both brokers' node id


# -- ElectLeaders ---------------------------------------------------------------------------

def elect(v: int, partitions: dict[str, list[int]] | None, election_type: int = PREFERRED,
          ) -> Any:
    listed = None if partitions is None else tuple(
        part(ELECT_LEADERS, v, "TopicPartitions", topic=t, partitions=tuple(p))
        for t, p in partitions.items())
    return body(ELECT_LEADERS, v, election_type=election_type, topic_partitions=listed,
                timeout=TIMEOUT)


def elected(pair: Pair, request: Any) -> list[tuple[str, int, ErrorCode]]:
    answers = pair.compare(request)
    return sorted((r.topic, p.partition_id, p.error_code)
                  for r in answers.kafka.replica_election_results for p in r.partition_result)


def elect_the_preferred_leader(pair: Pair, v: int) -> None:
    """A single node leads every partition it holds: no election is needed."""
    name = unique("el")
    create_topic(pair, name, partitions=2)
    assert elected(pair, elect(v, {name: [0, 1]})) == [
        (name, 0, ErrorCode.election_not_needed), (name, 1, ErrorCode.election_not_needed)]


def elect_an_unclean_leader(pair: Pair, v: int) -> None:
    """v0 has no election type: preferred."""
    name = unique("el-unclean")
    create_topic(pair, name)
    assert elected(pair, elect(v, {name: [0]}, UNCLEAN)) == [
        (name, 0, ErrorCode.election_not_needed)]


def elect_unknown_partitions(pair: Pair, v: int) -> None:
    name, unknown = unique("el-part"), unique("el-unknown")
    create_topic(pair, name)
    for election_type in (PREFERRED, UNCLEAN):
        assert elected(pair, elect(v, {name: [0, 7], unknown: [0]}, election_type)) == [
            (name, 0, ErrorCode.election_not_needed),
            (name, 7, ErrorCode.unknown_topic_or_partition),
            (unknown, 0, ErrorCode.unknown_topic_or_partition)]


def elect_no_partitions(pair: Pair, v: int) -> None:
    answers = pair.compare(elect(v, {}))
    assert answers.kafka.replica_election_results == ()


def elect_every_partition(pair: Pair, v: int) -> None:
    """Null topics: every topic, each without the partitions whose leader is already
    the wanted one (here all). The shared brokers hold other tests' topics, so the
    answers are compared on this case's topic, and each side must list all its own."""
    name = unique("el-all")
    create_topic(pair, name, partitions=2)
    answers = pair.send(elect(v, None))
    for side, answer in ((pair.kafka, answers.kafka), (pair.kafkernel, answers.kafkernel)):
        listed = {r.topic for r in answer.replica_election_results}
        assert name in listed, side.label
        assert listed >= topics_of(side), side.label
        assert all(not r.partition_result for r in answer.replica_election_results)
    pair.assert_same(Answers(*(only_topics(a, "replica_election_results", "topic", {name})
                               for a in (answers.kafka, answers.kafkernel))))


def topics_of(side: Any) -> set[str]:
    answer = side.send(body(3, 12, topics=None, allow_auto_topic_creation=False))
    return {t.name for t in answer.topics}


def only_topics(answer: Any, field: str, name_field: str, names: set[str]) -> Any:
    return dataclasses.replace(answer, **{field: tuple(
        t for t in getattr(answer, field) if getattr(t, name_field) in names)})


# -- AlterPartitionReassignments ------------------------------------------------------------

def reassign(v: int, targets: dict[str, dict[int, list[int] | None]],
             allow_replication_factor_change: bool = True) -> Any:
    return body(ALTER_PARTITION_REASSIGNMENTS, v, timeout=TIMEOUT,
                allow_replication_factor_change=allow_replication_factor_change,
                topics=tuple(part(ALTER_PARTITION_REASSIGNMENTS, v, "ReassignableTopic",
                                  name=t, partitions=tuple(
                                      part(ALTER_PARTITION_REASSIGNMENTS, v,
                                           "ReassignablePartition", partition_index=p,
                                           replicas=None if r is None else tuple(r))
                                      for p, r in ps.items()))
                             for t, ps in targets.items()))


def reassigned(pair: Pair, request: Any) -> list[tuple[str, int, ErrorCode]]:
    answers = pair.compare(request)
    assert answers.kafka.error_code == ErrorCode.none, answers.kafka
    return sorted((t.name, p.partition_index, p.error_code)
                  for t in answers.kafka.responses for p in t.partitions)


def reassign_to_the_same_broker(pair: Pair, v: int) -> None:
    """The replicas it has: nothing moves, nothing is left in progress."""
    name = unique("ra-same")
    create_topic(pair, name, partitions=2)
    assert reassigned(pair, reassign(v, {name: {0: [NODE], 1: [NODE]}})) == [
        (name, 0, ErrorCode.none), (name, 1, ErrorCode.none)]
    answers = pair.compare(list_reassignments(0, None))
    assert name not in {t.name for t in answers.kafka.topics}


def reassign_to_an_unknown_broker(pair: Pair, v: int) -> None:
    name = unique("ra-unknown-broker")
    create_topic(pair, name)
    assert reassigned(pair, reassign(v, {name: {0: [NODE + 1]}})) == [
        (name, 0, ErrorCode.invalid_replica_assignment)]


def reassign_to_invalid_replicas(pair: Pair, v: int) -> None:
    """An empty replica list, a broker named twice, a negative id."""
    name = unique("ra-invalid")
    create_topic(pair, name)
    for replicas in ([], [NODE, NODE], [-1]):
        assert reassigned(pair, reassign(v, {name: {0: replicas}})) == [
            (name, 0, ErrorCode.invalid_replica_assignment)], replicas


def reassign_to_another_replication_factor(pair: Pair, v: int) -> None:
    """v1 may refuse a target of another size (KIP-860); below, the size is free and
    the unknown broker decides."""
    name = unique("ra-rf")
    create_topic(pair, name)
    for allow in (True, False):
        pair.compare(reassign(v, {name: {0: [NODE, NODE + 1]}},
                              allow_replication_factor_change=allow))


def cancel_without_a_reassignment(pair: Pair, v: int) -> None:
    name = unique("ra-cancel")
    create_topic(pair, name)
    assert reassigned(pair, reassign(v, {name: {0: None}})) == [
        (name, 0, ErrorCode.no_reassignment_in_progress)]


def reassign_an_unknown_topic_or_partition(pair: Pair, v: int) -> None:
    name, unknown = unique("ra-part"), unique("ra-unknown")
    create_topic(pair, name)
    assert reassigned(pair, reassign(v, {name: {3: [NODE], 4: None},
                                         unknown: {0: [NODE], 1: None}})) == [
        (name, 3, ErrorCode.unknown_topic_or_partition),
        (name, 4, ErrorCode.unknown_topic_or_partition),
        (unknown, 0, ErrorCode.unknown_topic_or_partition),
        (unknown, 1, ErrorCode.unknown_topic_or_partition)]


def reassign_nothing(pair: Pair, v: int) -> None:
    pair.compare(reassign(v, {}))


# -- ListPartitionReassignments -------------------------------------------------------------

def list_reassignments(v: int, partitions: dict[str, list[int]] | None) -> Any:
    listed = None if partitions is None else tuple(
        part(LIST_PARTITION_REASSIGNMENTS, v, "ListPartitionReassignmentsTopics", name=t,
             partition_indexes=tuple(p))
        for t, p in partitions.items())
    return body(LIST_PARTITION_REASSIGNMENTS, v, timeout=TIMEOUT, topics=listed)


def list_every_reassignment(pair: Pair, v: int) -> None:
    """A single node completes every reassignment it accepts at once: none listed."""
    answers = pair.compare(list_reassignments(v, None))
    assert answers.kafka.error_code == ErrorCode.none
    assert answers.kafka.topics == ()


def list_some_reassignments(pair: Pair, v: int) -> None:
    name = unique("lr")
    create_topic(pair, name, partitions=2)
    answers = pair.compare(list_reassignments(v, {name: [0, 1]}))
    assert answers.kafka.topics == ()


def list_unknown_reassignments(pair: Pair, v: int) -> None:
    name = unique("lr-part")
    create_topic(pair, name)
    answers = pair.compare(list_reassignments(v, {name: [5], unique("lr-unknown"): [0]}))
    assert answers.kafka.topics == ()


# -- DescribeLogDirs ------------------------------------------------------------------------

def describe_log_dirs(v: int, partitions: dict[str, list[int]] | None) -> Any:
    listed = None if partitions is None else tuple(
        part(DESCRIBE_LOG_DIRS, v, "DescribableLogDirTopic", topic=t, partitions=tuple(p))
        for t, p in partitions.items())
    return body(DESCRIBE_LOG_DIRS, v, topics=listed)


def each_own_dir(answers: Answers) -> Answers:
    """Each broker's answer with its own log dir and volume sizes replaced by markers,
    once checked: an absolute path of an existing directory, and usable bytes within
    the total (v4), as Java's FileStore and statvfs give them."""
    def mark(answer: Any) -> Any:
        results = []
        for result in answer.results:
            assert os.path.isabs(result.log_dir) and os.path.isdir(result.log_dir), result
            changes: dict[str, Any] = {"log_dir": "<log dir>"}
            if hasattr(result, "total_bytes"):
                assert 0 <= result.usable_bytes <= result.total_bytes, result
                changes |= {"total_bytes": -2, "usable_bytes": -2}
            results.append(dataclasses.replace(result, **changes))
        return dataclasses.replace(answer, results=tuple(results))
    return Answers(mark(answers.kafka), mark(answers.kafkernel))


def described(pair: Pair, request: Any, *, names: set[str] | None = None) -> Any:
    """Kafka's answer once compared; with ``names``, only those topics are compared
    (the shared brokers hold other tests' topics)."""
    answers = each_own_dir(pair.send(request))
    if names is not None:
        answers = Answers(*(dataclasses.replace(a, results=tuple(
            only_topics(r, "topics", "name", names) for r in a.results))
            for a in (answers.kafka, answers.kafkernel)))
    pair.assert_same(answers)
    return answers.kafka


def hosted_topic(pair: Pair, prefix: str, *values: bytes, partitions: int = 1) -> str:
    """A new topic whose ``partitions`` each side hosts, with ``values`` produced to
    partition 0. Kafka's Metadata shows a leader before its replica manager has made
    the log (the metadata cache is updated first), so both are waited for."""
    name = unique(prefix)
    create_topic(pair, name, partitions=partitions)
    expected = {(name, p) for p in range(partitions)}
    for side in (pair.kafka, pair.kafkernel):
        def ready(side: Side = side) -> bool:
            answer = side.send(describe_log_dirs(4, {name: list(range(partitions))}))
            return {tp for tp, lag in lags(answer).items() if lag >= 0} == expected
        wait_for(side, f"{name}'s logs", ready)
    for i, value in enumerate(values):
        records = build_batch([SimpleRecord(key=b"k", value=value,
                                            timestamp=BASE_TIMESTAMP + i)])
        assert produce_error(each(pair, produce(13, name, records))) == ErrorCode.none
    return name


def lags(answer: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.offset_lag
            for r in answer.results for t in r.topics for p in t.partitions}


def sizes(answer: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.partition_size
            for r in answer.results for t in r.topics for p in t.partitions}


def describe_log_dirs_of_partitions(pair: Pair, v: int) -> None:
    """Sizes in bytes of the same batches, equal on both; lag 0; no future log."""
    name = hosted_topic(pair, "ld", b"one", b"two", partitions=2)
    empty = hosted_topic(pair, "ld-empty")
    answer = described(pair, describe_log_dirs(v, {name: [0, 1], empty: [0]}))
    (result,) = answer.results
    assert result.error_code == ErrorCode.none
    found = sizes(answer)
    assert found[(empty, 0)] == found[(name, 1)] == 0 and found[(name, 0)] > 0, found
    assert all(p.offset_lag == 0 and not p.is_future_key
               for t in result.topics for p in t.partitions)


def describe_log_dirs_of_some_partitions(pair: Pair, v: int) -> None:
    """Only the partitions asked for; a topic none of whose partitions is here is left
    out, as is an unknown topic."""
    name = hosted_topic(pair, "ld-some", b"x", partitions=3)
    answer = described(pair, describe_log_dirs(v, {name: [1, 9], unique("ld-unknown"): [0]}))
    assert list(sizes(answer)) == [(name, 1)]


def describe_log_dirs_of_nothing(pair: Pair, v: int) -> None:
    """An empty topic list: each log dir, no topics."""
    answer = described(pair, describe_log_dirs(v, {}))
    assert len(answer.results) == 1 and answer.results[0].topics == ()


def describe_every_log_dir(pair: Pair, v: int) -> None:
    """Null topics: every partition of every log; compared on this case's topic."""
    name = hosted_topic(pair, "ld-all", b"a", b"b", partitions=2)
    answer = described(pair, describe_log_dirs(v, None), names={name})
    assert set(sizes(answer)) == {(name, 0), (name, 1)}


CASES: list[tuple[int, Case]] = [
    (ELECT_LEADERS, elect_the_preferred_leader),
    (ELECT_LEADERS, elect_an_unclean_leader),
    (ELECT_LEADERS, elect_unknown_partitions),
    (ELECT_LEADERS, elect_no_partitions),
    (ELECT_LEADERS, elect_every_partition),
    (ALTER_PARTITION_REASSIGNMENTS, reassign_to_the_same_broker),
    (ALTER_PARTITION_REASSIGNMENTS, reassign_to_an_unknown_broker),
    (ALTER_PARTITION_REASSIGNMENTS, reassign_to_invalid_replicas),
    (ALTER_PARTITION_REASSIGNMENTS, reassign_to_another_replication_factor),
    (ALTER_PARTITION_REASSIGNMENTS, cancel_without_a_reassignment),
    (ALTER_PARTITION_REASSIGNMENTS, reassign_an_unknown_topic_or_partition),
    (ALTER_PARTITION_REASSIGNMENTS, reassign_nothing),
    (LIST_PARTITION_REASSIGNMENTS, list_every_reassignment),
    (LIST_PARTITION_REASSIGNMENTS, list_some_reassignments),
    (LIST_PARTITION_REASSIGNMENTS, list_unknown_reassignments),
    (DESCRIBE_LOG_DIRS, describe_log_dirs_of_partitions),
    (DESCRIBE_LOG_DIRS, describe_log_dirs_of_some_partitions),
    (DESCRIBE_LOG_DIRS, describe_log_dirs_of_nothing),
    (DESCRIBE_LOG_DIRS, describe_every_log_dir),
]


@pytest.mark.parametrize(("api_key", "version", "case"), cases(*CASES))
def test_conformance(shared: Pair, api_key: int, version: int, case: Case) -> None:
    case(shared, version)
