from __future__ import annotations

import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from kernel.protocol.codec import InvalidRequest, decode_request, default_entity, encode_response
from kernel.routing import Routes, RoutingError
from tests.integration.wire import decode_response, encode_request


def test_registry_rejects_duplicates_and_unknown_versions() -> None:
    routes = Routes()
    routes.registry_for("a").register(3, lambda c, r: None, min_version=0, max_version=13)
    reg = routes.registry_for("b")
    with pytest.raises(RoutingError, match="claimed by both plugin 'a' and plugin 'b'"):
        reg.register(3, lambda c, r: None, min_version=0, max_version=1)
    with pytest.raises(RoutingError, match="kio has no schema"):
        reg.register(3000, lambda c, r: None, min_version=0, max_version=0)
    with pytest.raises(RoutingError, match="kio has no schema"):
        reg.register(0, lambda c, r: None, min_version=0, max_version=3)  # Produce starts at v3
    with pytest.raises(RoutingError, match="advertised minimum 4 is outside 0..3"):
        reg.register(0, lambda c, r: None, min_version=3, max_version=13,
                     advertised_min_version=4)
    # Advertised below the served range, as Kafka 4 does for Produce (kio has no v0-2).
    reg.register(0, lambda c, r: None, min_version=3, max_version=13, advertised_min_version=0)
    assert [(r.api_key, r.advertised_min_version, r.min_version, r.owner) for r in routes] \
        == [(0, 0, 3, "b"), (3, 0, 0, "a")]


def test_decode_flexible_request_with_header_v2() -> None:
    frame = encode_request(MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="t"),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    ), correlation_id=9, client_id="c1")[4:]
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == \
        (3, 12, 9, "c1")
    assert body.topics[0].name == "t" and body.allow_auto_topic_creation is False


def test_decode_errors() -> None:
    with pytest.raises(InvalidRequest, match="shorter than a header"):
        decode_request(b"\x00\x03")
    with pytest.raises(InvalidRequest, match="unknown API key 999"):
        decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(InvalidRequest, match="unsupported version 77"):
        decode_request(struct.pack(">hhih", 3, 77, 1, -1))
    frame = encode_request(ApiVersionsRequest(client_software_name="a",
                                              client_software_version="1"))[4:]
    with pytest.raises(InvalidRequest, match="malformed"):
        decode_request(frame[:-3])


def test_api_versions_response_uses_header_v0_others_v1() -> None:
    from kio.schema.api_versions.v3.response import ApiVersionsResponse
    from kio.schema.metadata.v12.response import MetadataResponse
    api = encode_response(18, 3, 5, default_entity(ApiVersionsResponse))
    assert struct.unpack_from(">i", api)[0] == len(api) - 4
    assert decode_response(api[4:], 18, 3)[0] == 5
    meta = encode_response(3, 12, 6, default_entity(MetadataResponse))
    assert meta[8] == 0  # the empty tagged-field section of response header v1
    assert decode_response(meta[4:], 3, 12)[0] == 6


def test_make_drops_fields_of_other_versions_and_refuses_unknown_names() -> None:
    from kio.schema.metadata.v1.response import MetadataResponseTopic

    from kernel.protocol.build import make
    values = {"name": "t", "error_code": 0, "partitions": (), "is_internal": False}
    # topic_id arrives in v10: one description serves v1 too.
    topic = make(MetadataResponseTopic, **values, topic_id=None)
    assert topic.name == "t" and not hasattr(topic, "topic_id")
    with pytest.raises(TypeError, match=r"MetadataResponseTopic: no version declares topic_idd"):
        make(MetadataResponseTopic, **values, topic_idd=None)
