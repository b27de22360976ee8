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


def test_each_listener_role_has_its_own_table() -> None:
    from kernel.routing import BROKER, CONTROLLER
    routes = Routes()
    kernel, raft = routes.registry_for("kernel"), routes.registry_for("kraft")
    kernel.register(1, lambda c, r: "topics", min_version=4, max_version=18)
    kernel.register(18, lambda c, r: None, min_version=0, max_version=4,
                    listeners=(BROKER, CONTROLLER))
    # Fetch of the metadata log on controller listeners: another owner, no conflict.
    raft.register(1, lambda c, r: "raft", min_version=4, max_version=18,
                  listeners=(CONTROLLER,))
    raft.register(52, lambda c, r: None, min_version=0, max_version=2, listeners=(CONTROLLER,))
    broker, controller = routes.table(BROKER), routes.table(CONTROLLER)
    assert [r.api_key for r in broker] == [1, 18]
    assert [r.api_key for r in controller] == [1, 18, 52]
    assert broker.get(52) is None and 52 in controller
    fetch_b, fetch_c = broker.get(1), controller.get(1)
    assert fetch_b is not None and fetch_c is not None
    assert (fetch_b.owner, fetch_c.owner) == ("kernel", "kraft")
    assert broker.get(18) is controller.get(18)
    assert [(r.api_key, r.owner) for r in routes] == [
        (1, "kernel"), (1, "kraft"), (18, "kernel"), (52, "kraft")]
    with pytest.raises(RoutingError, match="claimed by both plugin 'kraft' and plugin "
                                           "'other' on controller listeners"):
        routes.registry_for("other").register(52, lambda c, r: None, min_version=0,
                                              max_version=2, listeners=(BROKER, CONTROLLER))
    assert 52 not in broker  # a refused registration adds to no table
    with pytest.raises(RoutingError, match="each must be one of broker, controller"):
        raft.register(53, lambda c, r: None, min_version=0, max_version=1,
                      listeners=("CONTROLLER",))


def test_handler_modules_name_their_listeners() -> None:
    from kernel import handlers
    from kernel.routing import BROKER, CONTROLLER
    routes = Routes()
    handlers.kafkernel_register_apis(routes.registry_for("kernel"))
    # Only ApiVersions of the kernel's own handlers serves controller listeners.
    assert [r.api_key for r in routes.table(CONTROLLER)] == [18]
    assert {0, 1, 3, 18} <= {r.api_key for r in routes.table(BROKER)}
