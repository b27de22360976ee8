"""ResponseSender over real sockets and both event loops the broker runs on: bytes and
file slices arrive in order and whole while the reader drains slowly (sendfile, then a
piece through the transport when the socket is full, then sendfile again), TLS-style
sends read pieces, and a file truncated under a slice is reported, not padded."""

from __future__ import annotations

import asyncio
import os
import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.log.file_records import FileRecords, LogFile
from kernel.network.response_sender import (
    PLAINTEXT_WRITE_HIGH_WATER,
    ResponseSender,
    TruncatedDuringSend,
)

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
try:
    import uvloop

    LOOPS["uvloop"] = uvloop.new_event_loop
except ImportError:  # pragma: no cover - installed by the project's extras
    pass


class _Paused(asyncio.Protocol):
    def __init__(self) -> None:
        self.paused = False
        self.resumed = asyncio.Event()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.resumed.set()


def _file(tmp_path: Path, size: int) -> tuple[LogFile, bytes]:
    data = random.Random(size).randbytes(size)
    path = tmp_path / f"{size}.log"
    path.write_bytes(data)
    return LogFile(os.open(path, os.O_RDWR)), data


async def _send(chunks: list[Any], *, sendfile: bool, truncate: Callable[[], None] | None = None
                ) -> tuple[bytes, BaseException | None]:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.setblocking(False)
    protocol = _Paused()
    transport, _ = await loop.connect_accepted_socket(lambda: protocol, ours)
    transport.set_write_buffer_limits(high=PLAINTEXT_WRITE_HIGH_WATER)  # type: ignore[attr-defined]
    sender = ResponseSender(transport, chunks, ours.fileno() if sendfile else -1,
                            lambda: protocol.paused)
    received = bytearray()
    theirs.setblocking(False)
    error: BaseException | None = None
    try:
        while True:
            protocol.resumed.clear()
            try:
                if sender.pump():
                    break
            except (TruncatedDuringSend, OSError) as e:
                error = e
                break
            if truncate is not None:
                truncate()
                truncate = None
            while protocol.paused:  # a slow reader: 4 KB at a time
                await asyncio.sleep(0)
                try:
                    received += theirs.recv(4096)
                except BlockingIOError:
                    await asyncio.sleep(0.001)
        while transport.get_write_buffer_size():
            await asyncio.sleep(0.001)
        transport.close()
        await asyncio.sleep(0)
        theirs.setblocking(True)
        while chunk := theirs.recv(65536):
            received += chunk
    finally:
        sender.release()
        theirs.close()
    return bytes(received), error


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "pieces"])
def test_bytes_and_slices_arrive_in_order(tmp_path: Path, loop_name: str, sendfile: bool) -> None:
    first, first_data = _file(tmp_path, 300_000)
    second, second_data = _file(tmp_path, 70_001)
    chunks: list[Any] = [b"head" * 10, FileRecords(first, 1_000, 250_000, 0, 0), b"middle",
                         FileRecords(second, 0, 70_001, 0, 0), bytearray(b"tail")]
    expected = (b"head" * 10 + first_data[1_000:251_000] + b"middle" + second_data
                + b"tail")
    first.release()
    second.release()
    loop = LOOPS[loop_name]()
    try:
        got, error = loop.run_until_complete(_send(chunks, sendfile=sendfile))
    finally:
        loop.close()
    assert error is None
    assert got == expected


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_file_truncated_under_its_slice_is_an_error(tmp_path: Path, loop_name: str) -> None:
    file, _ = _file(tmp_path, 400_000)
    path = tmp_path / "400000.log"
    chunks: list[Any] = [b"head", FileRecords(file, 0, 400_000, 0, 0)]
    file.release()
    loop = LOOPS[loop_name]()
    try:
        got, error = loop.run_until_complete(
            _send(chunks, sendfile=True, truncate=lambda: os.truncate(path, 100_000)))
    finally:
        loop.close()
    assert isinstance(error, TruncatedDuringSend), error
    assert "truncated" in str(error)
    assert len(got) <= 4 + 100_000 + 16 * 1024  # never more than the file held
