"""Frames the guard (kernel/protocol/guard.py) refuses or mends, sent to the reference
Kafka and to Kafkernel: both close the connection on a frame they cannot parse, and both
answer a request whose only oddity is tagged fields they do not know."""

from __future__ import annotations

import datetime
import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import ListOffsetsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v2.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest

from tests.integration.wire import (
    closed_by_broker,
    connect,
    decode_response,
    encode_request,
    recv_frame,
)
from tests.reference.conformance import documented
from tests.reference.diff import Pair, Side

HUGE_TOPICS_ARRAY = bytes.fromhex("000000150003000c00000001000570726f626500ffffffff0f")


def _closes(side: Side, frame: bytes) -> bool:
    with connect(side.bootstrap) as sock:
        sock.sendall(frame)
        return closed_by_broker(sock)


def _null_list_offsets_topics() -> bytes:
    frame = encode_request(ListOffsetsRequest(replica_id=-1, isolation_level=0,  # type: ignore[arg-type]
                                              topics=()))
    return frame[:-2] + b"\x00\x00"  # compact array 0: null


def _null_offset_fetch_groups() -> bytes:
    frame = encode_request(OffsetFetchRequest(groups=(), require_stable=False))
    return frame[:-3] + b"\x00\x00\x00"


@pytest.mark.parametrize("frame", [
    HUGE_TOPICS_ARRAY, _null_list_offsets_topics(), _null_offset_fetch_groups(),
], ids=["array-of-2^32-2", "list-offsets-v7-null-topics", "offset-fetch-v9-null-groups"])
def test_an_unparseable_request_closes_the_connection_on_both(pair: Pair, frame: bytes) -> None:
    assert _closes(pair.kafka, frame)
    assert _closes(pair.kafkernel, frame)


def _metadata_frame() -> bytes:
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="no-such"),),
                           allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    return encode_request(body, correlation_id=31)[4:]


def _metadata_answer(side: Side, frame: bytes) -> object:
    with connect(side.bootstrap) as sock:
        sock.sendall(len(frame).to_bytes(4, "big") + frame)
        answer = recv_frame(sock)
    assert answer is not None, "the broker closed the connection"
    return decode_response(answer, 3, 12)[1]


def _metadata_with_unknown_tags(side: Side) -> object:
    plain = _metadata_frame()
    client_id_end = 10 + int.from_bytes(plain[8:10], "big")
    tagged = (plain[:client_id_end] + b"\x01\x10\x03abc" + plain[client_id_end + 1:-1]
              + b"\x01\x7f\x02hi")
    return _metadata_answer(side, tagged)


def test_unknown_tagged_fields_are_skipped_by_both(pair: Pair) -> None:
    pair.assert_same(pair.each(_metadata_with_unknown_tags))


def _metadata_from_a_client_id_not_utf8(side: Side) -> object:
    frame = bytearray(_metadata_frame())
    frame[10] = 0xFF  # the client id's first byte: no UTF-8 sequence starts with it
    return _metadata_answer(side, bytes(frame))


def test_a_client_id_that_is_not_utf8_is_answered_by_both(pair: Pair) -> None:
    """Kafka decodes the client id as Java's String does, replacing what is not
    UTF-8; Kafkernel closed the connection on it until it read the client id itself."""
    pair.assert_same(pair.each(_metadata_from_a_client_id_not_utf8))


def _metadata_for_a_topic_name_not_utf8(side: Side) -> object:
    frame = _metadata_frame()
    at = frame.index(b"no-such")
    return _metadata_answer(side, frame[:at] + b"no\xffsuch" + frame[at + 7:])


def test_a_topic_name_that_is_not_utf8_is_answered_by_both(pair: Pair) -> None:
    """Kafka reads every string as Java's String does, replacing what is not UTF-8, and
    answers such a topic name with INVALID_TOPIC_EXCEPTION; kio refused the frame, and
    Kafkernel closed the connection, until the guard mended its strings."""
    answers = pair.each(_metadata_for_a_topic_name_not_utf8)
    pair.assert_same(answers)
    topic = answers.kafkernel.topics[0]
    assert (topic.name, topic.error_code) == ("no\ufffdsuch", ErrorCode.invalid_topic_exception)


def _offset_commit_retained_for_ages() -> bytes:
    """OffsetCommit v2 whose retention_time_ms is 2^62: a valid int64 that kio's reader
    cannot hold in a timedelta (past 2^63 microseconds)."""
    marker = 123_456_789
    frame = encode_request(OffsetCommitRequest(
        group_id="ages", generation_id_or_member_epoch=-1, member_id="",
        retention_time=datetime.timedelta(milliseconds=marker),
        topics=(OffsetCommitRequestTopic(name="t", partitions=(OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_metadata=None),)),)))
    at = frame.index(struct.pack(">q", marker))
    return frame[:at] + struct.pack(">q", 2**62) + frame[at + 8:]


def test_a_duration_past_kios_reader_is_answered_by_kafka_only(pair: Pair) -> None:
    """D18: Kafka reads any int64 duration; Kafkernel closes the connection on one past
    2^63 microseconds (about 292,000 years), which kio's reader cannot build."""
    documented("D18")
    frame = _offset_commit_retained_for_ages()
    assert not _closes(pair.kafka, frame)
    assert _closes(pair.kafkernel, frame)
