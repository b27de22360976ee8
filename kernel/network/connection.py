"""One client connection: size-prefixed framing, limits, in-order responses.

Memory follows the bytes that arrive, not the sizes that are claimed. Reads land in the
listener's receive buffer, shared by its connections (a read is handed over and
consumed in one callback), so an idle connection holds no buffer. A frame that is not
whole after a read gets a buffer of its own, of the size its prefix gives, that the
socket then fills directly: a 1 MB produce request is copied once. That buffer is
allocated without being zeroed, so only the pages bytes are written to become resident:
a prefix claiming 100 MB costs what its sender actually sends. Bytes that arrived and
are not handled yet count against the broker's MemoryPool (queued.max.request.bytes).
Requests are handled one at a time in arrival order, as Kafka does by muting a channel
while a request is in flight: pipelined requests wait in a queue, so responses leave in
request order and produce requests on one connection are appended in order with no
extra machinery.

A response that the socket does not take at once pauses the connection (its
transport's ``pause_writing``): no request is handled and nothing is read until the
client has read it, as Kafka mutes a channel until its response is sent. A fetch
answer's records are sent from the segment files as the socket drains
(kernel/network/response_sender.py), so a client that stops reading costs the broker
the answer's headers, not its records.

Until a SASL listener's connection has authenticated (PreAuth), Kafka's
sasl.server.max.receive.size bounds its frames: a larger size prefix closes it before
any byte of the frame is read. Its bytes count against the separate pre-authentication
pool, and it must authenticate within connections.max.idle.ms of opening.
"""

from __future__ import annotations

import asyncio
import ctypes
import socket
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel.logging import Notices
from kernel.network.memory_pool import MemoryPool, PreAuthPool
from kernel.network.response_sender import (
    PLAINTEXT_WRITE_HIGH_WATER,
    TLS_WRITE_HIGH_WATER,
    ResponseSender,
    TruncatedDuringSend,
)
from kernel.protocol.codec import InvalidRequest, ResponseFrame
from kernel.requests import ANONYMOUS, AUTHENTICATED_AT_OPEN, Session

if TYPE_CHECKING:
    from kernel.network.dispatch import RequestDispatcher

_SIZE = struct.Struct(">i")
_ANSWERED = (bytes, ResponseFrame)  # a tuple: isinstance with a union is slower
RECEIVE_BUFFER = 256 * 1024
# The read that follows a large frame: producers pipeline ~1 MB requests, so it usually
# holds the start of the next one, and that part is copied into the next frame buffer.
# A short read keeps the copy short; a full one would copy a quarter of every request.
AFTER_LARGE_FRAME_READ = 16 * 1024
# Stop reading from a client that has this much pipelined, unhandled input.
MAX_QUEUED_BYTES = 16 * 1024 * 1024

# bytearray(n) zeroes its n bytes, which makes every page resident; this does not.
_new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_new_bytearray.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
_new_bytearray.restype = ctypes.py_object


def frame_buffer(size: int) -> bytearray:
    """An uninitialised buffer of ``size`` bytes; only what is written to it becomes
    resident. Nothing reads a byte of it that the socket has not filled."""
    return _new_bytearray(None, size)  # type: ignore[no-any-return]


def is_tls_record(head: bytes | bytearray | memoryview) -> bool:
    """A TLS handshake record (a ClientHello on a plaintext port) starts 0x16 0x03
    0x00-0x04; read as a Kafka size prefix it claims about 369 MB."""
    return len(head) >= 3 and head[0] == 0x16 and head[1] == 0x03 and head[2] <= 0x04


def _raw_sasl_answer(answer: bytes | Awaitable[bytes]) -> bytes | Awaitable[bytes]:
    """A raw SASL token (after SaslHandshake v0) goes back size-prefixed, as it came."""
    if isinstance(answer, bytes):
        return _SIZE.pack(len(answer)) + answer

    async def prefixed() -> bytes:
        token = await answer
        return _SIZE.pack(len(token)) + token

    return prefixed()


class ReceiveBuffer:
    """The buffer a listener's connections read into, one read at a time."""

    def __init__(self, size: int = RECEIVE_BUFFER) -> None:
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)


@dataclass(frozen=True, slots=True)
class PreAuth:
    """A SASL listener's limits on connections that have not authenticated."""

    max_receive_size: int  # sasl.server.max.receive.size; -1: unbounded
    pool: PreAuthPool
    deadline_s: float  # connections.max.idle.ms: to authenticate from opening
    notices: Notices  # a client can cause each refusal at will: once per address
    on_rejected: Callable[[str], None]

    def too_large(self, size: int) -> bool:
        # Kafka's NetworkReceive: -1 (UNLIMITED) is the only unbounded value.
        return self.max_receive_size != -1 and size > self.max_receive_size


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(
        self,
        dispatcher: RequestDispatcher,
        *,
        listener_name: str,
        security_protocol: str,
        max_request_size: int,
        idle_timeout_s: float,
        client_address: str,
        receive: ReceiveBuffer,
        pool: MemoryPool,
        on_open: Callable[[KafkaConnection], None],
        on_close: Callable[[KafkaConnection], None],
        on_tls: Callable[[KafkaConnection], None],
        principal_of: Callable[[Any], str] | None = None,
        preauth: PreAuth | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._listener_name = listener_name
        self._security_protocol = security_protocol
        self._max_request_size = max_request_size
        self._idle_timeout_s = idle_timeout_s
        self._receive = receive
        self._pool: MemoryPool | PreAuthPool = pool
        self._authenticated_pool = pool
        # Set while a SASL connection has not authenticated; None from then on.
        self._preauth = preauth
        self._auth_timer: asyncio.TimerHandle | None = None
        self._on_open = on_open
        self._on_close = on_close
        self._on_tls = on_tls
        # SSL listeners: names the client by its certificate (kernel.network.tls).
        self._principal_of = principal_of
        # Bytes of a size prefix not yet whole (fewer than 4), kept between reads.
        self._head = b""
        # The frame being filled (a view of its own buffer) and how much of it arrived.
        self._frame: memoryview | None = None
        self._filled = 0
        self._after_large = False
        self._seen_frames = 0
        self._queue: deque[bytes | memoryview] = deque()
        self._queued_bytes = 0
        self._in_flight: asyncio.Future[Any] | None = None
        self._write_paused = False
        # A response whose records are being sent from segment files as the socket drains.
        self._sending: ResponseSender | None = None
        self._socket_fd = -1  # for sendfile; -1 on TLS
        self._queue_paused = False
        self._pool_muted = False
        self._read_paused = False
        self._draining = False  # shutting down: no new request is read
        # A client quota's throttle (KIP-219): nothing read or handled until it fires.
        self._throttle_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._last_active = time.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        # The address the listener counted this connection under (per-IP limits).
        self.client_address = client_address
        self.log: Any = dispatcher.log

    # -- asyncio callbacks -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; same interface.
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Responses are written whole; waiting for delayed ACKs (Nagle) would add
            # tens of milliseconds to every small response.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if transport.get_extra_info("ssl_object") is None:
            self._socket_fd = -1 if sock is None else sock.fileno()
            transport.set_write_buffer_limits(high=PLAINTEXT_WRITE_HIGH_WATER)  # type: ignore[attr-defined]
        else:
            transport.set_write_buffer_limits(high=TLS_WRITE_HIGH_WATER)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        peer_s = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        session = self.session = Session(peer_s, self._listener_name, self._security_protocol)
        self.log = self.log.bind(peer=peer_s, listener=self._listener_name)
        if self._security_protocol in AUTHENTICATED_AT_OPEN:
            principal = ANONYMOUS
            if self._principal_of is not None and self._security_protocol == "SSL":
                try:
                    principal = self._principal_of(transport.get_extra_info("ssl_object"))
                except Exception as e:  # no mapping rule names it: Kafka fails the login
                    self.log.warning("closing a TLS connection: its certificate names no "
                                     "principal", reason=str(e))
                    self.session = None
                    self._closed = True
                    transport.close()
                    return
            session.authenticate(principal)
        if self._preauth is not None:
            if session.authenticated:
                self._preauth = None
            else:
                self._pool = self._preauth.pool
                self._preauth.pool.join(self)
                self._auth_timer = asyncio.get_running_loop().call_later(
                    self._preauth.deadline_s, self._check_authenticated)
        self._arm_idle_timer()
        self._on_open(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._auth_timer is not None:
            self._auth_timer.cancel()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        if self._in_flight is not None and not self._in_flight.done():
            self._in_flight.cancel()
        if self._sending is not None:
            self._sending.release()
            self._sending = None
        self._drop_buffered()
        self._on_close(self)

    def _drop_buffered(self) -> None:
        """Give back every request byte this connection holds: it is closing."""
        self._queue.clear()
        self._pool.forget(self)
        self._pool.release(self._queued_bytes + self._filled)
        self._queued_bytes = self._filled = 0
        self._frame = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return self._frame[self._filled:]
        view = self._receive.view
        n = len(self._head)
        if n:
            view[:n] = self._head
        if self._after_large:
            return view[n:n + AFTER_LARGE_FRAME_READ]
        return view[n:] if n else view

    def buffer_updated(self, nbytes: int) -> None:
        self._last_active = time.monotonic()
        if self._preauth is not None and self.session is not None and self.session.authenticated:
            self._left_preauth()
        if self._frame is not None:
            self._filled += nbytes
            self._pool.allocate(nbytes)
            if self._filled == len(self._frame):
                # kio's native reader takes read-only buffers only: a read-only view
                # avoids copying a large frame again.
                frame = self._frame.toreadonly()
                self._frame.release()
                self._after_large = len(frame) >= RECEIVE_BUFFER
                self._frame = None
                self._filled = 0
                self._enqueue(frame)
        else:
            self._after_large = False
            end = len(self._head) + nbytes
            self._head = b""
            try:
                self._parse_frames(end)
            except InvalidRequest as e:
                self._fail(str(e))
                return
        self._process()
        if not self._closed:
            self._pool.after_read(self)

    def pause_writing(self) -> None:
        # The client is not reading its answers: stop reading its requests too.
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()
        if self._sending is not None:
            self._pump()
            if self._sending is not None:
                return
        self._process()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    # -- framing -----------------------------------------------------------

    def _parse_frames(self, end: int) -> None:
        """Take the frames out of the receive buffer's first ``end`` bytes; what is
        left of an incomplete frame moves to the connection, as the buffer is shared."""
        view = self._receive.view
        start = 0
        while end - start >= 4:
            if self._seen_frames == 0 and is_tls_record(view[start:start + 3]):
                self._on_tls(self)
                self.close()
                return
            (size,) = _SIZE.unpack_from(view, start)
            if self._preauth is not None and self._preauth.too_large(size):
                self._refuse_preauth(size)
                return
            if size < 0 or size > self._max_request_size:
                raise InvalidRequest(
                    f"request size {size} is outside 0..{self._max_request_size} "
                    "(socket.request.max.bytes)"
                )
            self._seen_frames += 1
            begin = start + 4
            available = end - begin
            if available >= size:
                self._pool.allocate(size)
                self._enqueue(bytes(view[begin:begin + size]))
                start = begin + size
                continue
            # The rest of this frame goes straight from the socket into its own buffer.
            try:
                frame = memoryview(frame_buffer(size))
            except MemoryError:
                raise InvalidRequest(f"cannot allocate {size} bytes for a request") from None
            frame[:available] = view[begin:end]
            self._frame, self._filled = frame, available
            self._pool.allocate(available)
            return
        if start < end:
            self._head = bytes(view[start:end])

    @property
    def partial_bytes(self) -> int:
        return self._filled

    @property
    def buffered_bytes(self) -> int:
        return self._queued_bytes + self._filled

    # -- before authentication (SASL listeners) ------------------------------

    def _left_preauth(self) -> None:
        """The session authenticated: its frames are bounded by socket.request.max.bytes
        and its bytes move to the broker's pool (queued.max.request.bytes)."""
        held = self.buffered_bytes
        self._pool.forget(self)
        self._pool.release(held)
        self._pool = self._authenticated_pool
        self._pool.allocate(held)
        self._preauth = None
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None

    def _refuse(self, what: str, reason: str, detail: str) -> None:
        """Closes a connection that has not authenticated, one warning per address and
        reason per period: the client can repeat it at will."""
        preauth = self._preauth
        assert preauth is not None
        preauth.on_rejected(reason)
        if preauth.notices.due(f"{self.client_address} {reason}"):
            self.log.warning(f"closing a connection before authentication: {what}; logged "
                             f"once per address every {preauth.notices.period_s:.0f} s",
                             client=self.client_address, reason=detail)
        self._drop_buffered()
        self.close()

    def _refuse_preauth(self, size: int) -> None:
        # Kafka: SaslServerAuthenticator's NetworkReceive throws InvalidReceiveException
        # on the size prefix, and the channel is closed without an answer.
        assert self._preauth is not None
        self._refuse(f"its frame of {size} bytes exceeds sasl.server.max.receive.size "
                     f"({self._preauth.max_receive_size})", "sasl_max_receive_size",
                     "invalid receive size")

    def evict_unauthenticated(self, share: int) -> None:
        """The pre-authentication pool is full and this connection holds most of it."""
        if self.session is not None and self.session.authenticated:
            self._left_preauth()  # authenticated since its last read: not a suspect
            return
        self._refuse(f"it holds {self.buffered_bytes} bytes, the most of any "
                     f"unauthenticated connection, and together they exceed their share "
                     f"of request memory ({share} bytes)", "preauth_memory",
                     "pre-authentication memory")

    def _check_authenticated(self) -> None:
        self._auth_timer = None
        session = self.session
        if self._closed or self._preauth is None or session is None or session.authenticated:
            return
        self._refuse(f"it did not authenticate within connections.max.idle.ms "
                     f"({self._preauth.deadline_s * 1000:.0f} ms) of opening",
                     "authentication_timeout", "authentication timeout")

    def _enqueue(self, frame: bytes | memoryview) -> None:
        self._queue.append(frame)
        self._queued_bytes += len(frame)
        self._pool.frame_done(self)
        if self._queued_bytes > MAX_QUEUED_BYTES and not self._queue_paused:
            self._queue_paused = True
            self._update_reading()

    def set_pool_muted(self, muted: bool) -> None:
        """The MemoryPool mutes reads while it is exhausted (Kafka's memory pressure)."""
        if muted != self._pool_muted:
            self._pool_muted = muted
            self._update_reading()

    def stop_reading(self) -> None:
        """At shutdown: the requests already read are answered, no new one is read (a
        follower's or consumer's next long-poll Fetch would keep the connection busy
        until the grace runs out)."""
        self._draining = True
        self._update_reading()

    def _update_reading(self) -> None:
        paused = (self._queue_paused or self._pool_muted or self._write_paused
                  or self._draining or self._throttle_timer is not None)
        if paused != self._read_paused and self.transport is not None and not self._closed:
            self._read_paused = paused
            if paused:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    # -- request processing --------------------------------------------------

    def _process(self) -> None:
        session = self.session
        assert session is not None
        while (self._queue and self._in_flight is None and not self._write_paused
               and self._sending is None and self._throttle_timer is None):
            if self._closed:
                return
            frame = self._queue.popleft()
            size = len(frame)
            self._queued_bytes -= size
            try:
                raw_sasl_token = session.raw_sasl_token
                if raw_sasl_token is None:
                    result = self._dispatcher.dispatch(frame, session)
                else:
                    result = _raw_sasl_answer(raw_sasl_token(bytes(frame)))
            except InvalidRequest as e:
                self._fail(str(e))
                return
            finally:
                # The request is decoded by now (dispatch awaits nothing before that;
                # a frame of 64 KiB+ is being decoded in a thread, which holds it until
                # then) and kio copied what it keeps: handled, not queued, the frame's
                # bytes go back to the pool.
                del frame
                self._pool.release(size)
            if isinstance(result, _ANSWERED):
                self._write(result)
                if session.close_after_response:
                    self.close()
                    return
            elif result is not None:
                self._await(result)
            if session.throttle_after_response_ms:
                self._mute_after_response(session)
        if self._queue_paused and self._queued_bytes < MAX_QUEUED_BYTES // 2:
            self._queue_paused = False
            self._update_reading()

    def _await(self, pending: Awaitable[bytes | None]) -> None:
        fut = asyncio.ensure_future(pending)
        self._in_flight = fut
        fut.add_done_callback(self._on_response_ready)

    def _on_response_ready(self, fut: asyncio.Future[Any]) -> None:
        self._in_flight = None
        if fut.cancelled():
            return
        exc = fut.exception()  # retrieved even when the connection is gone meanwhile
        if self._closed:
            return
        if exc is not None:
            self._fail(str(exc) if isinstance(exc, InvalidRequest) else f"request failed: {exc!r}")
            return
        result = fut.result()
        if result is not None:
            self._write(result)
        if self.session is not None and self.session.close_after_response:
            self.close()  # the transport sends what was written, then closes
            return
        if self.session is not None and self.session.throttle_after_response_ms:
            self._mute_after_response(self.session)
        self._process()

    def _mute_after_response(self, session: Session) -> None:
        """KIP-219: the answer just written goes out at once; then the connection reads
        and handles nothing for its throttle time (Kafka's throttled channel)."""
        delay_ms, session.throttle_after_response_ms = session.throttle_after_response_ms, 0
        if self._closed:
            return
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._throttle_timer = asyncio.get_running_loop().call_later(
            delay_ms / 1000, self._end_throttle)
        self._update_reading()

    def _end_throttle(self) -> None:
        self._throttle_timer = None
        if self._closed:
            return
        self._update_reading()
        self._process()

    def _write(self, data: bytes | ResponseFrame) -> None:
        # A transport the peer closed may not have told connection_lost yet: uvloop
        # refuses a write to it with RuntimeError, which would escape the callback.
        if self.transport is not None and not self._closed and not self.transport.is_closing():
            if isinstance(data, bytes):
                self.transport.write(data)
            elif len(data.chunks) == 1:
                self.transport.write(data.chunks[0])
            elif not data.files:
                # Records read from a segment go to the socket without being copied
                # into one frame first.
                self.transport.writelines(data.chunks)
            else:
                self._sending = ResponseSender(self.transport, data.chunks, self._socket_fd,
                                               self._is_write_paused)
                self._pump()
            self._last_active = time.monotonic()

    def _is_write_paused(self) -> bool:
        return self._write_paused

    def _pump(self) -> None:
        sender = self._sending
        assert sender is not None
        try:
            done = sender.pump()
        except TruncatedDuringSend as e:
            self._sending = None
            sender.release()
            self._fail(str(e))
            return
        except OSError:
            # The client went away mid-answer; the transport reports it too.
            self._sending = None
            sender.release()
            self.close()
            return
        self._last_active = time.monotonic()
        if done:
            self._sending = None

    def _fail(self, reason: str) -> None:
        self.log.warning("closing connection", reason=reason)
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self._closed:
            self._closed = True
            self.transport.close()

    # -- idle timeout ------------------------------------------------------

    def _arm_idle_timer(self, delay: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._idle_timer = loop.call_later(
            self._idle_timeout_s if delay is None else delay, self._check_idle
        )

    def _check_idle(self) -> None:
        if self._closed:
            return
        idle = time.monotonic() - self._last_active
        if idle >= self._idle_timeout_s and self._in_flight is None:
            self.log.info("closing idle connection", idle_s=round(idle, 1))
            self.close()
        else:
            self._arm_idle_timer(max(self._idle_timeout_s - idle, 0.05))

    @property
    def busy(self) -> bool:
        return self._in_flight is not None or bool(self._queue)
