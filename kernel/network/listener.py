"""Listeners: ``NAME://host:port`` endpoints bound before metadata registration (so a
port of 0 resolves to the real port first) and serving only once the broker is ready.
Each listening socket has its own accept loop (Kafka's Acceptor), which is what lets
max.connections hold new clients in the backlog instead of accepting them."""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel.config import ConfigError
from kernel.logging import Notices
from kernel.network.connection import KafkaConnection, ReceiveBuffer
from kernel.network.memory_pool import MemoryPool
from kernel.network.quotas import ConnectionQuotas, normalize_address

if TYPE_CHECKING:
    from kernel.network.dispatch import RequestDispatcher
    from kernel.requests import Session

# Without TLS: SSL and SASL_SSL come with the TLS transport.
SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT")
LISTEN_BACKLOG = 1024


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


ACCEPT_ERROR_BACKOFF_S = 0.1


class Listener:
    def __init__(
        self, endpoint: Endpoint, dispatcher: RequestDispatcher, *, max_request_size: int,
        idle_timeout_ms: int, quotas: ConnectionQuotas, pool: MemoryPool,
        on_count: Callable[[int], None] | None = None,
        on_rejected: Callable[[str], None] | None = None,
        on_session_opened: Callable[[Session], None] | None = None,
        on_session_closed: Callable[[Session], None] | None = None,
    ) -> None:
        if endpoint.security_protocol not in SUPPORTED_PROTOCOLS:
            raise ConfigError(
                f"listeners: {endpoint.listener_name} uses {endpoint.security_protocol}, "
                f"which needs TLS, not available yet; supported: "
                f"{', '.join(SUPPORTED_PROTOCOLS)}"
            )
        self.endpoint = endpoint
        self._dispatcher = dispatcher
        self._log = dispatcher.log.bind(listener=endpoint.listener_name)
        self._max_request_size = max_request_size
        self._idle_timeout_s = idle_timeout_ms / 1000
        self._quotas = quotas
        self._pool = pool
        self._receive = ReceiveBuffer()
        # A TLS client on a plaintext port retries: one warning per address per period.
        self._tls_notices = Notices()
        self._sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self.connections: set[KafkaConnection] = set()
        self.port = endpoint.port
        self._on_count = on_count or (lambda n: None)
        self._on_rejected = on_rejected or (lambda reason: None)
        self._on_session_opened = on_session_opened
        self._on_session_closed = on_session_closed

    def _opened(self, conn: KafkaConnection) -> None:
        self.connections.add(conn)
        self._on_count(len(self.connections))
        session = conn.session
        if self._on_session_opened is not None and session is not None:
            try:
                self._on_session_opened(session)
            except Exception as e:  # a plugin's hook: its connection cannot be served
                self._log.error("a plugin failed on a new connection; closing it",
                                error=repr(e), peer=session.peer)
                conn.close()

    def _closed(self, conn: KafkaConnection) -> None:
        self.connections.discard(conn)
        self._on_count(len(self.connections))
        self._quotas.closed(conn.client_address)
        self._quotas.release_slot()
        session = conn.session
        if self._on_session_closed is not None and session is not None:
            try:
                self._on_session_closed(session)
            except Exception as e:
                self._log.error("a plugin failed on a closed connection",
                                error=repr(e), peer=session.peer)

    def _tls_client(self, conn: KafkaConnection) -> None:
        self._on_rejected("tls_on_plaintext")
        if self._tls_notices.due(conn.client_address):
            self._log.warning(
                "closing a TLS connection to a PLAINTEXT listener: the client sent a TLS "
                "handshake (is it configured with security.protocol SSL?); logged once per "
                f"address every {self._tls_notices.period_s:.0f} s",
                client=conn.client_address,
            )

    def _protocol(self, client_address: str) -> KafkaConnection:
        return KafkaConnection(
            self._dispatcher,
            listener_name=self.endpoint.listener_name,
            security_protocol=self.endpoint.security_protocol,
            max_request_size=self._max_request_size,
            idle_timeout_s=self._idle_timeout_s,
            client_address=client_address,
            receive=self._receive,
            pool=self._pool,
            on_open=self._opened,
            on_close=self._closed,
            on_tls=self._tls_client,
        )

    async def bind(self) -> int:
        host = self.endpoint.host or None
        try:
            infos = socket.getaddrinfo(host, self.endpoint.port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
            for family, kind, proto, _, address in dict.fromkeys(infos):
                try:
                    sock = socket.socket(family, kind, proto)
                except OSError:
                    continue  # a family this host lacks (IPv6), as asyncio skips it
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
        except OSError as e:
            self._close_sockets()
            raise ConfigError(
                f"listeners: cannot listen on {self.endpoint.host}:{self.endpoint.port} "
                f"({self.endpoint.listener_name}): {e.strerror}"
            ) from None
        if not self._sockets:
            raise ConfigError(f"listeners: no address to listen on for {self.endpoint.host} "
                              f"({self.endpoint.listener_name})")
        self.port = self._sockets[0].getsockname()[1]
        return self.port

    async def start_serving(self) -> None:
        loop = asyncio.get_running_loop()
        self._acceptors = [loop.create_task(self._accept(sock)) for sock in self._sockets]

    async def _accept(self, listening: socket.socket) -> None:
        """Kafka's Acceptor: wait for a slot under max.connections, accept, then close
        at once a connection over its address's max.connections.per.ip."""
        loop = asyncio.get_running_loop()
        while True:
            await self._quotas.acquire_slot()
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as e:
                # Out of file descriptors, typically: the client stays in the backlog.
                self._quotas.release_slot()
                self._log.warning("cannot accept a connection", error=e.strerror)
                await asyncio.sleep(ACCEPT_ERROR_BACKOFF_S)
                continue
            except BaseException:
                self._quotas.release_slot()
                raise
            address = normalize_address(str(peer[0]))
            if not self._quotas.admit(address):
                self._quotas.release_slot()
                self._on_rejected("max_connections_per_ip")
                self._log.info(
                    "rejected a connection: the address already has its maximum of "
                    f"{self._quotas.limit_for(address)} connections "
                    "(max.connections.per.ip)", client=address,
                )
                sock.close()
                continue
            try:
                await loop.connect_accepted_socket(
                    functools.partial(self._protocol, address), sock)
            except OSError:
                # The client went away before its transport was made.
                self._quotas.closed(address)
                self._quotas.release_slot()
                sock.close()

    async def stop_accepting(self) -> None:
        for task in self._acceptors:
            task.cancel()
        await asyncio.gather(*self._acceptors, return_exceptions=True)
        self._acceptors = []
        self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []

    async def close_connections(self, grace_s: float) -> None:
        """Let in-flight requests finish for up to ``grace_s``, then close everything."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while any(c.busy for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.close()
        # Let the transports report their connections lost.
        while self.connections and loop.time() < deadline + grace_s:
            await asyncio.sleep(0.01)
