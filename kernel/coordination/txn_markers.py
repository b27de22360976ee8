"""Transaction markers written to the partitions led here: the transaction coordinator
ends a transaction on the partitions it touched with a commit or abort marker (a control
batch) in each. WriteTxnMarkers (``kernel.handlers.write_txn_markers``) and the
transaction coordinator's local path (``PluginServices.write_txn_markers``, served by
the broker) both write through :func:`write_txn_markers`.

As Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``: every marker is appended to the
local leader with acks=all semantics and the answer waits in the Produce purgatory until
the high watermark passes it (``ReplicaManager.wait_for_replication``, Produce's
DelayedProduce: ``request.timeout.ms``, 30 s, then REQUEST_TIMED_OUT). A
partition of a coordinator's internal topic (``__consumer_offsets``) is not appended
here: the coordinator that owns it writes the marker through its runtime and applies it
to its state (Kafka's ``GroupCoordinator.completeTransaction``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from kernel.log import AppendOrigin
from kernel.protocol.errors import KafkaError
from kernel.protocol.records import ControlRecordType, build_control_batch
from kernel.replica.produce_append import ProducePartitionStatus
from kernel.services import BrokerServices, TransactionResult, TxnMarker, TxnMarkerResult

# Kafka's request.timeout.ms default: how long a marker waits to be committed.
MARKER_TIMEOUT_MS = 30_000

# A coordinator that is not ready answers with these; the transaction coordinator
# expects NOT_LEADER_OR_FOLLOWER and retries (as Kafka translates them).
_COORDINATOR_NOT_READY = frozenset({ErrorCode.coordinator_not_available,
                                    ErrorCode.coordinator_load_in_progress,
                                    ErrorCode.not_coordinator})

TopicPartition = tuple[str, int]


async def write_txn_markers(services: BrokerServices, markers: Sequence[TxnMarker], *,
                        timeout_ms: int = MARKER_TIMEOUT_MS) -> list[TxnMarkerResult]:
    """Write every marker to its partitions; a result per marker, in order, once each
    partition's marker is committed or has failed."""
    replicas = services.replicas
    coordinators = services.coordinators
    now_ms = time.time_ns() // 1_000_000
    errors: list[dict[TopicPartition, ErrorCode]] = [{} for _ in markers]
    # Each marker appended here, with where its outcome goes.
    appends: list[tuple[ProducePartitionStatus, dict[TopicPartition, ErrorCode],
                        TopicPartition]] = []
    delegated: list[tuple[dict[TopicPartition, ErrorCode], TopicPartition,
                          asyncio.Future[None]]] = []
    for marker, marker_errors in zip(markers, errors, strict=True):
        kind = (ControlRecordType.COMMIT if marker.result is TransactionResult.COMMIT
                else ControlRecordType.ABORT)
        for tp in marker.partitions:
            topic, index = tp
            marker_errors[tp] = ErrorCode.none  # the answer keeps the request's order
            partition = replicas.get_partition(topic, index)
            if partition is None:
                marker_errors[tp] = ErrorCode.unknown_topic_or_partition
                continue
            complete = coordinators.transaction_completer(topic)
            if complete is not None:
                # Started now, so every partition's marker is written before any wait.
                try:
                    completion = asyncio.ensure_future(complete(
                        index, marker.producer_id, marker.producer_epoch,
                        marker.coordinator_epoch, marker.result, timeout_ms))
                except KafkaError as e:
                    marker_errors[tp] = _coordinator_error(e.error_code)
                    continue
                # Its outcome is read below, unless this wait is cancelled first (the
                # connection went away): then it must not be reported as unretrieved.
                completion.add_done_callback(_retrieve)
                delegated.append((marker_errors, tp, completion))
                continue
            batch = build_control_batch(
                kind, producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                coordinator_epoch=marker.coordinator_epoch, timestamp=now_ms)
            try:
                if not partition.is_leader:
                    raise KafkaError(ErrorCode.not_leader_or_follower,
                                     f"this broker is not the leader of {topic}-{index}")
                info = replicas.append_records(partition, batch, -1, now_ms,
                                               origin=AppendOrigin.COORDINATOR)
            except KafkaError as e:
                marker_errors[tp] = e.error_code
                services.log.debug("transaction marker not written", topic=topic,
                                   partition=index, producer_id=marker.producer_id,
                                   error=e.error_code.name, reason=e.message)
                continue
            appends.append((ProducePartitionStatus(
                topic, index, batch, required_offset=info.last_offset + 1,
                partition=partition), marker_errors, tp))
    # As Kafka's: acks=all, the Produce purgatory's DelayedProduce.
    await replicas.wait_for_replication([status for status, _, _ in appends], timeout_ms)
    for status, marker_errors, tp in appends:
        marker_errors[tp] = status.error
    for marker_errors, tp, completion in delegated:
        marker_errors[tp] = await _completion_error(completion)
    return [TxnMarkerResult(m.producer_id, e) for m, e in zip(markers, errors, strict=True)]


async def _completion_error(completion: asyncio.Future[None]) -> ErrorCode:
    try:
        await completion
    except KafkaError as e:
        return _coordinator_error(e.error_code)
    return ErrorCode.none


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _coordinator_error(code: ErrorCode) -> ErrorCode:
    return ErrorCode.not_leader_or_follower if code in _COORDINATOR_NOT_READY else code
