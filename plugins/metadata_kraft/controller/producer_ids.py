"""AllocateProducerIds v0 (ProducerIdControlManager.generateNextProducerId)."""

from __future__ import annotations

from kio.schema.allocate_producer_ids.v0.response import AllocateProducerIdsResponse
from kio.static.primitive import i32, i64

from kernel.api.errors import ErrorCode, KafkaError

from ..records.schema import ProducerIdsRecord
from .cluster_control import check_broker_epoch
from .messages import NO_THROTTLE, AnyRequest
from .state import ControllerResult, ControllerState

BLOCK_SIZE = 1000  # ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
_MAX_START = 2**63 - 1 - BLOCK_SIZE


def allocate_producer_ids(state: ControllerState, request: AnyRequest) -> ControllerResult:
    """The next block of 1000 ids for the broker; STALE_BROKER_EPOCH when its epoch is
    not its registration's, UNKNOWN_SERVER_ERROR once the id space is spent (Kafka's
    UnknownServerException)."""
    try:
        check_broker_epoch(state, request.broker_id, request.broker_epoch)
        start = state.next_producer_id
        if start > _MAX_START:
            raise KafkaError(ErrorCode.unknown_server_error,
                             "Exhausted all producerIds as the next block's end producerId "
                             "has exceeded the int64 type limit")
    except KafkaError as e:
        return ControllerResult((), AllocateProducerIdsResponse(
            throttle_time=NO_THROTTLE, error_code=e.error_code,
            producer_id_start=i64(0), producer_id_len=i32(0)))
    record = ProducerIdsRecord(broker_id=request.broker_id,
                               broker_epoch=request.broker_epoch,
                               next_producer_id=start + BLOCK_SIZE)
    return ControllerResult((record,), AllocateProducerIdsResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
        producer_id_start=i64(start), producer_id_len=i32(BLOCK_SIZE)))
