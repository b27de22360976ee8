"""RecentRequests: an identical small frame is decoded once; nothing else is kept."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest

from kernel.protocol.codec import InvalidRequest, RecentRequests, peek_header
from tests.integration.wire import encode_request


def decode(recent: RecentRequests, frame: bytes) -> tuple[str | None, Any]:
    api_key, api_version, _ = peek_header(frame)
    return recent.decode(frame, api_key, api_version)


def metadata(name: str) -> MetadataRequest:
    return MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=name),),
                           allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)


def test_the_same_request_under_another_correlation_id_is_the_entity_decoded_before() -> None:
    recent = RecentRequests()
    first = decode(recent, encode_request(metadata("a"), 1, "c1")[4:])
    again = decode(recent, encode_request(metadata("a"), 2, "c1")[4:])
    assert again[1] is first[1]
    assert first == ("c1", metadata("a"))
    # Any other byte is another request: the topic, the client id.
    assert decode(recent, encode_request(metadata("b"), 3, "c1")[4:])[1] == metadata("b")
    assert decode(recent, encode_request(metadata("a"), 4, "c2")[4:])[0] == "c2"


def test_secrets_records_and_large_frames_are_not_kept() -> None:
    recent = RecentRequests()
    sasl = encode_request(SaslAuthenticateRequest(auth_bytes=b"\0user\0secret"), 1)[4:]
    assert decode(recent, sasl)[1] is not decode(recent, sasl)[1]
    large = encode_request(metadata("t" * RecentRequests.MAX_FRAME_BYTES), 1)[4:]
    assert decode(recent, large)[1] is not decode(recent, large)[1]


def test_a_frame_that_fails_fails_every_time() -> None:
    recent = RecentRequests()
    frame = encode_request(metadata("a"), 1)[4:-1]  # its last byte cut off
    for _ in range(2):
        with pytest.raises(InvalidRequest):
            decode(recent, frame)


def test_the_oldest_goes_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RecentRequests, "MAX_ENTRIES", 2)
    recent = RecentRequests()
    frames = [encode_request(HeartbeatRequest(group_id="g", generation_id=n, member_id="m",
                                              group_instance_id=None), n)[4:]
              for n in range(3)]
    decoded = [decode(recent, f)[1] for f in frames]
    assert decode(recent, frames[2])[1] is decoded[2]
    assert decode(recent, frames[1])[1] is decoded[1]
    assert decode(recent, frames[0])[1] is not decoded[0]  # evicted by the third
