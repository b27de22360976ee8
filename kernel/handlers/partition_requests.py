"""Shared walk over the (topic, partitions) lists of partition-level requests
(ListOffsets, OffsetForLeaderEpoch, DeleteRecords): authorize once per topic, find the
local leader replica, and turn a raised KafkaError into that partition's error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.protocol.errors import KafkaError
from kernel.replica.partition import Partition
from kernel.requests import RequestContext

PartitionAnswer = Callable[[Partition, Any], dict[str, Any]]


def answer_partitions(
    ctx: RequestContext, topics: Any, *, topic_attr: str, partition_attr: str,
    index_attr: str, operation: str, answer: PartitionAnswer,
) -> list[tuple[str, list[dict[str, Any]]]]:
    """For each requested partition: ``answer(partition, request_item)`` gives the
    response fields, or the error code stands in ``error_code``. The dict ``answer``
    returns is the one in the result (index and error_code filled in when it lacks
    them), so a handler may keep it and complete it later (DeleteRecords does)."""
    services = ctx.services
    image = services.metadata.image
    leader_partition = services.replicas.leader_partition
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for topic in topics:
        name = getattr(topic, topic_attr)
        allowed = ctx.authorize(ctx.session, operation, "TOPIC", name)
        results: list[dict[str, Any]] = []
        for item in getattr(topic, partition_attr):
            index = getattr(item, index_attr)
            try:
                if not allowed:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                partition = leader_partition(name, index, image)
                partition.check_leader_epoch(getattr(item, "current_leader_epoch", -1))
                fields = answer(partition, item)
                fields.setdefault(index_attr, index)
                fields.setdefault("error_code", ErrorCode.none)
            except KafkaError as e:
                fields = {index_attr: index, "error_code": e.error_code}
                services.metrics.error(e.error_code)
            results.append(fields)
        out.append((name, results))
    return out


class TopicAccess:
    """Per-request topic lookups for Produce and Fetch: a topic entry's name (given,
    or resolved from its topic id), and authorization asked once per topic."""

    def __init__(self, ctx: RequestContext, operation: str) -> None:
        self._ctx = ctx
        self._operation = operation
        self._image = ctx.services.metadata.image
        self._allowed: dict[str, bool] = {}

    def name(self, topic_entry: Any, name_attr: str) -> str | None:
        name = getattr(topic_entry, name_attr, None)
        if name is None:
            topic_id = getattr(topic_entry, "topic_id", None)
            found = self._image.topics_by_id.get(topic_id) if topic_id is not None else None
            name = found.name if found is not None else None
        return name

    def allowed(self, name: str) -> bool:
        allowed = self._allowed.get(name)
        if allowed is None:
            allowed = self._allowed[name] = self._ctx.authorize(
                self._ctx.session, self._operation, "TOPIC", name)
        return allowed


# The errors after which a client looks for the partition's new leader.
_LEADER_MOVED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


class LeaderHints:
    """KIP-951 for Produce (v10+) and Fetch (v12+; endpoints from v16): a partition
    answered with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names its current
    leader, and the response carries that leader's endpoint, so the client can go there
    without a Metadata round trip first."""

    def __init__(self, ctx: RequestContext, response_module: Any) -> None:
        self._image = ctx.services.metadata.image
        self._listener = ctx.session.listener_name
        self._m = response_module
        self._endpoints: dict[int, Any] = {}

    def current_leader(self, topic: str | None, index: int, error: ErrorCode) -> dict[str, Any]:
        """The fields to add to the partition's answer (none when it needs no hint)."""
        m = self._m
        if error not in _LEADER_MOVED or topic is None or not hasattr(m, "LeaderIdAndEpoch"):
            return {}
        state = self._image.partition(topic, index)
        if state is None:
            return {}
        broker = self._image.brokers.get(state.leader)
        # The leader's endpoint on the client's listener, as Kafka's produce/fetch hints.
        endpoint = broker.endpoint(self._listener) if broker is not None else None
        if broker is not None and endpoint is not None and hasattr(m, "NodeEndpoint"):
            self._endpoints[broker.node_id] = m.NodeEndpoint(
                node_id=broker.node_id, host=endpoint.host, port=endpoint.port,
                rack=broker.rack)
        return {"current_leader": m.LeaderIdAndEpoch(leader_id=state.leader,
                                                      leader_epoch=state.leader_epoch)}

    @property
    def node_endpoints(self) -> tuple[Any, ...]:
        return tuple(self._endpoints.values())
