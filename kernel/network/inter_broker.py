"""Requests from this broker to the others, on the inter-broker listener.

Kafka's brokers talk to each other for more than replication: the transaction
coordinator sends WriteTxnMarkers to each partition's leader (its
TransactionMarkerChannelManager) and a partition leader asks the transaction coordinator
whether a partition is in a producer's transaction (AddPartitionsToTxn v4+, its
AddPartitionsToTxnManager). :class:`InterBrokerChannel` is that path: a request to a
broker by id, over a small pool of :class:`BrokerConnection` per broker, so requests to
one broker run side by side (one in flight per connection) and connections are reused.
The replica fetchers open their own connections through :meth:`connect`, so every
inter-broker connection is made, and refused, the same way.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

from kernel.cluster import BrokerEndpoint
from kernel.protocol.client import BrokerConnection, BrokerConnectionError

__all__ = ["InterBrokerChannel"]

# Idle connections kept per broker: enough for a burst of transactions ending at once.
MAX_IDLE_PER_BROKER = 4


class InterBrokerChannel:
    """Connections from broker ``broker_id`` to the others' ``listener_name`` endpoints
    (``endpoint_of`` reads the cluster image). ``ssl_context`` authenticates an SSL
    listener's peers and presents this broker's certificate."""

    def __init__(self, broker_id: int, listener_name: str,
                 endpoint_of: Callable[[int], BrokerEndpoint | None], *,
                 timeout_s: float, ssl_context: ssl.SSLContext | None = None) -> None:
        self.broker_id = broker_id
        self.listener_name = listener_name
        self.endpoint_of = endpoint_of
        self._timeout_s = timeout_s
        self._ssl_context = ssl_context
        self._idle: dict[int, list[BrokerConnection]] = {}
        self._busy: set[BrokerConnection] = set()
        self._closed = False

    def connect(self, endpoint: BrokerEndpoint, *, client_id: str,
                timeout_s: float) -> BrokerConnection:
        """A new connection to ``endpoint`` (opened on its first request); refused with
        BrokerConnectionError for a listener this broker cannot speak as a client."""
        protocol = endpoint.security_protocol
        if protocol.startswith("SASL_"):
            raise BrokerConnectionError(
                f"inter-broker listener {endpoint.listener_name} is {protocol}: brokers "
                "connect to each other over PLAINTEXT or SSL only")
        tls = self._ssl_context if protocol == "SSL" else None
        if protocol == "SSL" and tls is None:
            raise BrokerConnectionError(
                f"inter-broker listener {endpoint.listener_name} is SSL and this broker has "
                "no trust store for it (ssl.truststore.location)")
        return BrokerConnection(endpoint.host, endpoint.port, client_id=client_id,
                                timeout_s=timeout_s, ssl_context=tls)

    async def send(self, broker_id: int, body: Any) -> Any:
        """Send the kio request ``body`` to broker ``broker_id`` and return its response
        body. Raises BrokerConnectionError when the broker is not registered, cannot be
        reached, or does not answer within the channel's timeout."""
        if self._closed:
            raise BrokerConnectionError("the inter-broker channel is closed")
        endpoint = self.endpoint_of(broker_id)
        if endpoint is None:
            raise BrokerConnectionError(
                f"broker {broker_id} has no {self.listener_name} endpoint registered")
        connection = self._take(broker_id, endpoint)
        self._busy.add(connection)
        try:
            response = await connection.request(body)
        finally:
            self._busy.discard(connection)
        # A failed request closed its connection, which is then dropped with the error.
        self._give_back(broker_id, connection)
        return response

    def _take(self, broker_id: int, endpoint: BrokerEndpoint) -> BrokerConnection:
        idle = self._idle.get(broker_id, [])
        while idle:
            connection = idle.pop()
            if (connection.host, connection.port) == (endpoint.host, endpoint.port) and \
                    connection.connected:
                return connection
            connection.close()  # the broker moved (a restart on a new port)
        return self.connect(endpoint, client_id=f"broker-{self.broker_id}",
                            timeout_s=self._timeout_s)

    def _give_back(self, broker_id: int, connection: BrokerConnection) -> None:
        idle = self._idle.setdefault(broker_id, [])
        if self._closed or not connection.connected or len(idle) >= MAX_IDLE_PER_BROKER:
            connection.close()
        else:
            idle.append(connection)

    def close(self) -> None:
        """Close every connection; requests still in flight fail, later ones too."""
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
        for connection in self._busy:
            connection.close()
        self._busy.clear()
