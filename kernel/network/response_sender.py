"""Sending a response whose records stay in segment files, as the socket drains.

A fetch answer is the bytes the writers built plus ``FileRecords`` slices between them
(kernel/log/file_records.py). The sender hands the bytes to the transport and sends each
slice with ``os.sendfile`` straight from the page cache to the socket, as Kafka's
FileRecords.writeTo does: the broker never holds a copy of the records. It does so only
while the transport holds nothing, so the bytes leave in order.

When the socket is full, one piece of the slice is read and written through the
transport, which buffers it, waits for the socket and pauses the connection
(``pause_writing``); once the transport has drained, the connection calls ``pump``
again and sendfile goes on. TLS cannot use sendfile: there each slice is read and
written a piece at a time, and the transport's high-water mark bounds what waits.

So what a connection holds for an answer its client does not read is the answer's
headers and at most a piece and a transport's high-water mark of record bytes, never
its records: see ``PLAINTEXT_WRITE_HIGH_WATER`` and ``TLS_WRITE_HIGH_WATER``.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

# Plaintext: the connection is paused as soon as its transport holds a byte, and resumed
# once it holds none, so sendfile (which needs an empty transport) resumes at once.
PLAINTEXT_WRITE_HIGH_WATER = 0
# A piece of a slice written through the transport when the socket is full: small, as
# sendfile takes over again once it is sent.
PLAINTEXT_PIECE_BYTES = 16 * 1024
# TLS: slices are read and encrypted a piece at a time; the transport pauses the
# connection at this many buffered bytes and resumes it at a quarter of them.
TLS_WRITE_HIGH_WATER = 256 * 1024
TLS_PIECE_BYTES = 64 * 1024


class Slice(Protocol):
    """What the sender needs of a FileRecords slice."""

    position: int
    size: int

    @property
    def fd(self) -> int: ...

    def read(self, offset: int = 0, size: int | None = None) -> bytes: ...

    def release(self) -> None: ...


class TruncatedDuringSend(Exception):
    """The file under a slice was truncated before the slice was sent (Kafka closes the
    connection too: the size prefix already promised those bytes)."""


class ResponseSender:
    """One response on its way out: ``pump`` until it returns True."""

    __slots__ = ("_chunks", "_offset", "_paused", "_piece", "_socket_fd", "_transport")

    def __init__(self, transport: Any, chunks: Iterable[Any], socket_fd: int,
                 paused: Callable[[], bool]) -> None:
        """``socket_fd`` is -1 where sendfile cannot be used (TLS). ``paused`` tells
        whether the transport paused the connection."""
        self._transport = transport
        self._chunks: deque[Any] = deque(chunks)
        self._offset = 0  # sent of the first chunk
        self._socket_fd = socket_fd
        self._paused = paused
        self._piece = PLAINTEXT_PIECE_BYTES if socket_fd >= 0 else TLS_PIECE_BYTES

    def pump(self) -> bool:
        """Send what the socket takes now. True once everything was handed over;
        False when the transport paused the connection (``resume_writing`` calls this
        again). Raises OSError when the socket broke, TruncatedDuringSend."""
        transport = self._transport
        chunks = self._chunks
        while chunks:
            if self._paused():
                return False
            chunk = chunks[0]
            if isinstance(chunk, bytes | bytearray | memoryview):
                transport.write(chunk)  # bytes are handed over whole
                chunks.popleft()
                continue
            remaining = chunk.size - self._offset
            if self._socket_fd >= 0 and transport.get_write_buffer_size() == 0:
                try:
                    sent = os.sendfile(self._socket_fd, chunk.fd,
                                       chunk.position + self._offset, remaining)
                except BlockingIOError:
                    sent = -1  # the socket is full
                if sent == 0:
                    raise TruncatedDuringSend(self._truncated(chunk))
                if sent > 0:
                    self._offset += sent
                    if sent == remaining:
                        self._done_with(chunk)
                        continue
                    remaining -= sent
            # The socket is full (or this is TLS): a piece through the transport, which
            # waits for the socket and pauses the connection meanwhile.
            piece = chunk.read(self._offset, min(remaining, self._piece))
            if not piece:
                raise TruncatedDuringSend(self._truncated(chunk))
            transport.write(piece)
            self._offset += len(piece)
            if self._offset == chunk.size:
                self._done_with(chunk)
        return True

    def _done_with(self, chunk: Slice) -> None:
        self._chunks.popleft()
        self._offset = 0
        chunk.release()

    def _truncated(self, chunk: Slice) -> str:
        return (f"a fetched segment file ended {chunk.size - self._offset} bytes before "
                "the records being sent from it (truncated meanwhile)")

    def release(self) -> None:
        """The connection closed: let go of the slices not sent."""
        for chunk in self._chunks:
            if not isinstance(chunk, bytes | bytearray | memoryview):
                chunk.release()
        self._chunks.clear()
