"""An outgoing connection to another broker, as Kafka's NetworkClient to one node.

Replica fetchers use it to fetch from leaders. Requests and responses are kio's
dataclasses, written and read with kio's own serializers; one request is in flight at a
time, which is all a fetcher needs (Kafka's fetcher sends a fetch, handles its answer,
then sends the next). Any failure closes the connection: the next request reconnects.

A response is read the way the broker's own connections read requests: the socket
fills one buffer of the frame's size (a buffered protocol), which kio then reads. A
fetch response carries up to a MiB of records per partition; through an asyncio stream
it was copied three times more (into the stream's buffer, out of it, into bytes) with a
Python call and a task wake-up per chunk, on the follower's side of every acks=all
round trip.
"""

from __future__ import annotations

import asyncio
import io
import ssl
import struct
import time
from collections import deque
from functools import cache
from typing import Any, cast

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader

from kernel.protocol.sasl_client import SaslClientError, SaslCredentials, client_for
from kernel.protocol.writer import compiled_writer

_SIZE = struct.Struct(">i")
API_VERSIONS_KEY = 18
# Kafka's clients re-authenticate between 85% and 95% of the session's lifetime (KIP-368);
# this connection reconnects, and so authenticates anew, at 85%.
REAUTHENTICATE_AT = 0.85


class BrokerConnectionError(Exception):
    """The other broker could not be reached, closed the connection, answered out of
    turn or did not answer in time."""


@cache
def _request_writers(request_type: type) -> tuple[Any, Any]:
    return compiled_writer(request_type.__header_schema__), compiled_writer(request_type)


@cache
def _response_readers(api_key: int, api_version: int) -> tuple[Any, Any]:
    cls = load_response_schema(api_key, api_version)
    # ApiVersions answers with header v0 whatever its version (the client cannot know
    # the flexible header before it knows the versions).
    header = None if api_key == API_VERSIONS_KEY else entity_reader(cls.__header_schema__)
    return header, entity_reader(cls)


def encode_request(body: Any, correlation_id: int, client_id: str) -> bytes:
    """A request frame, size prefix included."""
    header_type = body.__header_schema__
    fields: dict[str, Any] = {"request_api_key": body.__api_key__,
                              "request_api_version": body.__version__,
                              "correlation_id": correlation_id}
    if "client_id" in header_type.__dataclass_fields__:
        fields["client_id"] = client_id
    write_header, write_body = _request_writers(type(body))
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(buf, header_type(**fields))
    write_body(buf, body)
    frame = buf.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def decode_response(frame: bytes | memoryview, api_key: int,
                    api_version: int) -> tuple[int, Any]:
    """(correlation id, body) of a response frame without its size prefix."""
    read_header, read_body = _response_readers(api_key, api_version)
    if read_header is None:
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        offset = 4
    else:
        header, offset = read_header(frame, 0)
        correlation_id = header.correlation_id
    body, _ = read_body(frame, offset)
    return correlation_id, body


class _FrameReader(asyncio.BufferedProtocol):
    """The connection's protocol: response frames, each read straight into a buffer of
    its size (the size prefix first, then the frame), handed to the request waiting
    for one. The prefix and the frame are separate reads, so nothing of a next frame
    is ever read into this one's buffer."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._prefix = bytearray(4)
        self._frame: bytearray | None = None  # None: reading a size prefix
        self._filled = 0
        self._frames: deque[bytearray] = deque()  # read, not yet asked for
        self._waiter: asyncio.Future[bytearray] | None = None
        self._failure: BaseException | None = None
        self._writable: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        target = self._prefix if self._frame is None else self._frame
        return memoryview(target)[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._frame is None:
            if self._filled < 4:
                return
            (size,) = _SIZE.unpack(self._prefix)
            if not 4 <= size <= self._max_frame_bytes:
                self._fail(BrokerConnectionError(f"response of {size} bytes is out of bounds"))
                return
            self._frame, self._filled = bytearray(size), 0
        elif self._filled == len(self._frame):
            frame, self._frame, self._filled = self._frame, None, 0
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                self._waiter = None
                waiter.set_result(frame)
            else:
                self._frames.append(frame)

    def eof_received(self) -> bool | None:
        return False  # close: a broker that stops sending answers nothing more

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            expected = 4 if self._frame is None else len(self._frame)
            exc = asyncio.IncompleteReadError(b"", expected)
        self._fail(exc)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.resume_writing()  # a writer waiting finds the failure
        if self.transport is not None:
            self.transport.close()

    async def drained(self) -> None:
        """Returns once the transport takes more (a request larger than its buffer)."""
        while True:
            if self._failure is not None:
                raise self._failure
            if self._writable is None:
                return
            await asyncio.shield(self._writable)

    async def next_frame(self) -> bytearray:
        if self._frames:
            return self._frames.popleft()
        if self._failure is not None:
            raise self._failure
        self._waiter = asyncio.get_running_loop().create_future()
        return await self._waiter


class BrokerConnection:
    """A connection to ``host:port``, opened on the first request."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float,
                 ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslCredentials | None = None,
                 max_response_bytes: int = 512 * 1024 * 1024) -> None:
        self.host = host
        self.port = port
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._ssl = ssl_context
        self._sasl = sasl
        self._reauthenticate_at: float | None = None
        self._max_response_bytes = max_response_bytes
        self._protocol: _FrameReader | None = None
        self._correlation_id = 0

    @property
    def connected(self) -> bool:
        return self._protocol is not None

    async def request(self, body: Any) -> Any:
        """Send ``body`` and return the response body; raises BrokerConnectionError."""
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
            # that arrives as the answer does, and a stopping fetcher would go on.
            async with asyncio.timeout(self._timeout_s):
                return await self._exchange(body)
        except BrokerConnectionError:
            self.close()
            raise
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError) as e:
            self.close()
            what = "timed out" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
            raise BrokerConnectionError(f"{self.host}:{self.port}: {what}") from None
        except BaseException:
            # Cancelled, or a bug: the exchange stopped half way, so the connection's
            # state is unknown; the next request starts on a new one.
            self.close()
            raise

    async def _exchange(self, body: Any) -> Any:
        # A connection the peer closed since the last answer is replaced, not written to.
        if self._protocol is None or self._closed_by_peer() or (
                self._reauthenticate_at is not None and
                time.monotonic() >= self._reauthenticate_at):
            self.close()
            await self._connect()
        return await self._round_trip(body)

    def _closed_by_peer(self) -> bool:
        transport = self._protocol.transport if self._protocol is not None else None
        return transport is None or transport.is_closing()

    async def _connect(self) -> None:
        max_bytes = self._max_response_bytes
        _, self._protocol = await asyncio.get_running_loop().create_connection(
            lambda: _FrameReader(max_bytes), self.host, self.port, ssl=self._ssl,
            server_hostname=self.host if self._ssl is not None else None)
        if self._sasl is not None:
            await self._authenticate(self._sasl)

    async def _authenticate(self, credentials: SaslCredentials) -> None:
        """SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate v2."""
        where = f"{self.host}:{self.port}"
        handshake = await self._round_trip(SaslHandshakeRequest(
            mechanism=credentials.mechanism))
        if handshake.error_code != ErrorCode.none:
            raise BrokerConnectionError(
                f"{where}: SASL mechanism {credentials.mechanism} refused "
                f"({handshake.error_code.name}); the listener offers "
                f"{', '.join(handshake.mechanisms) or 'none'}")
        client = client_for(credentials)
        token: bytes | None = client.first()
        while token is not None:
            answer = await self._round_trip(SaslAuthenticateRequest(auth_bytes=token))
            if answer.error_code != ErrorCode.none:
                raise BrokerConnectionError(
                    f"{where}: SASL authentication of {credentials.username!r} failed: "
                    f"{answer.error_message or answer.error_code.name}")
            try:
                token = client.next(answer.auth_bytes)
            except SaslClientError as e:
                raise BrokerConnectionError(f"{where}: {e}") from None
        lifetime_s = answer.session_lifetime.total_seconds()
        self._reauthenticate_at = (time.monotonic() + lifetime_s * REAUTHENTICATE_AT
                                   if lifetime_s > 0 else None)

    async def _round_trip(self, body: Any) -> Any:
        protocol = self._protocol
        assert protocol is not None and protocol.transport is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        sent = self._correlation_id
        try:
            protocol.transport.write(encode_request(body, sent, self._client_id))
        except RuntimeError as e:  # uvloop: the transport closed under us
            raise BrokerConnectionError(f"{self.host}:{self.port}: {e}") from None
        await protocol.drained()
        try:
            frame = await protocol.next_frame()
        except BrokerConnectionError as e:
            raise BrokerConnectionError(f"{self.host}:{self.port}: {e}") from None
        try:
            # kio's native reader takes read-only buffers only.
            correlation_id, response = decode_response(
                memoryview(frame).toreadonly(), body.__api_key__, body.__version__)
        except Exception as e:  # kio raises several types for a frame it cannot read
            raise BrokerConnectionError(
                f"{self.host}:{self.port}: unreadable response: {type(e).__name__}: {e}"
            ) from None
        if correlation_id != sent:
            raise BrokerConnectionError(
                f"{self.host}:{self.port}: correlation id {correlation_id} answers no "
                f"request (expected {sent})")
        return response

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
