"""Malformed and unsupported input gets Kafka's behaviour, and the broker keeps serving."""

from __future__ import annotations

import contextlib
import struct

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import (
    closed_by_broker,
    connect,
    decode_response,
    encode_request,
    recv_frame,
    request,
)


def _api_versions_ok(bootstrap: str) -> None:
    """A fresh client still gets a good ApiVersions answer."""
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(ApiVersionsV0(), correlation_id=77))
        frame = recv_frame(sock)
        assert frame is not None
        correlation_id, body = decode_response(frame, 18, 0)
        assert correlation_id == 77
        assert body.error_code == ErrorCode.none
        assert any(k.api_key == 3 for k in body.api_keys)


def test_garbage_bytes_close_the_connection(broker: EmbeddedBroker) -> None:
    with connect(broker.bootstrap) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert closed_by_broker(sock)
    _api_versions_ok(broker.bootstrap)


def test_frame_over_the_size_limit_closes(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory({"socket.request.max.bytes": 1024})
    with connect(b.bootstrap) as sock:
        sock.sendall(struct.pack(">i", 4096) + b"\x00" * 64)
        assert closed_by_broker(sock)
    with connect(b.bootstrap) as sock:
        sock.sendall(struct.pack(">i", -5))
        assert closed_by_broker(sock)
    _api_versions_ok(b.bootstrap)


def test_truncated_frame_waits_and_others_are_served(broker: EmbeddedBroker) -> None:
    request = encode_request(ApiVersionsV0(), correlation_id=5)
    with connect(broker.bootstrap) as sock:
        sock.sendall(request[:-3])
        _api_versions_ok(broker.bootstrap)
        sock.settimeout(0.3)
        with contextlib.suppress(TimeoutError):
            assert sock.recv(1) == b"", "no answer to half a request"
        # The rest arrives: the request completes normally.
        sock.settimeout(5)
        sock.sendall(request[-3:])
        frame = recv_frame(sock)
        assert frame is not None
        assert decode_response(frame, 18, 0)[0] == 5


def test_unknown_api_key_closes(broker: EmbeddedBroker) -> None:
    with connect(broker.bootstrap) as sock:
        payload = struct.pack(">hhih", 999, 0, 1, -1)
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert closed_by_broker(sock)
    _api_versions_ok(broker.bootstrap)


def test_unsupported_version_closes(broker: EmbeddedBroker) -> None:
    with connect(broker.bootstrap) as sock:
        payload = struct.pack(">hhih", 3, 99, 1, -1)  # Metadata v99
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert closed_by_broker(sock)
    _api_versions_ok(broker.bootstrap)


def test_produce_is_advertised_from_v0_but_v0_to_v2_are_refused(broker: EmbeddedBroker) -> None:
    """KAFKA-18659, as Kafka 4: older librdkafka compresses with gzip, snappy and lz4
    only when Produce is advertised from v0; the versions below 3 are still refused."""
    body = request(broker.bootstrap, ApiVersionsV0())
    versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert versions[0] == (0, 13)
    for version in (0, 1, 2):
        with connect(broker.bootstrap) as sock:
            payload = struct.pack(">hhih", 0, version, 1, -1) + struct.pack(">hii", 1, 1000, 0)
            sock.sendall(struct.pack(">i", len(payload)) + payload)
            assert closed_by_broker(sock), version
    _api_versions_ok(broker.bootstrap)


def test_unsupported_api_versions_version_gets_v0_answer(broker: EmbeddedBroker) -> None:
    with connect(broker.bootstrap) as sock:
        payload = struct.pack(">hhih", 18, 99, 42, -1) + b"\x00\x00"
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        frame = recv_frame(sock)
        assert frame is not None
        correlation_id, body = decode_response(frame, 18, 0)
        assert correlation_id == 42
        assert body.error_code == ErrorCode.unsupported_version
        versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert versions[18] == (0, 4)
        # The connection stays usable: the client retries with a version it knows.
        sock.sendall(encode_request(ApiVersionsV0(), correlation_id=43))
        frame = recv_frame(sock)
        assert frame is not None and decode_response(frame, 18, 0)[0] == 43


def test_malformed_body_closes(broker: EmbeddedBroker) -> None:
    with connect(broker.bootstrap) as sock:
        good = encode_request(MetadataV1(topics=None))
        # Claim a topics array of 1000 entries that is not there.
        payload = good[4:-4] + struct.pack(">i", 1000)
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert closed_by_broker(sock)
    _api_versions_ok(broker.bootstrap)


def test_api_versions_v3_rejects_invalid_software_name(broker: EmbeddedBroker) -> None:
    with connect(broker.bootstrap) as sock:
        sock.sendall(encode_request(ApiVersionsV3(
            client_software_name="bad name!", client_software_version="1.0")))
        frame = recv_frame(sock)
        assert frame is not None
        _, body = decode_response(frame, 18, 3)
        assert body.error_code == ErrorCode.invalid_request


def test_pipelined_requests_are_answered_in_order(broker: EmbeddedBroker) -> None:
    with connect(broker.bootstrap) as sock:
        sock.sendall(b"".join(
            encode_request(ApiVersionsV0() if i % 2 else MetadataV1(topics=None),
                           correlation_id=i)
            for i in range(50)
        ))
        for i in range(50):
            frame = recv_frame(sock)
            assert frame is not None
            assert struct.unpack_from(">i", frame)[0] == i


def test_idle_connections_are_closed(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory({"connections.max.idle.ms": 300})
    with connect(b.bootstrap) as sock:
        sock.sendall(encode_request(ApiVersionsV0()))
        assert recv_frame(sock) is not None
        assert closed_by_broker(sock)  # nothing more sent: closed after ~300 ms idle
