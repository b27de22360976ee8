"""Building kio requests and responses: ``make(cls, **values)`` fills the fields a
version lacks with their defaults; ``response_module``/``request_module`` find an API's
kio module by key and version."""

from kernel.protocol.build import make, request_module, response_module
from kernel.protocol.codec import InvalidRequest
from kernel.protocol.errors import ErrorCode, KafkaError

__all__ = ["ErrorCode", "InvalidRequest", "KafkaError", "make", "request_module",
           "response_module"]
