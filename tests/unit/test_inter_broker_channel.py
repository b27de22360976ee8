"""The inter-broker channel (kernel/network/inter_broker.py) against real loopback
servers: requests to one broker run side by side on separate connections, which are
then reused; a broker that moved is reached at its new address; an unregistered broker,
a SASL listener, an SSL listener without a trust store and a closed channel are each one
BrokerConnectionError naming the problem."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode

from kernel.cluster import BrokerEndpoint
from kernel.network.inter_broker import InterBrokerChannel
from kernel.protocol.client import BrokerConnectionError
from kernel.protocol.codec import default_entity, encode_response

REQUEST = ApiVersionsRequest(client_software_name="t", client_software_version="1")


class Peer:
    """A loopback server answering ApiVersions after ``delay_s``; counts connections."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> Peer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                await asyncio.sleep(self.delay_s)
                (correlation_id,) = struct.unpack_from(">i", frame, 4)
                writer.write(encode_response(18, 3, correlation_id, default_entity(
                    ApiVersionsResponse, error_code=ErrorCode.none)))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def _channel(endpoints: dict[int, BrokerEndpoint]) -> InterBrokerChannel:
    return InterBrokerChannel(1, "INTERNAL", endpoints.get, timeout_s=2.0)


def _endpoint(port: int, protocol: str = "PLAINTEXT") -> BrokerEndpoint:
    return BrokerEndpoint("INTERNAL", "127.0.0.1", port, protocol)


def test_concurrent_requests_use_separate_connections_then_reuse_them() -> None:
    async def run() -> tuple[int, int]:
        peer = await Peer(delay_s=0.1).start()
        channel = _channel({2: _endpoint(peer.port)})
        try:
            answers = await asyncio.gather(*(channel.send(2, REQUEST) for _ in range(3)))
            assert all(a.error_code == ErrorCode.none for a in answers)
            opened = peer.connections
            for _ in range(3):
                await channel.send(2, REQUEST)
            return opened, peer.connections
        finally:
            channel.close()
            await peer.stop()

    opened, after = asyncio.run(run())
    assert opened == 3, "three requests at once: three connections"
    assert after == 3, "later requests reuse the idle connections"


def test_a_broker_that_moved_is_reached_at_its_new_address() -> None:
    async def run() -> tuple[int, int]:
        old, new = await Peer().start(), await Peer().start()
        endpoints = {2: _endpoint(old.port)}
        channel = _channel(endpoints)
        try:
            await channel.send(2, REQUEST)
            endpoints[2] = _endpoint(new.port)
            await channel.send(2, REQUEST)
            return old.connections, new.connections
        finally:
            channel.close()
            await old.stop()
            await new.stop()

    assert asyncio.run(run()) == (1, 1)


@pytest.mark.parametrize(("endpoint", "message"), [
    (None, "broker 2 has no INTERNAL endpoint registered"),
    (_endpoint(1, "SASL_SSL"), "INTERNAL is SASL_SSL"),
    (_endpoint(1, "SSL"), "no trust store"),
])
def test_an_unreachable_broker_is_one_error(endpoint: BrokerEndpoint | None,
                                            message: str) -> None:
    channel = _channel({} if endpoint is None else {2: endpoint})
    with pytest.raises(BrokerConnectionError, match=message):
        asyncio.run(channel.send(2, REQUEST))


def test_a_closed_channel_refuses_and_fails_requests_in_flight() -> None:
    async def run() -> tuple[object, object]:
        peer = await Peer(delay_s=5.0).start()
        channel = _channel({2: _endpoint(peer.port)})
        try:
            in_flight = asyncio.ensure_future(channel.send(2, REQUEST))
            await asyncio.sleep(0.2)
            channel.close()
            outcomes = await asyncio.gather(in_flight, channel.send(2, REQUEST),
                                            return_exceptions=True)
            return outcomes[0], outcomes[1]
        finally:
            await peer.stop()

    in_flight, later = asyncio.run(run())
    assert isinstance(in_flight, BrokerConnectionError)
    assert isinstance(later, BrokerConnectionError) and "closed" in str(later)
