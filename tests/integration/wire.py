"""Raw-socket helpers for tests that speak the protocol byte by byte (kio encodes)."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kernel.protocol import client

# The kernel's own request and response framing (what the replica fetchers send).
decode_response = client.decode_response


def encode_request(body: Any, correlation_id: int = 1, client_id: str = "wire-test") -> bytes:
    return client.encode_request(body, correlation_id, client_id)


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


def api_versions_answered(sock: socket.socket, correlation_id: int,
                          timeout: float = 5.0) -> bool:
    """Sends ApiVersions v0; True when it is answered within ``timeout``."""
    from kio.schema.api_versions.v0.request import ApiVersionsRequest

    sock.sendall(encode_request(ApiVersionsRequest(), correlation_id=correlation_id))
    sock.settimeout(timeout)
    try:
        frame = recv_frame(sock)
    except TimeoutError:
        return False
    assert frame is not None, "the broker closed the connection"
    assert decode_response(frame, 18, 0)[0] == correlation_id
    return True
