"""Errors that carry a Kafka error code to the response."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """An error the client should see as ``error_code`` (with ``message`` where the
    response has an error message field)."""

    def __init__(self, error_code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code
        self.message = message
