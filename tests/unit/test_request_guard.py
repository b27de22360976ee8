"""The walk over a request frame that runs before kio's native reader (guard.py)."""

from __future__ import annotations

import datetime
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.serial import entity_reader, entity_writer

from kernel.protocol.codec import InvalidRequest, decode_request
from kernel.protocol.guard import MalformedFrame, request_guard
from tests.integration.wire import encode_request
from tests.kio_strategies import requests

# The reproduction: Metadata v12 whose compact topics array claims 2^32-2 items;
# kio asked for 34 GB and the broker aborted.
METADATA_V12_HUGE_TOPICS = bytes.fromhex("000000150003000c00000001000570726f626500ffffffff0f")
ROOT = Path(__file__).resolve().parents[2]


def frame_of(entity: Any) -> bytes:
    return encode_request(entity)[4:]


def test_a_collection_longer_than_the_frame_is_refused_before_kio_reads_it() -> None:
    # The guard alone: without it kio would abort this process (the broker test in
    # tests/integration/test_hostile_input.py sends the same frame to a broker process).
    with pytest.raises(MalformedFrame, match=r"an array of 4294967294 at byte 21"):
        request_guard(MetadataRequest)(METADATA_V12_HUGE_TOPICS[4:])


@pytest.mark.parametrize("count", [b"\xff\xff\xff\xfe", b"\x7f\xff\xff\xff", b"\x00\x10\x00\x00"])
def test_legacy_array_counts_beyond_the_frame_are_refused(count: bytes) -> None:
    from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1

    frame = bytearray(frame_of(MetadataV1(topics=())))
    frame[-4:] = count
    with pytest.raises(InvalidRequest):
        decode_request(bytes(frame))


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(requests())
def test_every_valid_request_passes_untouched(entity: Any) -> None:
    frame = frame_of(entity)
    guarded, body_at = request_guard(type(entity))(frame)
    assert guarded is frame
    assert entity_reader(entity.__header_schema__)(frame, 0)[1] == body_at
    # The walk that mends strings finds nothing to mend in UTF-8 strings.
    assert request_guard(type(entity), mend=True)(frame) == (frame, body_at)


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(requests(), st.one_of(st.none(), st.text(max_size=40)))
def test_the_client_id_and_body_are_kios(entity: Any, client_id: str | None) -> None:
    """decode_request reads the client id itself where the guard found the header's
    end; kio's header reader must agree (header v0 has none), and so the body."""
    header_type = entity.__header_schema__
    fields = {"request_api_key": entity.__api_key__, "request_api_version": entity.__version__,
              "correlation_id": 5}
    if "client_id" in header_type.__dataclass_fields__:
        fields["client_id"] = client_id
    buf = io.BytesIO()
    entity_writer(header_type)(buf, header_type(**fields))
    entity_writer(type(entity))(buf, entity)
    frame = buf.getvalue()
    kio_header, _ = entity_reader(header_type)(frame, 0)
    # kio's strategies draw durations up to Long.MAX_VALUE ms, but its reader builds a
    # timedelta from microseconds in 64 bits: a duration past 2**63 us (292,000 years)
    # is refused as malformed, where Kafka reads it (tests/reference/DIFFERENCES.md).
    assume(not _duration_beyond_kios_reader(entity))
    header, body = decode_request(frame)
    assert header.client_id == getattr(kio_header, "client_id", None)
    assert body == entity


_KIO_READER_MAX = datetime.timedelta(microseconds=2**63 - 1)


def _duration_beyond_kios_reader(entity: Any) -> bool:
    if isinstance(entity, datetime.timedelta):
        return abs(entity) > _KIO_READER_MAX
    if isinstance(entity, tuple):
        return any(_duration_beyond_kios_reader(e) for e in entity)
    fields = getattr(entity, "__dataclass_fields__", None)
    return fields is not None and any(
        _duration_beyond_kios_reader(getattr(entity, name)) for name in fields
        if not name.startswith("__"))


def _metadata_v12(topics: tuple[MetadataRequestTopic, ...] | None) -> MetadataRequest:
    return MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)


def test_unknown_tagged_fields_are_skipped() -> None:
    """KIP-482: a receiver skips the tags it does not know (kio refuses them)."""
    plain = frame_of(_metadata_v12((MetadataRequestTopic(topic_id=None, name="t"),)))
    # Every struct ends with its tagged fields; a frame without any ends in b"\x00"
    # (the topic), b"\x00" (the request). Give the request two unknown tags, 7 and 9.
    tagged = plain[:-1] + b"\x02" + b"\x07\x03abc" + b"\x09\x00"
    header, body = decode_request(tagged)
    assert body == _metadata_v12((MetadataRequestTopic(topic_id=None, name="t"),))
    assert header.api_key == 3


def test_unknown_tags_in_the_header_and_a_nested_struct_are_skipped() -> None:
    plain = frame_of(_metadata_v12((MetadataRequestTopic(topic_id=None, name="t"),)))
    # Header v2: api key, version, correlation id, client id (int16 length), then tags.
    client_id_len = int.from_bytes(plain[8:10], "big")
    header_tags = 10 + client_id_len
    assert plain[header_tags] == 0
    topic_tags = plain.index(b"\x02t") + 2  # after the topic's compact name "t"
    assert plain[topic_tags] == 0
    frame = (plain[:header_tags] + b"\x01\x05\x02zz" + plain[header_tags + 1:topic_tags]
             + b"\x01\x63\x01\xff" + plain[topic_tags + 1:])
    header, body = decode_request(frame)
    assert body == _metadata_v12((MetadataRequestTopic(topic_id=None, name="t"),))
    # The body is found where the header ends once its tags are cut out.
    assert header.client_id == "wire-test"


def test_a_client_id_that_is_not_utf8_is_read_with_replacements_as_kafka_does() -> None:
    plain = bytearray(frame_of(_metadata_v12(())))
    plain[10] = 0xFF  # the client id "wire-test" now begins with a byte UTF-8 lacks
    header, body = decode_request(bytes(plain))
    assert header.client_id == "\ufffdire-test"
    assert body == _metadata_v12(())


NOT_UTF8 = [b"\xff", b"\xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80", b"ok\x80\x80ok"]


@pytest.mark.parametrize("raw", NOT_UTF8)
@pytest.mark.parametrize("version", [12, 4], ids=["compact", "legacy"])
def test_strings_that_are_not_utf8_are_read_with_replacements_as_kafka_does(
        raw: bytes, version: int) -> None:
    """kio refuses such a frame; Kafka's Java reads the string with U+FFFD in place of
    what is not UTF-8 (and then answers INVALID_TOPIC_EXCEPTION for such a topic)."""
    if version == 12:
        entity: Any = _metadata_v12((MetadataRequestTopic(topic_id=None, name="AB"),
                                     MetadataRequestTopic(topic_id=None, name="after")))
    else:
        from kio.schema.metadata.v4.request import MetadataRequest as MetadataV4
        from kio.schema.metadata.v4.request import MetadataRequestTopic as TopicV4
        entity = MetadataV4(topics=(TopicV4(name="AB"), TopicV4(name="after")),
                            allow_auto_topic_creation=True)
    plain = frame_of(entity)
    at = plain.index(b"AB")
    length = (len(raw) + 1).to_bytes(1, "big") if version == 12 else len(raw).to_bytes(2, "big")
    width = len(length)
    frame = plain[:at - width] + length + raw + plain[at + 2:]
    header, body = decode_request(frame)
    assert [t.name for t in body.topics] == [raw.decode(errors="replace"), "after"]
    assert header.client_id == "wire-test"


def test_a_string_in_a_known_tagged_field_is_mended_and_the_field_resized() -> None:
    from kio.schema.fetch.v15.request import FetchRequest, ReplicaState

    body = FetchRequest(max_wait=datetime.timedelta(0), min_bytes=0, topics=(),
                        forgotten_topics_data=(), rack_id="")
    plain = frame_of(body)
    # Tag 0, cluster_id: 3 bytes, the compact string b"a\xff"; then tag 1, replica_state
    # (replica id 3, epoch 4), read where tag 0's resized field ends.
    state = b"\x00\x00\x00\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x04" + b"\x00"
    frame = (plain[:-1] + b"\x02" + b"\x00\x03\x03a\xff"
             + b"\x01" + bytes([len(state)]) + state)
    decoded = decode_request(frame)[1]
    assert decoded.cluster_id == "a\ufffd"
    assert decoded.replica_state == ReplicaState(replica_id=3, replica_epoch=4)
    # kio reads a tagged value by its content, so it is the guard that checks sizes:
    # the mended frame is one it passes.
    mended, _ = request_guard(FetchRequest, mend=True)(frame)
    assert request_guard(FetchRequest)(mended)[0] is mended


def test_a_struct_in_a_known_tagged_field_loses_its_unknown_tags_and_the_field_resized(
) -> None:
    from kio.schema.fetch.v15.request import FetchRequest, ReplicaState

    body = FetchRequest(max_wait=datetime.timedelta(0), min_bytes=0, topics=(),
                        forgotten_topics_data=(), rack_id="")
    plain = frame_of(body)
    # Tag 1, replica_state: replica id 3 and epoch 4, then a tag 9 it does not know.
    state = (b"\x00\x00\x00\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x04"
             + b"\x01\x09\x02zz")
    frame = plain[:-1] + b"\x01\x01" + bytes([len(state)]) + state
    decoded = decode_request(frame)[1]
    assert decoded.replica_state == ReplicaState(replica_id=3, replica_epoch=4)
    cut, _ = request_guard(FetchRequest)(frame)
    assert request_guard(FetchRequest)(cut)[0] is cut


def test_a_known_tagged_field_of_the_wrong_size_is_refused() -> None:
    # Fetch v12 knows tag 0 (cluster_id, a string): declare 3 bytes, send the 2 of "a".
    from kio.schema.fetch.v12.request import FetchRequest

    body = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, topics=(),
                        forgotten_topics_data=(), rack_id="")
    plain = frame_of(body)
    assert plain.endswith(b"\x00")
    frame = plain[:-1] + b"\x01\x00\x03\x02a\x00"
    with pytest.raises(InvalidRequest, match="tagged field 0"):
        decode_request(frame)
    with pytest.raises(MalformedFrame):
        request_guard(FetchRequest)(frame)


def test_no_frame_that_passes_the_guard_makes_kio_allocate_past_a_limit() -> None:
    """Mutated frames of every schema, in a process whose address space is capped:
    if the guard let through a length that kio sizes an allocation from, the native
    reader aborts the process (as it aborted the broker)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    examples = os.environ.get("KAFKERNEL_GUARD_EXAMPLES", "1500")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.unit.guard_probe", examples],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    assert "refused" in proc.stdout
