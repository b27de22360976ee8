"""DescribeCluster (key 60): brokers, controller and cluster id from the cluster image.

A broker answers for endpoint type BROKERS only; asked about controllers it says
MISMATCHED_ENDPOINT_TYPE (INVALID_REQUEST in v0), as Kafka brokers do (KIP-919).
"""

from __future__ import annotations

import datetime
from typing import Any

from kernel.authorized_operations import OPS_NOT_REQUESTED, authorized_operations
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode
from kernel.requests import RequestContext

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2


def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    image = ctx.services.metadata.image
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    if endpoint_type != ENDPOINT_BROKERS:
        known = endpoint_type == ENDPOINT_CONTROLLERS
        if ctx.api_version == 0:
            error = ErrorCode.invalid_request
        elif known:
            error = ErrorCode.mismatched_endpoint_type
        else:
            error = ErrorCode.unsupported_endpoint_type
        message = ("The request was sent to an endpoint of type BROKER, but we wanted an "
                   "endpoint of type CONTROLLER" if known
                   else f"Unsupported endpoint type {endpoint_type}")
        # Kafka's error answer keeps the default endpoint type, not the one asked for.
        return make(m.DescribeClusterResponse, throttle_time=datetime.timedelta(0),
                    error_code=error, error_message=message, endpoint_type=ENDPOINT_BROKERS,
                    cluster_id=image.cluster_id, brokers=())
    operations = OPS_NOT_REQUESTED
    if request.include_cluster_authorized_operations:
        operations = _authorized_operations(ctx)
    # The endpoints of the client's listener; a broker without one is left out (Kafka's
    # getAliveBrokerNodes(listenerName)), and so is a fenced one unless v2's
    # include_fenced_brokers asks for them (KIP-1073).
    listener = ctx.session.listener_name
    listed = (image.brokers if getattr(request, "include_fenced_brokers", False)
              else image.alive_brokers)
    brokers = tuple(
        make(m.DescribeClusterBroker, broker_id=b.node_id, host=e.host, port=e.port,
             rack=b.rack, is_fenced=b.fenced)
        for b in listed.values() if (e := b.endpoint(listener)) is not None
    )
    return make(
        m.DescribeClusterResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=image.cluster_id,
        controller_id=image.controller_id,
        brokers=brokers,
        cluster_authorized_operations=operations,
    )



def _authorized_operations(ctx: RequestContext) -> int:
    if not ctx.authorize(ctx.session, "DESCRIBE", "CLUSTER", CLUSTER_NAME):
        return 0
    return authorized_operations(ctx, "CLUSTER", CLUSTER_NAME)
