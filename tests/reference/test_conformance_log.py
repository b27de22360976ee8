"""Conformance of the log APIs: Produce, Fetch, ListOffsets, DeleteRecords and
OffsetForLeaderEpoch, each case at every version Kafkernel advertises, sent to Kafka and
to Kafkernel and compared field by field (the fetched record bytes included)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.protocol.compression import Compression
from kernel.protocol.records import CRC_OFFSET, SimpleRecord, build_batch
from tests.reference.conformance import (
    CLOSED,
    TIMEOUT,
    Case,
    body,
    cases,
    create_topic,
    header_only_frame,
    known,
    outcome_of_frame,
    part,
    topic_id_of,
    unique,
    versions,
)
from tests.reference.diff import Answers, Pair, Side

PRODUCE, FETCH, LIST_OFFSETS, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = 0, 1, 2, 21, 23
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
# Produce v0-2 are advertised (KAFKA-18659) but refused; kio has no classes for them.
PRODUCE_REFUSED = range(0, 3)

Build = Callable[[Side], Any]


def each(pair: Pair, build: Build) -> Answers:
    """The request ``build`` makes for each side (topic ids differ), sent to it."""
    return pair.each(lambda side: side.send(build(side)))


def compare_each(pair: Pair, build: Build) -> Answers:
    answers = each(pair, build)
    pair.assert_same(answers)
    return answers


def topic_entry(api_key: int, v: int, cls: str, side: Side, name: str, **values: Any) -> Any:
    """A topic of a request, by id where the version has ids (the side's own id, or a
    random one for a topic the side does not know)."""
    from kernel.protocol.build import field_names, request_module
    klass = getattr(request_module(api_key, v), cls)
    if "topic_id" in field_names(klass):
        known = topic_id_of(side, name)
        return part(api_key, v, cls, topic_id=known if known else uuid.uuid4(), **values)
    return part(api_key, v, cls, name=name, topic=name, **values)


# -- Produce --------------------------------------------------------------------------------

def produce(v: int, name: str, records: bytes, *, partition: int = 0, acks: int = -1) -> Build:
    def build(side: Side) -> Any:
        data = part(PRODUCE, v, "PartitionProduceData", index=partition, records=records)
        return body(PRODUCE, v, acks=acks, timeout=TIMEOUT, transactional_id=None,
                    topic_data=(topic_entry(PRODUCE, v, "TopicProduceData", side, name,
                                            partition_data=(data,)),))
    return build


BASE_TIMESTAMP = 1_700_000_000_000


def batch(*values: bytes, compression: Compression = Compression.NONE) -> bytes:
    """Records as clients send them: keyed, timestamped (CreateTime)."""
    return build_batch([SimpleRecord(key=b"k", value=v, timestamp=BASE_TIMESTAMP + i)
                        for i, v in enumerate(values)], compression=compression)


def produce_error(answers: Answers) -> ErrorCode:
    return answers.kafka.responses[0].partition_responses[0].error_code


# D7: Kafkernel explains every refused partition; Kafka only record-level errors.
EXPLAINED = known("D7", "responses.partition_responses.error_message")


def produced(pair: Pair, v: int, name: str, records: bytes, expected: ErrorCode,
             **kw: Any) -> Answers:
    answers = each(pair, produce(v, name, records, **kw))
    pair.assert_same(answers, ignore=EXPLAINED if expected != ErrorCode.none else ())
    assert produce_error(answers) == expected, answers.kafka
    return answers


def produce_records(pair: Pair, v: int) -> None:
    if v in PRODUCE_REFUSED:
        return produce_at_a_refused_version(pair, v)
    name = unique("pr")
    create_topic(pair, name)
    produced(pair, v, name, batch(b"a", b"b"), ErrorCode.none)
    produced(pair, v, name, batch(b"c", compression=Compression.GZIP), ErrorCode.none)
    return None


def idempotent(value: bytes, seq: int, epoch: int = 1, pid: int = 7_000) -> bytes:
    """A batch of an idempotent producer, its id set directly; timestamped now, since a
    producer's state expires producer.id.expiration.ms after its last batch's time."""
    now = int(time.time() * 1000)
    return build_batch([SimpleRecord(key=b"k", value=value, timestamp=now)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def produce_idempotent(pair: Pair, v: int) -> None:
    """Producer state: a retry answered with the original offset (and, as Kafka, the
    batch's timestamp as log_append_time), a sequence gap, an old epoch, a new epoch
    not at 0, an unknown producer id starting anywhere (KIP-360)."""
    if v in PRODUCE_REFUSED:
        return produce_at_a_refused_version(pair, v)
    name = unique("pr-idempotent")
    create_topic(pair, name)
    first = idempotent(b"a", 0)
    produced(pair, v, name, first, ErrorCode.none)
    produced(pair, v, name, idempotent(b"b", 1), ErrorCode.none)
    retry = produced(pair, v, name, first, ErrorCode.none)
    assert retry.kafka.responses[0].partition_responses[0].base_offset == 0
    produced(pair, v, name, idempotent(b"gap", 5), ErrorCode.out_of_order_sequence_number)
    produced(pair, v, name, idempotent(b"old", 2, epoch=0), ErrorCode.invalid_producer_epoch)
    produced(pair, v, name, idempotent(b"new", 3, epoch=2),
             ErrorCode.out_of_order_sequence_number)
    produced(pair, v, name, idempotent(b"x", 9, pid=7_001), ErrorCode.none)
    return None


def produce_at_a_refused_version(pair: Pair, v: int) -> None:
    """Kafka 4 advertises Produce v0-2 and closes the connection on them."""
    got = [outcome_of_frame(side, header_only_frame(PRODUCE, v), PRODUCE, 3)
           for side in (pair.kafka, pair.kafkernel)]
    assert got == [CLOSED, CLOSED]


def produce_to_an_unknown_topic(pair: Pair, v: int) -> None:
    if v in PRODUCE_REFUSED:
        return produce_at_a_refused_version(pair, v)
    answers = each(pair, produce(v, unique("pr-unknown"), batch(b"a")))
    pair.assert_same(answers, ignore=EXPLAINED)
    assert produce_error(answers) in (ErrorCode.unknown_topic_or_partition,
                                      ErrorCode.unknown_topic_id)
    return None


def produce_to_an_unknown_partition(pair: Pair, v: int) -> None:
    if v in PRODUCE_REFUSED:
        return produce_at_a_refused_version(pair, v)
    name = unique("pr-partition")
    create_topic(pair, name)
    produced(pair, v, name, batch(b"a"), ErrorCode.unknown_topic_or_partition, partition=3)
    return None


def produce_a_corrupt_batch(pair: Pair, v: int) -> None:
    if v in PRODUCE_REFUSED:
        return produce_at_a_refused_version(pair, v)
    name = unique("pr-corrupt")
    create_topic(pair, name)
    bad = bytearray(batch(b"a", b"b"))
    bad[CRC_OFFSET] ^= 0xFF
    produced(pair, v, name, bytes(bad), ErrorCode.corrupt_message)
    return None


def produce_a_batch_too_large(pair: Pair, v: int) -> None:
    if v in PRODUCE_REFUSED:
        return produce_at_a_refused_version(pair, v)
    name = unique("pr-large")
    create_topic(pair, name, configs={"max.message.bytes": "200"})
    produced(pair, v, name, batch(b"x" * 300), ErrorCode.message_too_large)
    return None


def produce_with_invalid_acks(pair: Pair, v: int) -> None:
    if v in PRODUCE_REFUSED:
        return produce_at_a_refused_version(pair, v)
    name = unique("pr-acks")
    create_topic(pair, name)
    produced(pair, v, name, batch(b"a"), ErrorCode.invalid_required_acks, acks=2)
    return None


def produce_to_a_compacted_topic_without_key(pair: Pair, v: int) -> None:
    if v in PRODUCE_REFUSED:
        return produce_at_a_refused_version(pair, v)
    name = unique("pr-compact")
    create_topic(pair, name, configs={"cleanup.policy": "compact"})
    keyless = build_batch([SimpleRecord(key=None, value=b"a")])
    produced(pair, v, name, keyless, ErrorCode.invalid_record)
    return None


# -- Fetch ----------------------------------------------------------------------------------

def fetch(v: int, name: str, offset: int, *, partition: int = 0, max_wait_ms: int = 0,
          isolation_level: int = 0) -> Build:
    def build(side: Side) -> Any:
        p = part(FETCH, v, "FetchPartition", partition=partition, fetch_offset=offset,
                 current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1,
                 partition_max_bytes=1 << 20)
        return body(FETCH, v, replica_id=-1, max_wait=datetime.timedelta(
                    milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
                    isolation_level=isolation_level, session_id=0, session_epoch=-1,
                    topics=(topic_entry(FETCH, v, "FetchTopic", side, name,
                                        partitions=(p,)),),
                    forgotten_topics_data=(), rack_id="", cluster_id=None)
    return build


def with_records(pair: Pair, prefix: str, *values: bytes, partitions: int = 1) -> str:
    name = unique(prefix)
    create_topic(pair, name, partitions=partitions)
    for i, value in enumerate(values):
        records = build_batch([SimpleRecord(key=b"k", value=value,
                                            timestamp=BASE_TIMESTAMP + i)])
        answers = each(pair, produce(13, name, records))
        assert produce_error(answers) == ErrorCode.none
        assert answers.kafkernel.responses[0].partition_responses[0].error_code == 0
    return name


def fetch_error(answers: Answers) -> ErrorCode:
    return answers.kafka.responses[0].partitions[0].error_code


def fetch_records(pair: Pair, v: int) -> None:
    name = with_records(pair, "fe", b"a", b"b", b"c")
    answers = compare_each(pair, fetch(v, name, 0))
    assert fetch_error(answers) == ErrorCode.none
    assert answers.kafka.responses[0].partitions[0].records
    compare_each(pair, fetch(v, name, 1))


def fetch_at_the_end(pair: Pair, v: int) -> None:
    name = with_records(pair, "fe-end", b"a")
    answers = compare_each(pair, fetch(v, name, 1, max_wait_ms=10))
    assert fetch_error(answers) == ErrorCode.none


def fetch_out_of_range(pair: Pair, v: int) -> None:
    name = with_records(pair, "fe-range", b"a")
    answers = compare_each(pair, fetch(v, name, 100))
    assert fetch_error(answers) == ErrorCode.offset_out_of_range


def fetch_an_unknown_partition(pair: Pair, v: int) -> None:
    name = with_records(pair, "fe-partition", b"a")
    compare_each(pair, fetch(v, name, 0, partition=5))


def fetch_an_unknown_topic(pair: Pair, v: int) -> None:
    compare_each(pair, fetch(v, unique("fe-unknown"), 0))


def fetch_read_committed(pair: Pair, v: int) -> None:
    name = with_records(pair, "fe-committed", b"a", b"b")
    compare_each(pair, fetch(v, name, 0, isolation_level=1))


# -- ListOffsets -----------------------------------------------------------------------------

def list_offsets(v: int, name: str, timestamp: int, *, partition: int = 0,
                 current_leader_epoch: int = -1) -> Any:
    return body(LIST_OFFSETS, v, replica_id=-1, isolation_level=0, timeout=TIMEOUT,
                topics=(part(LIST_OFFSETS, v, "ListOffsetsTopic", name=name, partitions=(
                    part(LIST_OFFSETS, v, "ListOffsetsPartition", partition_index=partition,
                         timestamp=timestamp, current_leader_epoch=current_leader_epoch,
                         max_num_offsets=1),)),))


def listed(pair: Pair, request: Any, expected: ErrorCode = ErrorCode.none) -> None:
    answers = pair.compare(request)
    assert answers.kafka.topics[0].partitions[0].error_code == expected, answers.kafka


def list_latest_and_earliest(pair: Pair, v: int) -> None:
    name = with_records(pair, "lo", b"a", b"b")
    listed(pair, list_offsets(v, name, LATEST))
    listed(pair, list_offsets(v, name, EARLIEST))


def list_max_timestamp(pair: Pair, v: int) -> None:
    """-3 (v7+); below, Kafka refuses it as an unknown special timestamp."""
    name = with_records(pair, "lo-max", b"a", b"b")
    pair.compare(list_offsets(v, name, MAX_TIMESTAMP))


def list_max_timestamp_of_records_without_one(pair: Pair, v: int) -> None:
    """Records without timestamps (-1): both find the first record (offset 0)."""
    name = unique("lo-notime")
    create_topic(pair, name)
    answers = each(pair, produce(13, name, build_batch([SimpleRecord(key=b"k", value=b"a")])))
    assert produce_error(answers) == ErrorCode.none
    answers = pair.compare(list_offsets(v, name, MAX_TIMESTAMP))
    if v >= 7:
        kafka = answers.kafka.topics[0].partitions[0]
        assert (kafka.error_code, kafka.offset) == (ErrorCode.none, 0)


def list_by_timestamp(pair: Pair, v: int) -> None:
    name = with_records(pair, "lo-time", b"a", b"b")
    listed(pair, list_offsets(v, name, 0))
    listed(pair, list_offsets(v, name, BASE_TIMESTAMP + 1))
    listed(pair, list_offsets(v, name, 2**62))


def list_tiered_storage_timestamps(pair: Pair, v: int) -> None:
    """-4 earliest local (v8+), -5 latest tiered (v9+), -6 earliest pending upload
    (v11+): without tiered storage the log's start, and -1."""
    name = with_records(pair, "lo-tiered", b"a")
    for timestamp in (-4, -5, -6):
        pair.compare(list_offsets(v, name, timestamp))


def list_again_as_the_log_moves(pair: Pair, v: int) -> None:
    """The same request again is answered from the bytes Kafkernel built the first time
    (RecentResponses) while the log stands still, and anew once a produce moves it."""
    name = with_records(pair, "lo-again", b"a")
    for _ in range(2):
        listed(pair, list_offsets(v, name, LATEST))
    answers = each(pair, produce(13, name, build_batch([SimpleRecord(key=b"k", value=b"b")])))
    assert produce_error(answers) == ErrorCode.none
    for _ in range(2):
        listed(pair, list_offsets(v, name, EARLIEST))
        latest = pair.compare(list_offsets(v, name, LATEST)).kafka.topics[0].partitions[0]
        assert latest.offset == 2


def list_offsets_of_an_unknown_topic(pair: Pair, v: int) -> None:
    listed(pair, list_offsets(v, unique("lo-unknown"), LATEST),
           ErrorCode.unknown_topic_or_partition)


def list_offsets_of_an_unknown_partition(pair: Pair, v: int) -> None:
    name = with_records(pair, "lo-partition", b"a")
    listed(pair, list_offsets(v, name, LATEST, partition=4),
           ErrorCode.unknown_topic_or_partition)


def list_offsets_with_a_future_leader_epoch(pair: Pair, v: int) -> None:
    name = with_records(pair, "lo-epoch", b"a")
    pair.compare(list_offsets(v, name, LATEST, current_leader_epoch=5))


# -- DeleteRecords --------------------------------------------------------------------------

def delete_records(v: int, name: str, offset: int, partition: int = 0) -> Any:
    return body(DELETE_RECORDS, v, timeout=TIMEOUT, topics=(part(
        DELETE_RECORDS, v, "DeleteRecordsTopic", name=name, partitions=(part(
            DELETE_RECORDS, v, "DeleteRecordsPartition", partition_index=partition,
            offset=offset),)),))


def deleted(pair: Pair, request: Any, expected: ErrorCode) -> None:
    answers = pair.compare(request)
    assert answers.kafka.topics[0].partitions[0].error_code == expected, answers.kafka


def delete_records_up_to(pair: Pair, v: int) -> None:
    name = with_records(pair, "dr", b"a", b"b", b"c")
    deleted(pair, delete_records(v, name, 2), ErrorCode.none)
    deleted(pair, delete_records(v, name, -1), ErrorCode.none)  # the high watermark
    listed(pair, list_offsets(LATEST_LIST_OFFSETS, name, EARLIEST))


def delete_records_out_of_range(pair: Pair, v: int) -> None:
    name = with_records(pair, "dr-range", b"a")
    deleted(pair, delete_records(v, name, 5), ErrorCode.offset_out_of_range)


def delete_records_of_an_unknown_topic(pair: Pair, v: int) -> None:
    deleted(pair, delete_records(v, unique("dr-unknown"), 0),
            ErrorCode.unknown_topic_or_partition)


def delete_records_of_a_compacted_topic(pair: Pair, v: int) -> None:
    name = unique("dr-compact")
    create_topic(pair, name, configs={"cleanup.policy": "compact"})
    deleted(pair, delete_records(v, name, 0), ErrorCode.policy_violation)


# -- OffsetForLeaderEpoch ------------------------------------------------------------------

def epochs(v: int, name: str, leader_epoch: int, *, current: int = -1,
           partition: int = 0) -> Any:
    return body(OFFSET_FOR_LEADER_EPOCH, v, replica_id=-1, topics=(part(
        OFFSET_FOR_LEADER_EPOCH, v, "OffsetForLeaderTopic", topic=name, partitions=(part(
            OFFSET_FOR_LEADER_EPOCH, v, "OffsetForLeaderPartition", partition=partition,
            current_leader_epoch=current, leader_epoch=leader_epoch),)),))


def end_of_epoch(pair: Pair, v: int) -> None:
    name = with_records(pair, "ole", b"a", b"b")
    pair.compare(epochs(v, name, 0))
    pair.compare(epochs(v, name, 0, current=0))


def end_of_a_later_epoch(pair: Pair, v: int) -> None:
    name = with_records(pair, "ole-later", b"a")
    pair.compare(epochs(v, name, 3))


def end_of_epoch_with_a_fenced_or_future_current_epoch(pair: Pair, v: int) -> None:
    name = with_records(pair, "ole-fenced", b"a")
    pair.compare(epochs(v, name, 0, current=7))


def end_of_epoch_of_an_unknown_topic(pair: Pair, v: int) -> None:
    pair.compare(epochs(v, unique("ole-unknown"), 0))


def end_of_epoch_of_an_unknown_partition(pair: Pair, v: int) -> None:
    name = with_records(pair, "ole-partition", b"a")
    pair.compare(epochs(v, name, 0, partition=3))


LATEST_LIST_OFFSETS = versions(LIST_OFFSETS)[-1]

CASES: list[tuple[int, Case]] = [
    (PRODUCE, produce_records),
    (PRODUCE, produce_to_an_unknown_topic),
    (PRODUCE, produce_to_an_unknown_partition),
    (PRODUCE, produce_a_corrupt_batch),
    (PRODUCE, produce_a_batch_too_large),
    (PRODUCE, produce_with_invalid_acks),
    (PRODUCE, produce_to_a_compacted_topic_without_key),
    (PRODUCE, produce_idempotent),
    (FETCH, fetch_records),
    (FETCH, fetch_at_the_end),
    (FETCH, fetch_out_of_range),
    (FETCH, fetch_an_unknown_partition),
    (FETCH, fetch_an_unknown_topic),
    (FETCH, fetch_read_committed),
    (LIST_OFFSETS, list_latest_and_earliest),
    (LIST_OFFSETS, list_max_timestamp),
    (LIST_OFFSETS, list_by_timestamp),
    (LIST_OFFSETS, list_max_timestamp_of_records_without_one),
    (LIST_OFFSETS, list_tiered_storage_timestamps),
    (LIST_OFFSETS, list_again_as_the_log_moves),
    (LIST_OFFSETS, list_offsets_of_an_unknown_topic),
    (LIST_OFFSETS, list_offsets_of_an_unknown_partition),
    (LIST_OFFSETS, list_offsets_with_a_future_leader_epoch),
    (DELETE_RECORDS, delete_records_up_to),
    (DELETE_RECORDS, delete_records_out_of_range),
    (DELETE_RECORDS, delete_records_of_an_unknown_topic),
    (DELETE_RECORDS, delete_records_of_a_compacted_topic),
    (OFFSET_FOR_LEADER_EPOCH, end_of_epoch),
    (OFFSET_FOR_LEADER_EPOCH, end_of_a_later_epoch),
    (OFFSET_FOR_LEADER_EPOCH, end_of_epoch_with_a_fenced_or_future_current_epoch),
    (OFFSET_FOR_LEADER_EPOCH, end_of_epoch_of_an_unknown_topic),
    (OFFSET_FOR_LEADER_EPOCH, end_of_epoch_of_an_unknown_partition),
]


@pytest.mark.parametrize(("api_key", "version", "case"), cases(*CASES))
def test_conformance(shared: Pair, api_key: int, version: int, case: Case) -> None:
    case(shared, version)
