"""Connection limits with Kafka's names and behaviour (ConnectionQuotas in Kafka's
SocketServer): at ``max.connections`` (or a listener's
``listener.name.<l>.max.connections``) the listeners stop accepting until a connection
closes (new clients wait in the kernel's backlog); over ``max.connection.creation.rate``
(broker-wide, or a listener's own) the acceptor holds the connection it accepted, and
accepts nothing more, for the throttle time (KIP-612); a connection from an address that
already has ``max.connections.per.ip`` (or its entry in
``max.connections.per.ip.overrides``) is closed as soon as it is accepted. A client
address over its ``connection_creation_rate`` quota (KIP-612: the ``ip`` entity of its
address, else the ``ip`` default entity; set with AlterClientQuotas) is accepted, not
counted, and closed once its throttle time has passed, while the acceptor goes on with
the next client. Beyond Kafka, a connection the open files limit has no room for is
closed as soon as it is accepted (kernel/network/descriptors.py)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kernel.client_quotas import CONNECTION_CREATION_RATE, IP, QuotaEntity, QuotaValues
from kernel.config import INT_MAX, ConfigError


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


# Kafka's quota.window.num and quota.window.size.seconds defaults: a connection rate is
# measured over 11 one-second samples, and one throttle lasts at most one window.
QUOTA_WINDOW_NUM = 11
QUOTA_WINDOW_MS = 1000


class ConnectionRate:
    """Kafka's Rate over a SampledStat (org.apache.kafka.common.metrics.stats): events
    counted in ``samples`` windows of ``window_ms``, each starting at its first event;
    the rate is their total over the time they span, which is never taken as less than
    ``samples - 1`` whole windows (so one burst on a fresh broker is not a huge rate)."""

    def __init__(self, quota: float, samples: int = QUOTA_WINDOW_NUM,
                 window_ms: int = QUOTA_WINDOW_MS) -> None:
        self.quota = quota
        self._samples_max = samples
        self._window_ms = window_ms
        self._samples: list[list[int]] = []  # [window start ms, count], oldest first

    def _purge(self, now_ms: int) -> None:
        expire_age = self._samples_max * self._window_ms
        self._samples = [s for s in self._samples if now_ms - s[0] < expire_age]

    def _window_size_ms(self, now_ms: int) -> int:
        oldest = self._samples[0][0] if self._samples else now_ms
        elapsed = now_ms - oldest
        full = elapsed // self._window_ms
        if full < self._samples_max - 1:
            elapsed += (self._samples_max - 1 - full) * self._window_ms
        return max(elapsed, 1)

    def unrecord(self) -> None:
        """Take back the event just counted (Kafka records -1 at the same time)."""
        if self._samples:
            self._samples[-1][1] -= 1

    def idle_since(self, now_ms: int) -> bool:
        """Whether every sample has expired: the rate is then a fresh one's."""
        self._purge(now_ms)
        return not self._samples

    def rate(self, now_ms: int) -> float:
        """Events per second."""
        self._purge(now_ms)
        total = sum(count for _, count in self._samples)
        return total / (self._window_size_ms(now_ms) / 1000)

    def record(self, now_ms: int) -> int:
        """Count one event; the throttle time in ms when the rate now exceeds the quota
        (Kafka's QuotaUtils.boundedThrottleTime: the excess over the quota, as a share
        of it, times the measured window, at most one window), else 0."""
        self._purge(now_ms)
        if self._samples and now_ms < self._samples[-1][0] + self._window_ms:
            self._samples[-1][1] += 1
        else:
            self._samples.append([now_ms, 1])
            del self._samples[:-self._samples_max]
        value = self.rate(now_ms)
        if value <= self.quota:
            return 0
        throttle = (value - self.quota) / self.quota * self._window_size_ms(now_ms)
        return min(round(throttle), self._window_ms)


# Idle per-address rates are dropped this often (once all their windows have expired
# they equal a fresh rate).
IP_RATES_PRUNE_MS = 60_000
DEFAULT_IP = "<default>"  # the ip default entity, as the throttle metrics name it

QuotaSource = Callable[[], Mapping[QuotaEntity, QuotaValues]]


class IpConnectionRates:
    """KIP-612's per-IP connection creation rates, from the client quotas in the
    metadata (read per accept, so an alteration applies to the next connection): the
    ``ip`` entity of the address (a host name is resolved when the quotas change, as
    Kafka resolves it), else the ``ip`` default entity, else none."""

    def __init__(self, quotas: QuotaSource) -> None:
        self._quotas = quotas
        self._seen: Mapping[QuotaEntity, QuotaValues] | None = None
        self._per_address: dict[str, int] = {}
        self._default: int | None = None
        self._rates: dict[str, ConnectionRate] = {}
        self._pruned_ms = 0

    def _refresh(self) -> None:
        quotas = self._quotas()
        if quotas is self._seen:
            return
        self._seen = quotas
        self._per_address, self._default = {}, None
        for entity, values in quotas.items():
            rate = values.get(CONNECTION_CREATION_RATE)
            if rate is None or len(entity) != 1 or entity[0][0] != IP:
                continue
            name = entity[0][1]
            if name is None:
                self._default = int(rate)
                continue
            for address in _addresses(name):
                self._per_address[address] = int(rate)

    def quota_for(self, address: str) -> tuple[int, str] | None:
        """The address's rate and the entity it comes from (its address, or
        DEFAULT_IP), or None where no quota applies."""
        self._refresh()
        rate = self._per_address.get(address)
        if rate is not None:
            return rate, address
        return None if self._default is None else (self._default, DEFAULT_IP)

    def record(self, address: str, quota: int, now_ms: int) -> int:
        """Count a connection from ``address``; the throttle time in ms (Kafka's
        bounded throttle, at most one window) when it is over its quota, in which case
        the connection is taken back, as Kafka does for one it will not accept."""
        if now_ms - self._pruned_ms > IP_RATES_PRUNE_MS:
            self._pruned_ms = now_ms
            self._rates = {a: r for a, r in self._rates.items() if not r.idle_since(now_ms)}
        rate = self._rates.get(address)
        if rate is None:
            rate = self._rates[address] = ConnectionRate(quota)
        rate.quota = quota  # an altered quota applies to the rate measured so far
        throttle_ms = rate.record(now_ms)
        if throttle_ms > 0:
            rate.unrecord()
        return throttle_ms


def _addresses(name: str) -> list[str]:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        return [normalize_address(name)]
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return sorted({normalize_address(str(info[4][0])) for info in infos})


@dataclass
class ListenerQuota:
    """``listener.name.<l>.max.connections`` and ``.max.connection.creation.rate``."""

    max_connections: int
    creation_rate: ConnectionRate
    count: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)


class ConnectionQuotas:
    """Counts of open connections, broker-wide, per listener and per client address;
    the connection creation rates; the room the open files limit leaves clients."""

    def __init__(self, max_connections: int, max_per_ip: int,
                 overrides: dict[str, int], *, max_creation_rate: int = INT_MAX,
                 listener_limits: dict[str, tuple[int, int]] | None = None,
                 client_room: Callable[[], int | None] | None = None,
                 protected_listener: str | None = None,
                 ip_quotas: QuotaSource | None = None,
                 time_ms: Callable[[], int] | None = None) -> None:
        """``listener_limits``: listener name -> (max.connections, creation rate);
        ``client_room``: connections the open files limit leaves clients (None: no
        bound); ``protected_listener``: the inter-broker listener when the broker has
        others (Kafka's protectedListener): the broker-wide limits and the descriptor
        room do not hold other brokers back, only its own listener limits do;
        ``ip_quotas``: the client quotas, for the ``ip`` entities' connection rates."""
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = overrides
        self.total = 0
        self._per_ip: dict[str, int] = {}
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._broker_rate = ConnectionRate(max_creation_rate)
        self._listeners = {name: ListenerQuota(limit, ConnectionRate(rate))
                           for name, (limit, rate) in (listener_limits or {}).items()}
        self._client_room = client_room or (lambda: None)
        self._protected = protected_listener
        self._time_ms = time_ms or (lambda: int(asyncio.get_running_loop().time() * 1000))
        self._ip_rates = IpConnectionRates(ip_quotas or dict)

    def _listener(self, name: str) -> ListenerQuota:
        quota = self._listeners.get(name)
        if quota is None:
            quota = self._listeners[name] = ListenerQuota(INT_MAX, ConnectionRate(INT_MAX))
        return quota

    def _slot_available(self, name: str, listener: ListenerQuota) -> bool:
        if listener.count >= listener.max_connections:
            return False
        return name == self._protected or self.total < self.max_connections

    async def acquire_slot(self, listener_name: str = "") -> None:
        """Wait until the broker is below max.connections and the listener below its
        own, then take a slot."""
        listener = self._listener(listener_name)
        while not self._slot_available(listener_name, listener):
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._slot_waiters:
                    self._slot_waiters.remove(waiter)
        self.total += 1
        listener.count += 1

    def record_connection(self, listener_name: str = "") -> int:
        """Count an accepted connection in the creation rates; the throttle time in ms
        (Kafka's recordConnectionAndGetThrottleTimeMs: the listener's, but at least the
        broker-wide one)."""
        now = self._time_ms()
        broker = 0 if listener_name == self._protected else self._broker_rate.record(now)
        return max(broker, self._listener(listener_name).creation_rate.record(now))

    def record_ip_connection(self, listener_name: str, address: str) -> tuple[int, str]:
        """Kafka's recordIpConnectionMaybeThrottle: count the connection in its
        address's rate; over the quota, the throttle time in ms and the quota entity,
        and the connection is taken back from the broker and listener rates too."""
        quota = self._ip_rates.quota_for(address)
        if quota is None:
            return 0, ""
        throttle_ms = self._ip_rates.record(address, quota[0], self._time_ms())
        if throttle_ms > 0:
            if listener_name != self._protected:
                self._broker_rate.unrecord()
            self._listener(listener_name).creation_rate.unrecord()
        return throttle_ms, quota[1]

    def room_for_client(self, listener_name: str = "") -> bool:
        """Whether the connections held (the one just accepted included) fit in what
        the open files limit leaves clients; other brokers' links are in the reserve."""
        if listener_name == self._protected:
            return True
        room = self._client_room()
        return room is None or self.total <= room

    def client_room(self) -> int | None:
        return self._client_room()

    def release_slot(self, listener_name: str = "") -> None:
        self.total -= 1
        self._listener(listener_name).count -= 1
        # Every waiter checks again: the freed slot may be on another's listener.
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def reconfigure(self, max_connections: int, max_per_ip: int, overrides: dict[str, int],
                    max_creation_rate: int) -> None:
        """The broker-wide limits changed at runtime (Kafka's dynamic
        max.connections, max.connections.per.ip and its overrides, and
        max.connection.creation.rate): open connections stay; new ones meet the new
        limits, and accepts waiting for a slot check again."""
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = overrides
        self._broker_rate.quota = max_creation_rate
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

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
