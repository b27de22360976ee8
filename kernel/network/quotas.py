"""Connection limits with Kafka's names and behaviour (ConnectionQuotas in Kafka's
SocketServer): at ``max.connections`` the listeners stop accepting until a connection
closes (new clients wait in the kernel's backlog), and a connection from an address
that already has ``max.connections.per.ip`` (or its entry in
``max.connections.per.ip.overrides``) is closed as soon as it is accepted."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections import deque

from kernel.config import ConfigError


def parse_overrides(items: list[str]) -> dict[str, int]:
    """``host:count`` items -> {host: count}; hosts are resolved later, at start."""
    overrides: dict[str, int] = {}
    for item in items:
        host, sep, count = item.strip().rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(
                f"max.connections.per.ip.overrides: {item!r} is not host:count "
                "(e.g. hostName:100,127.0.0.1:200)"
            )
        overrides[host.strip().strip("[]")] = int(count)
    return overrides


def resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """{address: count} for every address a host name resolves to (Kafka resolves them
    once, when the setting is read)."""
    resolved: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as e:
            raise ConfigError(
                f"max.connections.per.ip.overrides: cannot resolve {host!r}: {e}"
            ) from None
        for info in infos:
            resolved[normalize_address(str(info[4][0]))] = count
    return resolved


def normalize_address(address: str) -> str:
    """One spelling per address; an IPv4-mapped IPv6 address counts as its IPv4 one."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


class ConnectionQuotas:
    """Counts of open connections, broker-wide and per client address."""

    def __init__(self, max_connections: int, max_per_ip: int,
                 overrides: dict[str, int]) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = overrides
        self.total = 0
        self._per_ip: dict[str, int] = {}
        self._slot_waiters: deque[asyncio.Future[None]] = deque()

    async def acquire_slot(self) -> None:
        """Wait until the broker is below max.connections, then take a slot."""
        while self.total >= self.max_connections:
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._slot_waiters:
                    self._slot_waiters.remove(waiter)
        self.total += 1

    def release_slot(self) -> None:
        self.total -= 1
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def limit_for(self, address: str) -> int:
        return self.overrides.get(address, self.max_per_ip)

    def admit(self, address: str) -> bool:
        """Count a connection from ``address``; False when it is over its limit."""
        count = self._per_ip.get(address, 0)
        if count >= self.limit_for(address):
            return False
        self._per_ip[address] = count + 1
        return True

    def closed(self, address: str) -> None:
        count = self._per_ip.get(address, 0) - 1
        if count > 0:
            self._per_ip[address] = count
        else:
            self._per_ip.pop(address, None)

    def count(self, address: str) -> int:
        return self._per_ip.get(address, 0)
