"""Listeners: ``NAME://host:port`` endpoints bound before metadata registration (so a
port of 0 resolves to the real port first) and serving only once the broker is ready.
Each listening socket has its own accept loop (Kafka's Acceptor), which is what lets
max.connections hold new clients in the backlog instead of accepting them."""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel.config import BrokerConfig, ConfigError, controller_listeners
from kernel.logging import Notices
from kernel.network.connection import KafkaConnection, PreAuth, ReceiveBuffer
from kernel.network.memory_pool import MemoryPool, PreAuthPool
from kernel.network.quotas import ConnectionQuotas, normalize_address
from kernel.network.tls import TLS_PROTOCOLS, ServerTls

if TYPE_CHECKING:
    from kernel.network.dispatch import RequestDispatcher
    from kernel.requests import Session

SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
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


def check_listener_names(cfg: BrokerConfig, endpoints: list[Endpoint],
                         advertised: list[Endpoint] | None) -> None:
    """Kafka's checks of listener names: advertised.listeners names a subset of
    listeners, at routable addresses; inter.broker.listener.name is one of the
    advertised broker listeners (not a controller listener); each listener.name.<name>.
    prefix names a listener."""
    names = {e.listener_name for e in endpoints}
    if advertised:
        extra = sorted({e.listener_name for e in advertised} - names)
        if extra:
            raise ConfigError(
                f"advertised.listeners: listener names must be equal to or a subset of the "
                f"ones defined in listeners; {', '.join(extra)} is not one of "
                f"{', '.join(sorted(names))}")
        if any(e.host == "0.0.0.0" for e in advertised):
            raise ConfigError("advertised.listeners: cannot use the nonroutable "
                              "meta-address 0.0.0.0; use a routable IP address")
    # Unset, it is the listener named for security.inter.broker.protocol (PLAINTEXT by
    # default), and Kafka refuses to start when no listener has that name either. A
    # controller-only node has no broker listener and skips it, as Kafka's.
    inter = cfg.inter_broker_listener_name
    if cfg.process_roles and "broker" not in cfg.process_roles:
        _check_listener_overrides(cfg, names)
        return
    defaulted = inter is None
    if inter is None:
        inter = cfg.security_inter_broker_protocol
    offered = ({e.listener_name for e in advertised} if advertised else names) \
        - controller_listeners(cfg)
    if inter.upper() not in offered:
        unset = (f"unset, so security.inter.broker.protocol's {inter}, which "
                 if defaulted else f"{inter} ")
        raise ConfigError(
            f"inter.broker.listener.name: {unset}must be a listener name defined in "
            f"{'advertised.listeners' if advertised else 'listeners'} "
            f"({', '.join(sorted(offered))})")
    _check_listener_overrides(cfg, names)


def _check_listener_overrides(cfg: BrokerConfig, names: set[str]) -> None:
    for name, overrides in cfg.listener_overrides.items():
        if name not in names:
            key = f"listener.name.{name.lower()}.{next(iter(overrides))}"
            raise ConfigError(f"{key}: no listener {name} in listeners "
                              f"({', '.join(sorted(names))})")


ACCEPT_ERROR_BACKOFF_S = 0.1
# What OpenSSL says of a client that does not speak TLS (Kafka's size prefix instead of
# a ClientHello), to tell the operator what is likely wrong.
PLAINTEXT_REASONS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG",
                               "RECORD_LAYER_FAILURE", "UNKNOWN_PROTOCOL"})


class Listener:
    def __init__(
        self, endpoint: Endpoint, dispatcher: RequestDispatcher, *, max_request_size: int,
        idle_timeout_ms: int, quotas: ConnectionQuotas, pool: MemoryPool,
        on_count: Callable[[int], None] | None = None,
        on_rejected: Callable[[str], None] | None = None,
        on_throttled: Callable[[int], None] | None = None,
        on_ip_throttled: Callable[[str, int], None] | None = None,
        on_session_opened: Callable[[Session], None] | None = None,
        on_session_closed: Callable[[Session], None] | None = None,
        tls: ServerTls | None = None,
        preauth_pool: PreAuthPool | None = None,
        sasl_max_receive_size: int = 524288,
    ) -> None:
        if endpoint.security_protocol not in SUPPORTED_PROTOCOLS:
            raise ConfigError(
                f"listeners: {endpoint.listener_name} uses {endpoint.security_protocol}; "
                f"supported: {', '.join(SUPPORTED_PROTOCOLS)}"
            )
        if (tls is not None) != (endpoint.security_protocol in TLS_PROTOCOLS):
            raise ValueError(f"{endpoint.listener_name}: TLS is for SSL and SASL_SSL only")
        self.endpoint = endpoint
        self._tls = tls
        # Handshakes under way (TLS listeners): each one holds a connection slot.
        self._handshakes: set[asyncio.Task[None]] = set()
        self._dispatcher = dispatcher
        self._log = dispatcher.log.bind(listener=endpoint.listener_name)
        self._max_request_size = max_request_size
        self._idle_timeout_s = idle_timeout_ms / 1000
        self._quotas = quotas
        self._pool = pool
        self._receive = ReceiveBuffer()
        # A TLS client on a plaintext port retries, as does a plaintext client or one
        # with an untrusted certificate on a TLS port: one warning per address (and
        # handshake failure) per period.
        self._tls_notices = Notices()
        self._sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self.connections: set[KafkaConnection] = set()
        self.port = endpoint.port
        self._on_count = on_count or (lambda n: None)
        self._on_rejected = on_rejected or (lambda reason: None)
        self._on_throttled = on_throttled or (lambda ms: None)
        self._on_ip_throttled = on_ip_throttled or (lambda entity, ms: None)
        # Connections held over their address's connection_creation_rate, until closed.
        self._throttled: dict[socket.socket, asyncio.TimerHandle] = {}
        # Refusals for want of descriptors, failed accepts: once per period each.
        self._notices = Notices()
        self._on_session_opened = on_session_opened
        self._on_session_closed = on_session_closed
        # SASL listeners: what a connection may do before it has authenticated.
        self._preauth = (PreAuth(sasl_max_receive_size, preauth_pool, self._idle_timeout_s,
                                 Notices(), self._on_rejected)
                         if preauth_pool is not None
                         and endpoint.security_protocol.startswith("SASL_") else None)

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
        self._quotas.release_slot(self.endpoint.listener_name)
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
            principal_of=self._tls.principal_of if self._tls is not None else None,
            preauth=self._preauth,
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
        """Kafka's Acceptor: wait for a slot under max.connections, accept, close at
        once a connection the open files limit has no room for, hold the acceptor for
        the throttle time over max.connection.creation.rate, hold (and then close) a
        connection over its address's connection_creation_rate quota, then close at
        once a connection over its address's max.connections.per.ip."""
        loop = asyncio.get_running_loop()
        name = self.endpoint.listener_name
        while True:
            await self._quotas.acquire_slot(name)
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as e:
                # Out of file descriptors despite the reserve: the client stays in the
                # backlog.
                self._quotas.release_slot(name)
                if self._notices.due("accept"):
                    self._log.warning(
                        "cannot accept a connection; retrying every "
                        f"{ACCEPT_ERROR_BACKOFF_S * 1000:.0f} ms; logged once every "
                        f"{self._notices.period_s:.0f} s", error=e.strerror)
                await asyncio.sleep(ACCEPT_ERROR_BACKOFF_S)
                continue
            except BaseException:
                self._quotas.release_slot(name)
                raise
            address = normalize_address(str(peer[0]))
            if not self._quotas.room_for_client(name):
                self._quotas.release_slot(name)
                sock.close()
                self._no_descriptor_room(address)
                continue
            throttle_ms = self._quotas.record_connection(name)
            if throttle_ms > 0:
                # Kafka's waitForConnectionSlot: the accepted connection waits, and so
                # does every client behind it.
                self._on_throttled(throttle_ms)
                try:
                    await asyncio.sleep(throttle_ms / 1000)
                except BaseException:  # stopped meanwhile
                    self._quotas.release_slot(name)
                    sock.close()
                    raise
            ip_throttle_ms, entity = self._quotas.record_ip_connection(name, address)
            if ip_throttle_ms > 0:
                self._hold_then_close(sock, address, ip_throttle_ms, entity)
                continue
            if not self._quotas.admit(address):
                self._quotas.release_slot(name)
                self._on_rejected("max_connections_per_ip")
                self._log.info(
                    "rejected a connection: the address already has its maximum of "
                    f"{self._quotas.limit_for(address)} connections "
                    "(max.connections.per.ip)", client=address,
                )
                sock.close()
                continue
            if self._tls is not None:
                # The handshake takes round trips: the next client is accepted meanwhile.
                task = loop.create_task(self._handshake(sock, address, self._tls.context))
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)
                continue
            try:
                await loop.connect_accepted_socket(
                    functools.partial(self._protocol, address), sock)
            except OSError:
                # The client went away before its transport was made.
                self._quotas.closed(address)
                self._quotas.release_slot(name)
                sock.close()

    def _hold_then_close(self, sock: socket.socket, address: str, throttle_ms: int,
                         entity: str) -> None:
        """Kafka's throttled socket (KIP-612): a connection over its address's
        connection_creation_rate is accepted, read from never, and closed once its
        throttle time has passed; it keeps its slot (its descriptor) until then."""
        self._on_ip_throttled(entity, throttle_ms)
        if self._notices.due(f"ip_throttled {address}"):
            self._log.info(
                f"throttling connections from {address}: over its connection_creation_rate "
                f"quota (ip entity {entity}); each is closed after its throttle time; "
                "counted in kafkernel_ip_connections_throttled_total, logged once per "
                f"address every {self._notices.period_s:.0f} s", client=address,
                throttle_ms=throttle_ms)
        name = self.endpoint.listener_name

        def close() -> None:
            if self._throttled.pop(sock, None) is not None:
                sock.close()
                self._quotas.release_slot(name)

        self._throttled[sock] = asyncio.get_running_loop().call_later(throttle_ms / 1000,
                                                                      close)

    def _close_throttled(self) -> None:
        for sock, timer in list(self._throttled.items()):
            timer.cancel()
            sock.close()
            self._quotas.release_slot(self.endpoint.listener_name)
        self._throttled.clear()

    def _no_descriptor_room(self, address: str) -> None:
        self._on_rejected("file_descriptors")
        if self._notices.due("file_descriptors"):
            self._log.warning(
                "refusing new connections: the open files limit (RLIMIT_NOFILE) leaves "
                f"room for {self._quotas.client_room()} client connections beside the "
                "descriptors kept for the broker's own work; raise ulimit -n, or lower "
                "max.connections; counted in kafkernel_connections_rejected_total "
                f"(reason file_descriptors), logged once every {self._notices.period_s:.0f} s",
                client=address, connections=self._quotas.total + 1)

    async def _handshake(self, sock: socket.socket, address: str,
                         context: ssl.SSLContext) -> None:
        """TLS first; the connection (and its session) exists once the handshake is
        done. One that fails or does not finish within connections.max.idle.ms (Kafka
        closes a channel idle in its handshake the same way) gives its slot back."""
        loop = asyncio.get_running_loop()
        conn: KafkaConnection | None = None

        def protocol() -> KafkaConnection:
            nonlocal conn
            conn = self._protocol(address)
            return conn

        try:
            await loop.connect_accepted_socket(protocol, sock, ssl=context,
                                               ssl_handshake_timeout=self._idle_timeout_s)
        except BaseException as e:
            if conn is None or conn.transport is None:
                # Never opened: its connection_lost will not give the slot back.
                self._quotas.closed(address)
                self._quotas.release_slot(self.endpoint.listener_name)
            sock.close()
            if not isinstance(e, Exception):
                raise
            self._handshake_failed(address, e)

    def _handshake_failed(self, address: str, error: Exception) -> None:
        if isinstance(error, ssl.SSLError) and error.reason:
            reason = error.reason  # OpenSSL's code: a small set, so a bounded key
        elif isinstance(error, ConnectionAbortedError | TimeoutError):
            reason = ("not finished within connections.max.idle.ms "
                      f"({self._idle_timeout_s * 1000:.0f} ms)")
        else:
            reason = type(error).__name__  # the client went away (a reset, an EOF)
        # Once per address and reason: a client missing its certificate is still named
        # after the same address's plaintext probe.
        if self._tls_notices.due(f"{address} {reason}"):
            self._log_handshake_failure(address, reason)
        self._on_rejected("tls_handshake_failed")

    def _log_handshake_failure(self, address: str, reason: str) -> None:
        hint = (f" (a plaintext client? is it configured with security.protocol "
                f"{self.endpoint.security_protocol}?)" if reason in PLAINTEXT_REASONS else "")
        self._log.warning(
            f"closing a connection to listener {self.endpoint.listener_name} "
            f"({self.endpoint.security_protocol}): the TLS handshake failed: {reason}{hint}; "
            "logged once per address and reason every "
            f"{self._tls_notices.period_s:.0f} s", client=address,
        )

    async def stop_accepting(self) -> None:
        # Unregister the listening sockets before cancelling: a connection that arrives
        # as the accept is cancelled would otherwise be accepted into the cancelled
        # future, and asyncio's _sock_accept raises InvalidStateError on the loop.
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            loop.remove_reader(sock)
        for task in (*self._acceptors, *self._handshakes):
            task.cancel()
        await asyncio.gather(*self._acceptors, *self._handshakes, return_exceptions=True)
        self._acceptors = []
        self._close_sockets()
        self._close_throttled()

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []

    async def close_connections(self, grace_s: float) -> None:
        """Let the requests already read finish for up to ``grace_s``, then close
        everything. No new request is read meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        for conn in self.connections:
            conn.stop_reading()
        while any(c.busy for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.close()
        # Let the transports report their connections lost.
        while self.connections and loop.time() < deadline + grace_s:
            await asyncio.sleep(0.01)
