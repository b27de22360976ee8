"""What the transaction plugin asks of other brokers when a transaction spans a cluster.

- :func:`write_markers`: a marker goes to the leader of each of its partitions (Kafka's
  TransactionMarkerChannelManager): those led here through
  ``PluginServices.write_txn_markers``, the others in one WriteTxnMarkers v1 per leader.
- :func:`ask_coordinator`: a partition leader asks the broker that runs a transactional
  id's coordinator whether partitions are in its transaction, or adds them (Kafka's
  AddPartitionsToTxnManager, AddPartitionsToTxn v5 with ``verify_only``).

A partition whose leader is unknown, or whose leader cannot be reached, answers a
retriable error; the callers retry as Kafka's do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.add_partitions_to_txn.v5 import request as add_request
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as markers_request

from kernel.api.errors import BrokerConnectionError, KafkaError
from kernel.api.services import TransactionResult, TxnMarker

if TYPE_CHECKING:
    from kernel.api.services import PluginServices

__all__ = ["ask_coordinator", "write_markers"]

TopicPartition = tuple[str, int]
NO_LEADER = -1


async def write_markers(broker: PluginServices,
                        marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
    """Write ``marker`` to each of its partitions' leaders; an error per partition
    (NOT_LEADER_OR_FOLLOWER while a partition has no leader, NETWORK_EXCEPTION when its
    leader did not answer)."""
    image = broker.metadata.image
    by_leader: dict[int, list[TopicPartition]] = {}
    errors: dict[TopicPartition, ErrorCode] = {}
    for tp in marker.partitions:
        state = image.partition(*tp)
        leader = state.leader if state is not None else NO_LEADER
        if leader == NO_LEADER:
            errors[tp] = ErrorCode.not_leader_or_follower
        else:
            by_leader.setdefault(leader, []).append(tp)
    own = broker.config.broker_id
    answers = await asyncio.gather(*(
        _write_local(broker, marker, tps) if leader == own
        else _write_remote(broker, leader, marker, tps)
        for leader, tps in by_leader.items()))
    for answer in answers:
        errors.update(answer)
    return errors


async def _write_local(broker: PluginServices, marker: TxnMarker,
                       partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    local = TxnMarker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                      marker.result, tuple(partitions))
    try:
        (answer,) = await broker.write_txn_markers([local])
    except KafkaError as e:
        return dict.fromkeys(partitions, e.error_code)
    return dict(answer.errors)


def _by_topic(partitions: Sequence[TopicPartition]) -> dict[str, tuple[int, ...]]:
    """The wire's grouping: each topic with its partition indexes, in order."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return {topic: tuple(indexes) for topic, indexes in by_topic.items()}


async def _write_remote(broker: PluginServices, leader: int, marker: TxnMarker,
                        partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    request = markers_request.WriteTxnMarkersRequest(markers=(
        markers_request.WritableTxnMarker(
            producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
            transaction_result=marker.result is TransactionResult.COMMIT,
            topics=tuple(markers_request.WritableTxnMarkerTopic(
                name=topic, partition_indexes=indexes)
                for topic, indexes in _by_topic(partitions).items()),
            coordinator_epoch=marker.coordinator_epoch),))
    try:
        response = await broker.send_to_broker(leader, request)
    except BrokerConnectionError as e:
        broker.log.info("transaction markers not sent", broker_id=leader,
                        producer_id=marker.producer_id, reason=str(e))
        return dict.fromkeys(partitions, ErrorCode.network_exception)
    errors: dict[TopicPartition, ErrorCode] = {}
    for result in response.markers:
        for topic in result.topics:
            for p in topic.partitions:
                errors[(topic.name, p.partition_index)] = p.error_code
    # A partition the answer left out is retried.
    return {tp: errors.get(tp, ErrorCode.unknown_server_error) for tp in partitions}


async def ask_coordinator(broker: PluginServices, coordinator_id: int, transactional_id: str,
                          producer_id: int, producer_epoch: int,
                          partitions: Sequence[TopicPartition], *,
                          add: bool) -> dict[TopicPartition, ErrorCode]:
    """AddPartitionsToTxn v5 for one transaction to broker ``coordinator_id``: verify
    only, or add with ``add``. NETWORK_EXCEPTION when it did not answer; the answer's
    top-level error (CLUSTER_AUTHORIZATION_FAILED) for every partition."""
    request = add_request.AddPartitionsToTxnRequest(transactions=(
        add_request.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=not add,
            topics=tuple(add_request.AddPartitionsToTxnTopic(name=topic, partitions=indexes)
                         for topic, indexes in _by_topic(partitions).items())),))
    try:
        response = await broker.send_to_broker(coordinator_id, request)
    except BrokerConnectionError as e:
        broker.log.info("transaction verification not sent", broker_id=coordinator_id,
                        transactional_id=transactional_id, reason=str(e))
        return dict.fromkeys(partitions, ErrorCode.network_exception)
    if response.error_code != ErrorCode.none:
        return dict.fromkeys(partitions, response.error_code)
    errors: dict[TopicPartition, ErrorCode] = {}
    for result in response.results_by_transaction:
        if result.transactional_id != transactional_id:
            continue
        for topic in result.topic_results:
            for p in topic.results_by_partition:
                errors[(topic.name, p.partition_index)] = p.partition_error_code
    return {tp: errors.get(tp, ErrorCode.unknown_server_error) for tp in partitions}

