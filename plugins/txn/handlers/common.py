"""What the txn handlers share: error codes as each request version knows them."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["for_version"]


def for_version(error: ErrorCode, api_version: int, fenced_since: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) is answered INVALID_PRODUCER_EPOCH to versions below
    ``fenced_since``, as Kafka's KafkaApis does."""
    if error == ErrorCode.producer_fenced and api_version < fenced_since:
        return ErrorCode.invalid_producer_epoch
    return error
