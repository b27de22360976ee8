"""Listeners: ``NAME://host:port`` endpoints bound before metadata registration (so a
port of 0 resolves to the real port first) and serving only once the broker is ready."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel.config import ConfigError
from kernel.network.connection import KafkaConnection

if TYPE_CHECKING:
    from kernel.network.dispatch import RequestDispatcher

SUPPORTED_PROTOCOLS = ("PLAINTEXT",)


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener_name: str
    host: str
    port: int
    security_protocol: str


def parse_endpoints(values: list[str], protocol_map: list[str], key: str) -> list[Endpoint]:
    protocols: dict[str, str] = {}
    for item in protocol_map:
        name, sep, proto = item.partition(":")
        if not sep:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
        protocols[name.strip().upper()] = proto.strip().upper()
    endpoints = []
    for value in values:
        name, sep, rest = value.partition("://")
        host, colon, port_s = rest.rpartition(":")
        if not sep or not colon or not port_s.isdigit():
            raise ConfigError(f"{key}: {value!r} is not NAME://host:port")
        name = name.upper()
        proto = protocols.get(name)
        if proto is None:
            raise ConfigError(
                f"{key}: listener {name} has no entry in listener.security.protocol.map"
            )
        endpoints.append(Endpoint(name, host.strip("[]"), int(port_s), proto))
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"{key}: listener names must be unique: {names}")
    return endpoints


class Listener:
    def __init__(
        self, endpoint: Endpoint, dispatcher: RequestDispatcher, *, max_request_size: int,
        idle_timeout_ms: int, on_count: Callable[[int], None] | None = None,
    ) -> None:
        if endpoint.security_protocol not in SUPPORTED_PROTOCOLS:
            raise ConfigError(
                f"listeners: {endpoint.listener_name} uses {endpoint.security_protocol}, "
                f"which needs a plugin that is not available yet; supported: "
                f"{', '.join(SUPPORTED_PROTOCOLS)}"
            )
        self.endpoint = endpoint
        self._dispatcher = dispatcher
        self._max_request_size = max_request_size
        self._idle_timeout_s = idle_timeout_ms / 1000
        self._server: asyncio.Server | None = None
        self.connections: set[KafkaConnection] = set()
        self.port = endpoint.port
        self._on_count = on_count or (lambda n: None)

    def _opened(self, conn: KafkaConnection) -> None:
        self.connections.add(conn)
        self._on_count(len(self.connections))

    def _closed(self, conn: KafkaConnection) -> None:
        self.connections.discard(conn)
        self._on_count(len(self.connections))

    def _protocol(self) -> KafkaConnection:
        return KafkaConnection(
            self._dispatcher,
            listener_name=self.endpoint.listener_name,
            security_protocol=self.endpoint.security_protocol,
            max_request_size=self._max_request_size,
            idle_timeout_s=self._idle_timeout_s,
            on_open=self._opened,
            on_close=self._closed,
        )

    async def bind(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                self._protocol, self.endpoint.host or None, self.endpoint.port,
                reuse_address=True, start_serving=False, backlog=1024,
            )
        except OSError as e:
            raise ConfigError(
                f"listeners: cannot listen on {self.endpoint.host}:{self.endpoint.port} "
                f"({self.endpoint.listener_name}): {e.strerror}"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def start_serving(self) -> None:
        assert self._server is not None
        await self._server.start_serving()

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close_connections(self, grace_s: float) -> None:
        """Let in-flight requests finish for up to ``grace_s``, then close everything."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while any(c.busy for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
