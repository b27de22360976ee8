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

import re
import ssl
from collections.abc import Callable
from typing import Any

from kernel.cluster import BrokerEndpoint
from kernel.config import SASL_JAAS_CONFIG, BrokerConfig, ConfigError
from kernel.protocol.client import BrokerConnection, BrokerConnectionError
from kernel.protocol.sasl_client import CLIENT_MECHANISMS, SaslCredentials

__all__ = ["InterBrokerChannel", "inter_broker_sasl", "parse_jaas_login"]

# Idle connections kept per broker: enough for a burst of transactions ending at once.
MAX_IDLE_PER_BROKER = 4


class InterBrokerChannel:
    """Connections from broker ``broker_id`` to the others' ``listener_name`` endpoints
    (``endpoint_of`` reads the cluster image). ``ssl_context`` authenticates an SSL
    listener's peers and presents this broker's certificate."""

    def __init__(self, broker_id: int, listener_name: str,
                 endpoint_of: Callable[[int], BrokerEndpoint | None], *,
                 timeout_s: float, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslCredentials | None = None) -> None:
        self.broker_id = broker_id
        self.listener_name = listener_name
        self.endpoint_of = endpoint_of
        self._timeout_s = timeout_s
        self._ssl_context = ssl_context
        self._sasl = sasl
        self._idle: dict[int, list[BrokerConnection]] = {}
        self._busy: set[BrokerConnection] = set()
        self._closed = False

    def connect(self, endpoint: BrokerEndpoint, *, client_id: str,
                timeout_s: float) -> BrokerConnection:
        """A new connection to ``endpoint`` (opened on its first request); refused with
        BrokerConnectionError for a listener this broker cannot speak as a client."""
        protocol = endpoint.security_protocol
        sasl = self._sasl if protocol.startswith("SASL_") else None
        if protocol.startswith("SASL_") and sasl is None:
            listener = endpoint.listener_name.lower()
            raise BrokerConnectionError(
                f"inter-broker listener {endpoint.listener_name} is {protocol} and this "
                "broker has no user to log in as: set sasl.mechanism.inter.broker.protocol "
                f"and listener.name.{listener}.<mechanism>.sasl.jaas.config")
        tls = self._ssl_context if protocol.endswith("SSL") else None
        if protocol.endswith("SSL") and tls is None:
            raise BrokerConnectionError(
                f"inter-broker listener {endpoint.listener_name} is {protocol} and this "
                "broker has no trust store for it (ssl.truststore.location)")
        return BrokerConnection(endpoint.host, endpoint.port, client_id=client_id,
                                timeout_s=timeout_s, ssl_context=tls, sasl=sasl)

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


# Kafka's login modules, by the mechanism each logs in with.
_LOGIN_MODULES = {"PLAIN": "PlainLoginModule", "SCRAM-SHA-256": "ScramLoginModule",
                  "SCRAM-SHA-512": "ScramLoginModule"}
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_JAAS = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
                   rf"(?P<options>(?:\s+[\w.-]+\s*=\s*(?:{_QUOTED}|[^\s;\"]+))*)\s*;\s*")
_OPTION = re.compile(r'([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas_login(text: str, where: str, mechanism: str) -> tuple[str, str]:
    """The username and password of a one-module JAAS login for ``mechanism``; a
    ConfigError naming ``where`` for anything else. A PLAIN login's user_<name> options
    (Kafka's server-side users) are refused: Kafkernel's PLAIN users come from the
    auth_sasl plugin's plain.users.file."""
    match = _JAAS.fullmatch(text)
    if match is None:
        raise ConfigError(f"{where}: not a JAAS login (expected `<LoginModule> required "
                          'username="..." password="...";`)')
    module = match["module"].rsplit(".", 1)[-1]
    if module != _LOGIN_MODULES[mechanism]:
        raise ConfigError(f"{where}: {module} does not log in with {mechanism}; use "
                          f"{_LOGIN_MODULES[mechanism]}")
    options = {m[1]: re.sub(r"\\(.)", r"\1", m[2]) if m[2] is not None else m[3]
               for m in _OPTION.finditer(match["options"])}
    users = sorted(k for k in options if k.startswith("user_"))
    if users:
        raise ConfigError(f"{where}: {users[0]}: Kafkernel's PLAIN users come from "
                          "[plugins.auth_sasl] plain.users.file, not the JAAS login")
    missing = [k for k in ("username", "password") if not options.get(k)]
    if missing:
        raise ConfigError(f"{where}: the login has no {' and no '.join(missing)}")
    return options["username"], options["password"]


def inter_broker_sasl(cfg: BrokerConfig, listener_name: str) -> SaslCredentials | None:
    """How this broker logs in to the others' SASL inter-broker listener: Kafka's
    sasl.mechanism.inter.broker.protocol with the user of
    listener.name.<listener>.<mechanism>.sasl.jaas.config, else sasl.jaas.config. None
    when neither is set (a broker alone needs none); a ConfigError for a login that
    cannot be used."""
    mechanism = cfg.sasl_mechanism_inter_broker_protocol.upper()
    key = f"{mechanism.lower()}.{SASL_JAAS_CONFIG}"
    overrides = cfg.listener_overrides.get(listener_name, {})
    if key in overrides:
        text, where = overrides[key], f"listener.name.{listener_name.lower()}.{key}"
    elif cfg.sasl_jaas_config is not None:
        text, where = cfg.sasl_jaas_config, SASL_JAAS_CONFIG
    else:
        return None
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol: {mechanism} is not "
                          f"supported; one of {', '.join(CLIENT_MECHANISMS)}")
    username, password = parse_jaas_login(text, where, mechanism)
    return SaslCredentials(mechanism, username, password)
