"""Requests an attacker (or a newer client) sends: each gets Kafka's answer, and the
broker keeps serving (issue: hostile input, items 1, 5 and 6)."""

from __future__ import annotations

import datetime
import socket
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import ListOffsetsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

from kernel.protocol.records import SimpleRecord, build_batch
from kernel.testing.embedded import EmbeddedBroker
from tests.broker_process import BrokerProcess
from tests.integration.wire import (
    closed_by_broker,
    connect,
    decode_response,
    encode_request,
    recv_frame,
    request,
)

# Metadata v12 whose compact topics array claims 2^32-2 topics: kio asked for 34 GB and
# the broker process aborted.
HUGE_TOPICS_ARRAY = bytes.fromhex("000000150003000c00000001000570726f626500ffffffff0f")


def test_a_25_byte_request_claiming_2_to_the_32_topics_is_refused(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        for _ in range(3):
            with connect(broker.bootstrap) as sock:
                sock.sendall(HUGE_TOPICS_ARRAY)
                assert closed_by_broker(sock)
        assert broker.alive and broker.answers()
        assert broker.problems() == []
        refusals = [e for e in broker.events() if e.get("event") == "closing connection"]
        assert len(refusals) == 3
        assert refusals[0]["level"] == "warning"
        assert "malformed MetadataRequest v12: an array of 4294967294" in refusals[0]["reason"]


def _metadata(sock: socket.socket, frame: bytes) -> object:
    sock.sendall(frame)
    answer = recv_frame(sock)
    assert answer is not None, "the broker closed the connection"
    return decode_response(answer, 3, 12)[1]


def test_unknown_tagged_fields_are_skipped(broker: EmbeddedBroker) -> None:
    """KIP-482: a newer client's tags that this broker does not know are ignored."""
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="tagged"),),
                           allow_auto_topic_creation=True,
                           include_topic_authorized_operations=False)
    plain = encode_request(body, correlation_id=31)[4:]
    client_id_end = 10 + int.from_bytes(plain[8:10], "big")  # header v2: the tags follow
    topic_end = plain.index(b"\x07tagged") + 7
    tagged = (plain[:client_id_end] + b"\x01\x10\x03abc"  # header: tag 16
              + plain[client_id_end + 1:topic_end] + b"\x02\x05\x00\x06\x01\x01"  # topic
              + plain[topic_end + 1:-1] + b"\x01\x7f\x02hi")  # request: tag 127
    framed = len(tagged).to_bytes(4, "big") + tagged
    with connect(broker.bootstrap) as sock:
        response = _metadata(sock, framed)
    assert [t.name for t in response.topics] == ["tagged"]  # type: ignore[attr-defined]
    assert response.topics[0].error_code == ErrorCode.none  # type: ignore[attr-defined]


def test_a_null_where_the_schema_allows_none_closes_the_connection(
    broker: EmbeddedBroker,
) -> None:
    """ListOffsets v7 topics and OffsetFetch v9 groups are not nullable: Kafka refuses
    such a request; the handlers raised TypeError on them."""
    list_offsets = encode_request(ListOffsetsRequest(replica_id=-1, isolation_level=0,  # type: ignore[arg-type]
                                                     topics=()))
    offset_fetch = encode_request(OffsetFetchRequest(groups=(), require_stable=False))
    for frame in (list_offsets[:-2] + b"\x00\x00", offset_fetch[:-3] + b"\x00\x00\x00"):
        with connect(broker.bootstrap) as sock:
            sock.sendall(frame)
            assert closed_by_broker(sock)
    with connect(broker.bootstrap) as sock:
        response = _metadata(sock, encode_request(MetadataRequest(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), correlation_id=3))
    assert response is not None


def test_acks_0_produce_that_fails_closes_the_connection_quietly(
    broker: EmbeddedBroker,
) -> None:
    """Kafka's answer to a failed acks=0 produce is to close the connection, so the
    client refreshes its metadata; it was logged as a handler failure."""
    batch = build_batch([SimpleRecord(b"v")])
    body = ProduceRequest(transactional_id=None, acks=0,
                          timeout=datetime.timedelta(seconds=5),
                          topic_data=(TopicProduceData(name="no-such-topic", partition_data=(
                              PartitionProduceData(index=0, records=batch),)),))
    with connect(broker.bootstrap) as sock:
        sock.sendall(encode_request(body))
        assert closed_by_broker(sock)


def test_clients_cannot_append_to_the_offsets_topic(broker: EmbeddedBroker) -> None:
    """A record the group coordinator cannot decode stopped it loading the partition
    after a restart (every group there then unavailable); Kafka refuses appends to
    internal topics with INVALID_TOPIC_EXCEPTION."""
    garbage = build_batch([SimpleRecord(b"\xff\xff\xff", key=b"\x00\x01\xff\xff")])
    body = ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                          topic_data=(TopicProduceData(name="__consumer_offsets", partition_data=(
                              PartitionProduceData(index=0, records=garbage),)),))
    response = request(broker.bootstrap, body)
    answer = response.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.invalid_topic_exception
    assert answer.base_offset == -1
    broker.restart()  # the fixture fails the test if the coordinator logs a failed load
    assert broker.logged_errors == []
