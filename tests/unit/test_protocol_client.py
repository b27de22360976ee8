"""The outgoing broker connection (kernel/protocol/client.py) against a peer that
answers badly: every failure is one BrokerConnectionError naming the peer, the
connection is dropped, and the next request reconnects. The peer is a real socket
server speaking raw bytes."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest
import uvloop
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode

from kernel.protocol.client import BrokerConnection, BrokerConnectionError
from kernel.protocol.codec import default_entity, encode_response

REQUEST = ApiVersionsRequest(client_software_name="t", client_software_version="1")
Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


async def _with_peer(answer: Answer, requests: int = 1, timeout_s: float = 2.0,
                     ) -> list[object]:
    """Serve ``answer`` to each request on a loopback port; the outcome of each
    request (a response body or the error raised)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                await answer(await reader.readexactly(size), writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connection = BrokerConnection("127.0.0.1", port, client_id="test", timeout_s=timeout_s,
                                  max_response_bytes=1024)
    outcomes: list[object] = []
    try:
        for _ in range(requests):
            try:
                outcomes.append(await connection.request(REQUEST))
            except BrokerConnectionError as e:
                outcomes.append(e)
    finally:
        connection.close()
        server.close()
        await server.wait_closed()
    return outcomes


def _correlation_id(frame: bytes) -> int:
    return int(struct.unpack_from(">i", frame, 4)[0])


def _good(frame: bytes, correlation_id: int | None = None) -> bytes:
    body = default_entity(ApiVersionsResponse, error_code=ErrorCode.none)
    answered = _correlation_id(frame) if correlation_id is None else correlation_id
    return encode_response(18, 3, answered, body)


async def _answers_well(frame: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(_good(frame))


@pytest.mark.parametrize(("what", "answer", "message"), [
    ("an oversized frame", lambda frame: struct.pack(">i", 1 << 30), "out of bounds"),
    ("a frame too short for a header", lambda frame: struct.pack(">i", 2) + b"xx",
     "out of bounds"),
    ("garbage", lambda frame: struct.pack(">i", 8) + frame[4:8] + b"\xff\xff\xff\xff",
     "unreadable response"),
    ("another request's answer", lambda frame: _good(frame, 999), "correlation id 999"),
])
def test_a_bad_answer_is_one_error_and_the_next_request_reconnects(
        what: str, answer: Callable[[bytes], bytes], message: str) -> None:
    calls = 0

    async def first_bad(frame: bytes, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        calls += 1
        writer.write(answer(frame) if calls == 1 else _good(frame))

    bad, good = asyncio.run(_with_peer(first_bad, requests=2))
    assert isinstance(bad, BrokerConnectionError), what
    assert message in str(bad) and "127.0.0.1:" in str(bad)
    assert isinstance(good, ApiVersionsResponse)


def test_a_peer_that_closes_or_never_answers() -> None:
    async def closes(frame: bytes, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def silent(frame: bytes, writer: asyncio.StreamWriter) -> None:
        return None

    (closed,) = asyncio.run(_with_peer(closes))
    assert isinstance(closed, BrokerConnectionError)
    assert "IncompleteReadError" in str(closed)
    (late,) = asyncio.run(_with_peer(silent, timeout_s=0.3))
    assert isinstance(late, BrokerConnectionError) and "timed out" in str(late)


# The broker runs on uvloop, whose transports differ from asyncio's (they are not
# asyncio.Transport subclasses, and fill a buffered protocol their own way).
LOOPS = {"asyncio": asyncio.run, "uvloop": uvloop.run}


@pytest.mark.parametrize("loop", LOOPS)
def test_a_good_answer(loop: str) -> None:
    (response,) = LOOPS[loop](_with_peer(_answers_well))
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == ErrorCode.none


def test_nothing_listening() -> None:
    async def refused() -> BrokerConnectionError:
        connection = BrokerConnection("127.0.0.1", 1, client_id="t", timeout_s=2.0)
        with pytest.raises(BrokerConnectionError) as e:
            await connection.request(REQUEST)
        assert not connection.connected
        return e.value

    assert "ConnectionRefusedError" in str(asyncio.run(refused()))


@pytest.mark.parametrize("loop", LOOPS)
def test_an_answer_in_pieces(loop: str) -> None:
    """The size prefix and the frame may arrive split anywhere, over several reads."""

    async def in_pieces(frame: bytes, writer: asyncio.StreamWriter) -> None:
        answer = _good(frame)
        for cut in (1, 3, 6, len(answer)):  # inside the prefix, across it, the rest
            writer.write(answer[:cut])
            answer = answer[cut:]
            await writer.drain()
            await asyncio.sleep(0.01)

    responses = LOOPS[loop](_with_peer(in_pieces, requests=2))
    assert all(isinstance(r, ApiVersionsResponse) for r in responses)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_connection_the_peer_closed_between_requests_is_replaced(loop: str) -> None:
    """A leader that closed an idle follower connection: the next request opens a new
    one instead of writing to the closed transport (uvloop raises RuntimeError there)."""
    connections = 0

    async def run() -> list[object]:
        nonlocal connections

        async def answer_once(reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            writer.write(_good(await reader.readexactly(size)))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer_once, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = BrokerConnection("127.0.0.1", port, client_id="t", timeout_s=2.0)
        try:
            first = await connection.request(REQUEST)
            await asyncio.sleep(0.2)  # the close reaches the client
            return [first, await connection.request(REQUEST)]
        finally:
            connection.close()
            server.close()
            await server.wait_closed()

    outcomes = LOOPS[loop](run())
    assert all(isinstance(o, ApiVersionsResponse) for o in outcomes), outcomes
    assert connections == 2
