"""The broker's channel to the active controller (Kafka's NodeToControllerChannelManager).

Where the active controller is comes from a :class:`ControllerNodeProvider` (Kafka's
name). The Raft observer will be one (the leader it fetches from, as Kafka's
RaftControllerNodeProvider); until then :class:`BootstrapControllerNodeProvider` asks
the bootstrap controllers (``controller.quorum.bootstrap.servers``, else the voters'
addresses), as Kafka's admin tools do with ``--bootstrap-controller``: DescribeCluster
with the controller endpoint type (KIP-919) names the active controller and every
controller's endpoint (Kafka 4.3.1's controllers, once past their first seconds);
where it does not, DescribeQuorum, which only the leader answers with itself and its
endpoints.

:class:`ControllerChannel` sends a request to the active controller, one in flight per
destination, and retries within the request's deadline: after a broken connection or
NOT_CONTROLLER it asks the provider again, waiting ``controller.quorum.retry.backoff.ms``
between tries."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from kernel.api.config import BrokerConfig, parse_voters
from kernel.api.errors import BrokerConnectionError
from kernel.api.protocol import BrokerConnection

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
# DescribeCluster's EndpointType (KIP-919): 1 brokers, 2 controllers.
CONTROLLER_ENDPOINT_TYPE = 2
CLIENT_ID = "kafkernel-broker-to-controller"


@dataclass(frozen=True, slots=True)
class ControllerNode:
    """The active controller's controller listener (Kafka's ControllerInformation)."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.port}"


class ControllerNodeProvider(Protocol):
    """Where the active controller is. ``stale`` is the node a request just failed on
    (broken connection, NOT_CONTROLLER): an answer other than it is wanted, though the
    same node may be given again when nothing better is known. None: no controller is
    known now (the channel waits its retry backoff and asks again)."""

    async def active_controller(self, stale: ControllerNode | None = None
                                ) -> ControllerNode | None:
        ...


Connect = Callable[[str, int], BrokerConnection]


def plaintext_connect(timeout_s: float) -> Connect:
    """New PLAINTEXT connections with ``timeout_s`` per request."""
    def connect(host: str, port: int) -> BrokerConnection:
        return BrokerConnection(host, port, client_id=CLIENT_ID, timeout_s=timeout_s)
    return connect


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class BootstrapControllerNodeProvider:
    """Finds the active controller by asking the bootstrap controllers in turn
    (``host:port`` each), starting after the last one that answered."""

    def __init__(self, bootstrap: Sequence[str], connect: Connect) -> None:
        if not bootstrap:
            raise ValueError("no bootstrap controller to ask")
        self._bootstrap = [parse_address(a) for a in bootstrap]
        self._connect = connect
        self._next = 0

    async def active_controller(self, stale: ControllerNode | None = None
                                ) -> ControllerNode | None:
        found: ControllerNode | None = None
        for i in range(len(self._bootstrap)):
            index = (self._next + i) % len(self._bootstrap)
            host, port = self._bootstrap[index]
            connection = self._connect(host, port)
            try:
                node = await self._ask(connection)
            except BrokerConnectionError as e:
                log.debug("bootstrap controller %s:%d: %s", host, port, e)
                continue
            finally:
                connection.close()
            if node is None:
                continue
            self._next = index
            if node != stale:
                return node
            found = node  # the same one again: keep looking, else give it
        return found

    @staticmethod
    async def _ask(connection: BrokerConnection) -> ControllerNode | None:
        described = await connection.request(DescribeClusterRequest(
            include_cluster_authorized_operations=False,
            endpoint_type=i8(CONTROLLER_ENDPOINT_TYPE)))
        if described.error_code == ErrorCode.none:
            for node in described.brokers:  # the controllers, for this endpoint type
                if node.broker_id == described.controller_id:
                    return ControllerNode(int(node.broker_id), node.host, int(node.port))
        # Not served there, or no active controller named yet (4.3.1 answers -1 and no
        # controllers in its first seconds): the leader answers DescribeQuorum with
        # itself and its endpoints, a follower with an error.
        quorum = await connection.request(DescribeQuorumRequest(topics=(TopicData(
            topic_name=METADATA_TOPIC, partitions=(PartitionData(partition_index=i32(0)),)),)))
        if quorum.error_code != ErrorCode.none or not quorum.topics:
            return None
        partition = quorum.topics[0].partitions[0]
        if partition.error_code != ErrorCode.none or partition.leader_id < 0:
            return None
        for node in quorum.nodes:
            if node.node_id == partition.leader_id and node.listeners:
                listener = node.listeners[0]
                return ControllerNode(int(node.node_id), listener.host, int(listener.port))
        return None


class ControllerUnavailableError(Exception):
    """No active controller answered within the request's deadline."""


class ControllerChannel:
    """Requests to the active controller; :meth:`send` returns its answer."""

    def __init__(self, provider: ControllerNodeProvider, connect: Connect, *,
                 retry_backoff_s: float, request_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._provider = provider
        self._connect = connect
        self._retry_backoff_s = retry_backoff_s
        self._request_timeout_s = request_timeout_s
        self._clock = clock
        self._controller: ControllerNode | None = None
        self._connections: dict[ControllerNode, tuple[BrokerConnection, asyncio.Lock]] = {}
        self._closed = False

    @property
    def controller(self) -> ControllerNode | None:
        """The active controller as last found (None before the first request)."""
        return self._controller

    async def send(self, body: Any, timeout_s: float | None = None) -> Any:
        """Send the kio request ``body`` to the active controller and return its
        answer, which may carry any error but NOT_CONTROLLER. Raises
        ControllerUnavailableError when none answered within ``timeout_s`` (the
        channel's request timeout by default)."""
        deadline = self._clock() + (self._request_timeout_s if timeout_s is None
                                    else timeout_s)
        why = "no controller found"
        stale: ControllerNode | None = None
        while not self._closed:
            node = self._controller
            if node is None:
                node = self._controller = await self._provider.active_controller(stale)
            if node is not None:
                try:
                    response = await self._request(node, body, deadline)
                except BrokerConnectionError as e:
                    why = str(e)
                else:
                    if getattr(response, "error_code", None) != ErrorCode.not_controller:
                        return response
                    why = f"controller {node} answered NOT_CONTROLLER"
                stale = node
                self._rediscover(node, why)
            left = deadline - self._clock()
            if left <= 0:
                break
            await asyncio.sleep(min(self._retry_backoff_s, left))
        raise ControllerUnavailableError(
            f"{type(body).__name__} got no answer from the active controller in time: {why}")

    def _rediscover(self, node: ControllerNode, why: str) -> None:
        log.info("Lost the active controller %s (%s); looking for it again", node, why)
        self._drop(node)
        if self._controller == node:
            self._controller = None

    async def _request(self, node: ControllerNode, body: Any, deadline: float) -> Any:
        entry = self._connections.get(node)
        if entry is None:
            entry = self._connections[node] = (self._connect(node.host, node.port),
                                               asyncio.Lock())
        connection, lock = entry
        try:
            async with asyncio.timeout(max(deadline - self._clock(), 0.001)):
                async with lock:  # one request in flight per destination
                    return await connection.request(body)
        except TimeoutError:
            raise BrokerConnectionError(f"{node}: no answer before the deadline") from None

    def _drop(self, node: ControllerNode) -> None:
        entry = self._connections.pop(node, None)
        if entry is not None:
            entry[0].close()

    def close(self) -> None:
        self._closed = True
        for node in list(self._connections):
            self._drop(node)


def bootstrap_controllers(config: BrokerConfig) -> list[str]:
    """``controller.quorum.bootstrap.servers``, else the voters' ``host:port``."""
    if config.controller_quorum_bootstrap_servers:
        return list(config.controller_quorum_bootstrap_servers)
    return [f"{host}:{port}" for host, port in
            parse_voters(config.controller_quorum_voters).values()]


def channel_for(config: BrokerConfig, connect: Connect | None = None) -> ControllerChannel:
    """The channel with Kafka's settings: ``controller.quorum.retry.backoff.ms``
    between tries, ``controller.quorum.request.timeout.ms`` per connection request.
    ``connect`` defaults to PLAINTEXT (kernel.api offers no SSL/SASL client settings
    for the controller listener yet)."""
    request_timeout_s = config.controller_quorum_request_timeout_ms / 1000
    connect = connect or plaintext_connect(request_timeout_s)
    return ControllerChannel(
        BootstrapControllerNodeProvider(bootstrap_controllers(config), connect), connect,
        retry_backoff_s=config.controller_quorum_retry_backoff_ms / 1000,
        request_timeout_s=request_timeout_s)
