"""WriteTxnMarkers (key 27): the transaction coordinator ends a transaction on the
partitions it touched by writing a commit or abort marker (a control batch) to each; the
markers are written by ``kernel.coordination.txn_markers`` (which also serves
``PluginServices.write_txn_markers``, the coordinator's local path). Needs ALTER or
CLUSTER_ACTION on the cluster.

Versions: Kafka 4.x serves 1-2; v2 adds a marker's TransactionVersion (KIP-1228, the
log checks a TV2 marker's epoch strictly), which the log does not check yet, so only v1
is served and advertised.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kernel.coordination.txn_markers import write_txn_markers
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.requests import RequestContext
from kernel.services import TransactionResult, TxnMarker, TxnMarkerResult

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 1

TopicPartition = tuple[str, int]


def handle(ctx: RequestContext, request: Any) -> Any:
    markers = [TxnMarker(
        producer_id=m.producer_id, producer_epoch=m.producer_epoch,
        coordinator_epoch=m.coordinator_epoch,
        result=TransactionResult.COMMIT if m.transaction_result else TransactionResult.ABORT,
        partitions=tuple((t.name, i) for t in m.topics for i in t.partition_indexes),
    ) for m in request.markers]
    # As Kafka: ALTER on the cluster (checked quietly) or else CLUSTER_ACTION.
    if not (ctx.authorize(ctx.session, "ALTER", "CLUSTER", CLUSTER_NAME)
            or ctx.authorize(ctx.session, "CLUSTER_ACTION", "CLUSTER", CLUSTER_NAME)):
        denied = ErrorCode.cluster_authorization_failed
        return _response(ctx, [TxnMarkerResult(m.producer_id, dict.fromkeys(m.partitions, denied))
                               for m in markers])
    return _answer(ctx, markers)


async def _answer(ctx: RequestContext, markers: list[TxnMarker]) -> Any:
    return _response(ctx, await write_txn_markers(ctx.services, markers))


def _response(ctx: RequestContext, results: list[TxnMarkerResult]) -> Any:
    """One entry per producer id, as Kafka's (a producer's markers merge)."""
    m = response_module(API_KEY, ctx.api_version)
    by_producer: dict[int, dict[TopicPartition, ErrorCode]] = {}
    for result in results:
        by_producer.setdefault(result.producer_id, {}).update(result.errors)
    entries = []
    for producer_id, errors in by_producer.items():
        topics: dict[str, list[Any]] = {}
        for (topic, index), error in errors.items():
            if error != ErrorCode.none:
                ctx.services.metrics.error(error)
            topics.setdefault(topic, []).append(make(
                m.WritableTxnMarkerPartitionResult, partition_index=index, error_code=error))
        entries.append(make(m.WritableTxnMarkerResult, producer_id=producer_id, topics=tuple(
            make(m.WritableTxnMarkerTopicResult, name=name, partitions=tuple(partitions))
            for name, partitions in topics.items())))
    return make(m.WriteTxnMarkersResponse, markers=tuple(entries))
