"""Raw-socket helpers for tests that speak the protocol byte by byte (kio encodes)."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer


def encode_request(body: Any, correlation_id: int = 1, client_id: str = "wire-test") -> bytes:
    header_cls = body.__header_schema__
    fields = {"request_api_key": body.__api_key__, "request_api_version": body.__version__,
              "correlation_id": correlation_id}
    if "client_id" in header_cls.__dataclass_fields__:
        fields["client_id"] = client_id
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(**fields))
    entity_writer(type(body))(buf, body)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def recv_frame(sock: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    head = _recv_exactly(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def decode_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, body); ApiVersions always has a v0 header."""
    cls = load_response_schema(api_key, version)
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    offset = 4
    if api_key != 18 and cls.__header_schema__.__version__ >= 1:
        offset += 1  # empty tagged fields
    body, _ = entity_reader(cls)(frame, offset)
    return correlation_id, body


def closed_by_broker(sock: socket.socket) -> bool:
    """The broker closed the connection (waits up to 5 s for it)."""
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def connect(bootstrap: str, timeout: float = 5.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    return sock


def request(bootstrap: str, body: Any, correlation_id: int = 9) -> Any:
    """One request on a new connection; the decoded response body."""
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(body, correlation_id=correlation_id))
        frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    answered, response = decode_response(frame, body.__api_key__, body.__version__)
    assert answered == correlation_id
    return response
