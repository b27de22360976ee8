"""One client connection: size-prefixed framing, limits, in-order responses.

Frames are read straight into a reusable receive buffer (asyncio.BufferedProtocol);
a frame larger than that buffer gets a buffer of its own that the socket fills
directly, so a 1 MB produce request is copied once. Once such a frame is decoded (kio
copies what it keeps), its buffer is kept for the connection's next large frame.
Requests are handled one at a time in arrival order, as Kafka does by muting a channel
while a request is in flight: pipelined requests wait in a queue, so responses leave in
request order and produce requests on one connection are appended in order with no
extra machinery.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kernel.protocol.codec import InvalidRequest, ResponseFrame
from kernel.routing import Session

if TYPE_CHECKING:
    from kernel.network.dispatch import RequestDispatcher

_SIZE = struct.Struct(">i")
RECEIVE_BUFFER = 256 * 1024
# The read that follows a large frame: producers pipeline ~1 MB requests, so it usually
# holds the start of the next one, and that part is copied into the next frame buffer.
# A short read keeps the copy short; a full one would copy a quarter of every request.
AFTER_LARGE_FRAME_READ = 16 * 1024
# Stop reading from a client that has this much pipelined, unhandled input.
MAX_QUEUED_BYTES = 16 * 1024 * 1024
# The largest frame buffer a connection keeps for reuse (a producer's batches are ~1 MB).
MAX_SPARE_FRAME_BYTES = 8 * 1024 * 1024

# A frame, and the buffer under it when that buffer may be reused once it is decoded.
QueuedFrame = tuple[bytes | memoryview, bytearray | None]


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(
        self,
        dispatcher: RequestDispatcher,
        *,
        listener_name: str,
        security_protocol: str,
        max_request_size: int,
        idle_timeout_s: float,
        on_open: Callable[[KafkaConnection], None],
        on_close: Callable[[KafkaConnection], None],
    ) -> None:
        self._dispatcher = dispatcher
        self._listener_name = listener_name
        self._security_protocol = security_protocol
        self._max_request_size = max_request_size
        self._idle_timeout_s = idle_timeout_s
        self._on_open = on_open
        self._on_close = on_close
        self._buf = bytearray(RECEIVE_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._big: memoryview | None = None
        self._big_owner: bytearray | None = None
        self._big_filled = 0
        self._after_big = False
        self._spare: bytearray | None = None
        self._queue: deque[QueuedFrame] = deque()
        self._queued_bytes = 0
        self._in_flight: asyncio.Future[Any] | None = None
        self._write_paused = False
        self._read_paused = False
        self._closed = False
        self._last_active = time.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
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
        peer = transport.get_extra_info("peername")
        peer_s = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.session = Session(peer_s, self._listener_name, self._security_protocol)
        self.log = self.log.bind(peer=peer_s, listener=self._listener_name)
        self._arm_idle_timer()
        self._on_open(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._in_flight is not None and not self._in_flight.done():
            self._in_flight.cancel()
        self._queue.clear()
        self._on_close(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return self._big[self._big_filled:]
        if self._end == len(self._buf):
            self._compact()
        if self._after_big:
            return self._view[self._end:self._end + AFTER_LARGE_FRAME_READ]
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._last_active = time.monotonic()
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled == len(self._big):
                # kio's native reader takes read-only buffers only: a read-only view
                # avoids copying a large frame again.
                frame = self._big.toreadonly()
                self._big.release()
                self._big = None
                self._enqueue(frame, self._big_owner)
                self._big_owner = None
                self._after_big = True
                self._process()
            return
        self._after_big = False
        self._end += nbytes
        try:
            self._parse_frames()
        except InvalidRequest as e:
            self._fail(str(e))
            return
        self._process()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._process()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    # -- framing -----------------------------------------------------------

    def _compact(self) -> None:
        if self._start:
            n = self._end - self._start
            self._buf[:n] = self._buf[self._start:self._end]
            self._start, self._end = 0, n

    def _parse_frames(self) -> None:
        buf = self._buf
        while self._end - self._start >= 4:
            (size,) = _SIZE.unpack_from(buf, self._start)
            if size < 0 or size > self._max_request_size:
                raise InvalidRequest(
                    f"request size {size} is outside 0..{self._max_request_size} "
                    "(socket.request.max.bytes)"
                )
            available = self._end - self._start - 4
            if available >= size:
                begin = self._start + 4
                self._enqueue(bytes(self._view[begin:begin + size]), None)
                self._start = begin + size
                continue
            if size + 4 > len(buf):
                # Larger than the receive buffer: give it a buffer the socket fills.
                owner = self._frame_buffer(size)
                big = memoryview(owner)[:size]
                big[:available] = self._view[self._start + 4:self._end]
                self._big, self._big_owner, self._big_filled = big, owner, available
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _frame_buffer(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes: the spare one when it is large enough
        and nothing holds a view of it any more (references: the attribute, ``spare``
        and getrefcount's argument; the event loop keeps its last read buffer a while)."""
        spare = self._spare
        self._spare = None
        if spare is not None and len(spare) >= size and sys.getrefcount(spare) <= 2:
            return spare
        return bytearray(size)

    def _recycle(self, frame: memoryview, owner: bytearray) -> None:
        frame.release()
        if len(owner) <= MAX_SPARE_FRAME_BYTES and (
            self._spare is None or len(self._spare) < len(owner)
        ):
            self._spare = owner

    def _enqueue(self, frame: bytes | memoryview, owner: bytearray | None) -> None:
        self._queue.append((frame, owner))
        self._queued_bytes += len(frame)
        if self._queued_bytes > MAX_QUEUED_BYTES and not self._read_paused and self.transport:
            self._read_paused = True
            self.transport.pause_reading()

    # -- request processing --------------------------------------------------

    def _process(self) -> None:
        session = self.session
        assert session is not None
        while self._queue and self._in_flight is None and not self._write_paused:
            if self._closed:
                return
            frame, owner = self._queue.popleft()
            self._queued_bytes -= len(frame)
            try:
                result = self._dispatcher.dispatch(frame, session)
            except InvalidRequest as e:
                self._fail(str(e))
                return
            finally:
                # The request is decoded by now (dispatch awaits nothing before that).
                if owner is not None:
                    assert isinstance(frame, memoryview)
                    self._recycle(frame, owner)
                del frame
            if isinstance(result, bytes | ResponseFrame):
                self._write(result)
            elif result is not None:
                self._await(result)
        if self._read_paused and self._queued_bytes < MAX_QUEUED_BYTES // 2 and self.transport:
            self._read_paused = False
            self.transport.resume_reading()

    def _await(self, pending: Awaitable[bytes | None]) -> None:
        fut = asyncio.ensure_future(pending)
        self._in_flight = fut
        fut.add_done_callback(self._on_response_ready)

    def _on_response_ready(self, fut: asyncio.Future[Any]) -> None:
        self._in_flight = None
        if fut.cancelled() or self._closed:
            return
        exc = fut.exception()
        if exc is not None:
            self._fail(str(exc) if isinstance(exc, InvalidRequest) else f"request failed: {exc!r}")
            return
        result = fut.result()
        if result is not None:
            self._write(result)
        self._process()

    def _write(self, data: bytes | ResponseFrame) -> None:
        if self.transport is not None and not self._closed:
            if isinstance(data, bytes):
                self.transport.write(data)
            elif len(data.chunks) == 1:
                self.transport.write(data.chunks[0])
            else:
                # The records of a fetch go to the socket from the bytes read from the
                # segment, without being copied into one frame first.
                self.transport.writelines(data.chunks)
            self._last_active = time.monotonic()

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
