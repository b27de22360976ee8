"""Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords at every version
the broker advertises (all that kio has), spoken over a socket with kio entities built
for each version from one set of field values."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.handlers import delete_records, fetch, list_offsets, offset_for_leader_epoch, produce
from kernel.protocol.build import field_names, request_module
from kernel.protocol.codec import default_entity
from kernel.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_produce_fetch import create_topic
from tests.integration.wire import request

TIMEOUT = datetime.timedelta(seconds=5)


def versions(handler: Any) -> list[int]:
    return list(range(handler.MIN_VERSION, handler.MAX_VERSION + 1))


def build(cls: type, **values: Any) -> Any:
    """``cls`` from the values it declares; the fields it requires and was not given
    take their zero value."""
    names = field_names(cls)
    return default_entity(cls, **{k: v for k, v in values.items() if k in names})


def topic_id(broker: EmbeddedBroker, name: str) -> uuid.UUID:
    topic = broker.broker.metadata.image.topic(name)
    assert topic is not None
    return topic.topic_id


def topic_ref(cls: type, name: str, tid: uuid.UUID, **values: Any) -> Any:
    """A request's topic entry: by id where the version has ids, else by name."""
    if "topic_id" in field_names(cls):
        return build(cls, topic_id=tid, **values)
    return build(cls, name=name, topic=name, **values)


def produce_one(broker: EmbeddedBroker, version: int, name: str, value: bytes) -> Any:
    m = request_module(produce.API_KEY, version)
    partition = build(m.PartitionProduceData, index=0,
                      records=build_batch([SimpleRecord(key=b"k", value=value)]))
    body = build(m.ProduceRequest, acks=-1, timeout=TIMEOUT, topic_data=(
        topic_ref(m.TopicProduceData, name, topic_id(broker, name),
                  partition_data=(partition,)),))
    (topic,) = request(broker.bootstrap, body).responses
    (answer,) = topic.partition_responses
    return answer


def fetch_from(broker: EmbeddedBroker, version: int, name: str, offset: int) -> Any:
    m = request_module(fetch.API_KEY, version)
    partition = build(m.FetchPartition, partition=0, fetch_offset=offset,
                      current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1,
                      partition_max_bytes=1 << 20)
    body = build(m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                 max_bytes=1 << 20, session_epoch=-1, topics=(
                     topic_ref(m.FetchTopic, name, topic_id(broker, name),
                               partitions=(partition,)),))
    response = request(broker.bootstrap, body)
    assert getattr(response, "error_code", ErrorCode.none) == ErrorCode.none  # v7+
    (topic,) = response.responses
    (answer,) = topic.partitions
    return answer


def values_in(records: bytes | None) -> list[bytes | None]:
    return [r.value for _, batch in iter_batches(records or b"") for r in iter_records(batch)]


def test_produce_and_fetch_at_every_version(broker: EmbeddedBroker) -> None:
    name = "every-version"
    create_topic(broker.bootstrap, name)
    sent = []
    for offset, version in enumerate(versions(produce)):
        value = f"produce v{version}".encode()
        answer = produce_one(broker, version, name, value)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, offset), version
        if version >= 5:
            assert answer.log_start_offset == 0
        sent.append(value)
    for version in versions(fetch):
        answer = fetch_from(broker, version, name, 0)
        assert answer.error_code == ErrorCode.none, version
        assert answer.high_watermark == len(sent)
        assert values_in(answer.records) == sent, version
        if version >= 5:
            assert answer.log_start_offset == 0
        # From the middle: the batch holding the offset and everything after it.
        assert values_in(fetch_from(broker, version, name, 3).records) == sent[3:]


def test_fetch_by_an_unknown_topic_id(broker: EmbeddedBroker) -> None:
    m = request_module(fetch.API_KEY, fetch.MAX_VERSION)
    body = build(m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                 max_bytes=1 << 20, session_epoch=-1, topics=(build(
                     m.FetchTopic, topic_id=uuid.uuid4(), partitions=(build(
                         m.FetchPartition, partition=0, fetch_offset=0,
                         partition_max_bytes=1024),)),))
    (topic,) = request(broker.bootstrap, body).responses
    assert topic.partitions[0].error_code == ErrorCode.unknown_topic_id


def list_offset(broker: EmbeddedBroker, version: int, name: str, timestamp: int) -> Any:
    m = request_module(list_offsets.API_KEY, version)
    body = build(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(
        build(m.ListOffsetsTopic, name=name, partitions=(build(
            m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
            timestamp=timestamp, max_num_offsets=1),)),))
    (topic,) = request(broker.bootstrap, body).topics
    (answer,) = topic.partitions
    assert answer.error_code == ErrorCode.none, (version, timestamp)
    return answer


def test_list_offsets_at_every_version(broker: EmbeddedBroker) -> None:
    """Earliest, latest, by time and (v7+) the largest timestamp, whose record need not
    be the last."""
    name = "list-offsets"
    create_topic(broker.bootstrap, name)
    now = int(time.time() * 1000)
    stamps = [now - 3000, now - 1000, now - 2000]  # the largest is in the middle
    for ts in stamps:
        answer = produce_one_at(broker, name, ts)
        assert answer.error_code == ErrorCode.none
    for version in versions(list_offsets):
        assert list_offset(broker, version, name, list_offsets.EARLIEST).offset == 0
        assert list_offset(broker, version, name, list_offsets.LATEST).offset == 3
        by_time = list_offset(broker, version, name, now - 1500)
        assert by_time.offset == 1, version  # the first record at or after the time
        assert list_offset(broker, version, name, now + 60_000).offset == -1
        if version >= 7:
            largest = list_offset(broker, version, name, list_offsets.MAX_TIMESTAMP)
            assert (largest.offset, largest.timestamp) == (1, now - 1000), version


def produce_one_at(broker: EmbeddedBroker, name: str, timestamp_ms: int) -> Any:
    m = request_module(produce.API_KEY, 9)
    records = build_batch([SimpleRecord(value=b"t", timestamp=timestamp_ms)],
                          base_timestamp=timestamp_ms)
    body = build(m.ProduceRequest, acks=1, timeout=TIMEOUT, topic_data=(build(
        m.TopicProduceData, name=name, partition_data=(build(
            m.PartitionProduceData, index=0, records=records),)),))
    return request(broker.bootstrap, body).responses[0].partition_responses[0]


def end_offset_for(broker: EmbeddedBroker, version: int, name: str, epoch: int) -> Any:
    m = request_module(offset_for_leader_epoch.API_KEY, version)
    body = build(m.OffsetForLeaderEpochRequest, replica_id=-1, topics=(
        build(m.OffsetForLeaderTopic, topic=name, partitions=(build(
            m.OffsetForLeaderPartition, partition=0, current_leader_epoch=-1,
            leader_epoch=epoch),)),))
    (topic,) = request(broker.bootstrap, body).topics
    (answer,) = topic.partitions
    assert answer.error_code == ErrorCode.none
    return answer


@pytest.mark.parametrize("version", versions(offset_for_leader_epoch))
def test_offset_for_leader_epoch_before_and_after_appends(broker: EmbeddedBroker,
                                                          version: int) -> None:
    """The leader's epoch starts at the log end offset when it becomes leader, so it is
    known before anything is appended in it (as Kafka's makeLeader assigns it)."""
    name = f"epochs-v{version}"
    create_topic(broker.bootstrap, name)
    empty = end_offset_for(broker, version, name, 0)
    assert (empty.leader_epoch, empty.end_offset) == (0, 0)
    for _ in range(3):
        produce_one(broker, 9, name, b"x")
    current = end_offset_for(broker, version, name, 0)
    assert (current.leader_epoch, current.end_offset) == (0, 3)
    # An epoch newer than any the log knows: undefined.
    newer = end_offset_for(broker, version, name, 7)
    assert (newer.leader_epoch, newer.end_offset) == (-1, -1)


def delete_before(broker: EmbeddedBroker, version: int, name: str, offset: int) -> Any:
    m = request_module(delete_records.API_KEY, version)
    body = build(m.DeleteRecordsRequest, timeout=TIMEOUT, topics=(
        build(m.DeleteRecordsTopic, name=name, partitions=(build(
            m.DeleteRecordsPartition, partition_index=0, offset=offset),)),))
    (topic,) = request(broker.bootstrap, body).topics
    (answer,) = topic.partitions
    return answer


@pytest.mark.parametrize("version", versions(delete_records))
def test_delete_records_at_every_version(broker: EmbeddedBroker, version: int) -> None:
    name = f"delete-records-v{version}"
    create_topic(broker.bootstrap, name)
    for i in range(5):
        produce_one(broker, 9, name, f"r{i}".encode())
    moved = delete_before(broker, version, name, 2)
    assert (moved.error_code, moved.low_watermark) == (ErrorCode.none, 2)
    beyond = delete_before(broker, version, name, 6)
    assert beyond.error_code == ErrorCode.offset_out_of_range
    # Readers now start at 2; below it is out of range.
    assert list_offset(broker, 7, name, list_offsets.EARLIEST).offset == 2
    assert values_in(fetch_from(broker, 11, name, 2).records) == [b"r2", b"r3", b"r4"]
    assert fetch_from(broker, 11, name, 1).error_code == ErrorCode.offset_out_of_range
    # -1: up to the high watermark.
    everything = delete_before(broker, version, name, -1)
    assert (everything.error_code, everything.low_watermark) == (ErrorCode.none, 5)


def test_a_partition_led_elsewhere_names_its_leader(broker: EmbeddedBroker) -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER comes with the current leader (Produce v10+,
    Fetch v12+) and that leader's endpoint (Produce v10+, Fetch v16+)."""
    from kio.schema.create_topics.v7 import request as create_v7

    from kernel.cluster import BrokerRegistration

    other = BrokerRegistration(node_id=2, host="127.0.0.1", port=1, rack="r2")
    broker.call(broker.broker.metadata.register_broker(other))
    name = "led-elsewhere"
    created = request(broker.bootstrap, create_v7.CreateTopicsRequest(
        timeout=TIMEOUT, validate_only=False, topics=(create_v7.CreatableTopic(
            name=name, num_partitions=-1, replication_factor=-1, configs=(),
            assignments=(create_v7.CreatableReplicaAssignment(
                partition_index=0, broker_ids=(2,)),)),)))
    assert created.topics[0].error_code == ErrorCode.none
    endpoint = (2, "127.0.0.1", 1, "r2")

    def hints(answer: Any, response_endpoints: Any) -> tuple[Any, Any]:
        leader = getattr(answer, "current_leader", None)
        return ((leader.leader_id, leader.leader_epoch) if leader else None,
                [(e.node_id, e.host, e.port, e.rack) for e in response_endpoints])

    for version in versions(produce):
        m = request_module(produce.API_KEY, version)
        body = build(m.ProduceRequest, acks=1, timeout=TIMEOUT, topic_data=(topic_ref(
            m.TopicProduceData, name, topic_id(broker, name), partition_data=(build(
                m.PartitionProduceData, index=0,
                records=build_batch([SimpleRecord(value=b"v")])),)),))
        response = request(broker.bootstrap, body)
        answer = response.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.not_leader_or_follower
        expected = ((2, 0), [endpoint]) if version >= 10 else (None, [])
        assert hints(answer, getattr(response, "node_endpoints", ())) == expected, version
    for version in versions(fetch):
        m = request_module(fetch.API_KEY, version)
        body = build(m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0),
                     min_bytes=1, max_bytes=1 << 20, session_epoch=-1, topics=(topic_ref(
                         m.FetchTopic, name, topic_id(broker, name), partitions=(build(
                             m.FetchPartition, partition=0, fetch_offset=0,
                             current_leader_epoch=-1, last_fetched_epoch=-1,
                             log_start_offset=-1, partition_max_bytes=1024),)),))
        response = request(broker.bootstrap, body)
        answer = response.responses[0].partitions[0]
        assert answer.error_code == ErrorCode.not_leader_or_follower
        leader = (2, 0) if version >= 12 else None
        endpoints = [endpoint] if version >= 16 else []
        assert hints(answer, getattr(response, "node_endpoints", ())) == (leader, endpoints), \
            version
