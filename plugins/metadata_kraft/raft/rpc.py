"""The KRaft RPCs a controller serves on its controller listener, at Kafka 4.3.1's
version ranges (``versions.SERVED``: Vote 0-2, BeginQuorumEpoch 0-1, EndQuorumEpoch 0-1,
Fetch 4-18 of ``__cluster_metadata`` only (the kernel's Fetch keeps the broker listener),
DescribeQuorum 0-2, FetchSnapshot 0-1), each translated to the one version the Raft core
speaks and its answer back to the request's version; and DescribeCluster v1-2 with
EndpointType 2 (the controllers), which Admin clients with ``bootstrap.controllers``
(``kafka-metadata-quorum --bootstrap-controller``) ask first. ApiVersions advertises
exactly these versions.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from kio.schema.describe_quorum.v2 import response as dq_resp
from kio.schema.types import BrokerId
from kio.static.primitive import i32

from kernel.api.errors import KafkaError
from kernel.api.handlers import CONTROLLER, ApiRegistry, RequestContext
from kernel.api.hooks import CLUSTER_NAME
from kernel.api.protocol import ErrorCode, make, response_module

from . import messages as m
from . import versions

__all__ = ["QuorumService", "register"]

DESCRIBE_CLUSTER = 60
DESCRIBE_QUORUM = 55
CONTROLLER_ENDPOINT_TYPE = 2
NO_THROTTLE = datetime.timedelta(0)


class QuorumService(Protocol):
    """What the handlers need of the running quorum node."""

    listener_name: str
    cluster_id: str | None

    def handle(self, request: m.RaftRequest) -> Awaitable[m.RaftResponse]: ...
    def voters(self) -> dict[int, tuple[str, int]]: ...
    def leader_id(self) -> int | None: ...


def authorize_cluster(ctx: RequestContext, operation: str) -> None:
    """Kafka's ControllerApis asks this of every controller RPC: a peer or broker
    needs CLUSTER_ACTION (DescribeQuorum: DESCRIBE) on the cluster where an authorizer
    is enabled."""
    if not ctx.authorize(ctx.session, operation, "CLUSTER", CLUSTER_NAME):
        raise KafkaError(ErrorCode.cluster_authorization_failed,
                         f"{operation} on the cluster is not authorized")


def register(registry: ApiRegistry, service: Callable[[], QuorumService | None]) -> None:
    def raft(ctx: RequestContext, request: Any) -> Awaitable[Any]:
        authorize_cluster(ctx, "DESCRIBE" if ctx.api_key == DESCRIBE_QUORUM
                          else "CLUSTER_ACTION")
        return _raft(service(), request)

    for api_key, (low, high) in versions.SERVED.items():
        registry.register(api_key, raft, min_version=low, max_version=high,
                          listeners=(CONTROLLER,))

    def describe_cluster(ctx: RequestContext, request: Any) -> Any:
        return _describe_cluster(service(), request)

    registry.register(DESCRIBE_CLUSTER, describe_cluster, min_version=1, max_version=2,
                      listeners=(CONTROLLER,))


async def _raft(node: QuorumService | None, request: Any) -> Any:
    if node is None:  # not started yet, or stopping
        raise _not_available()
    response = await node.handle(versions.to_core(request))
    return versions.to_version(_with_endpoints(node, response), int(request.__version__))


def _with_endpoints(node: QuorumService, response: Any) -> Any:
    if not isinstance(response, m.DescribeQuorumResponse):
        return _with_leader_endpoint(node, response)
    if isinstance(response, m.DescribeQuorumResponse):
        part = response.topics[0].partitions[0] if response.topics else None
        if part is not None and part.error_code is ErrorCode.none:
            # Kafka names every voter's endpoint on the listener the request came in on.
            response = replace(response, nodes=tuple(
                dq_resp.Node(node_id=BrokerId(voter), listeners=(dq_resp.Listener(
                    name=node.listener_name, host=host, port=i32(port)),))
                for voter, (host, port) in sorted(node.voters().items())))
    return response


def _with_leader_endpoint(node: QuorumService, response: Any) -> Any:
    """Kafka's ``NodeEndpoints``: the known leader's endpoint on the controller listener,
    so a voter or observer can reach it."""
    if isinstance(response, m.FetchResponse | m.FetchSnapshotResponse):
        topics = response.responses if isinstance(response, m.FetchResponse) \
            else response.topics
        parts = [p for t in topics for p in t.partitions]
        leader = parts[0].current_leader.leader_id if parts else -1
    else:
        parts = [p for t in response.topics for p in t.partitions]
        leader = parts[0].leader_id if parts else -1
    address = node.voters().get(int(leader))
    if address is None:
        return response
    endpoint_cls = sys.modules[type(response).__module__].NodeEndpoint
    types = {f.name: f.type for f in dataclasses.fields(endpoint_cls)}
    values: dict[str, Any] = {"node_id": BrokerId(leader), "host": address[0],
                              "port": types["port"](address[1])}
    if "rack" in types:
        values["rack"] = None
    return replace(response, node_endpoints=(endpoint_cls(**values),))


def _not_available() -> Exception:
    return KafkaError(ErrorCode.broker_not_available, "the metadata quorum is not running")


def _describe_cluster(node: QuorumService | None, request: Any) -> Any:
    module = response_module(DESCRIBE_CLUSTER, request.__version__)
    cls = module.DescribeClusterResponse
    if request.endpoint_type != CONTROLLER_ENDPOINT_TYPE:
        # Kafka's controller: "The request was sent to an endpoint of type CONTROLLER,
        # but we wanted an endpoint of type BROKER".
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.mismatched_endpoint_type,
                    error_message="The request was sent to an endpoint of type CONTROLLER, "
                    "but we wanted an endpoint of type BROKER",
                    endpoint_type=request.endpoint_type, cluster_id="", controller_id=-1,
                    brokers=(), cluster_authorized_operations=-2147483648)
    if node is None:
        raise _not_available()
    leader = node.leader_id()
    brokers = tuple(make(module.DescribeClusterBroker, broker_id=voter, host=host, port=port,
                         is_fenced=False,
                         rack=None)
                    for voter, (host, port) in sorted(node.voters().items()))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                endpoint_type=CONTROLLER_ENDPOINT_TYPE, cluster_id=node.cluster_id or "",
                controller_id=-1 if leader is None else leader, brokers=brokers,
                cluster_authorized_operations=-2147483648)
