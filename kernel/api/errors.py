"""The errors plugins raise and catch. Raising :class:`KafkaError` in a handler answers
with its code; :class:`ConfigError` and :class:`StartupError` stop startup with one
line."""

from kernel.config import ConfigError, StartupError
from kernel.coordination import CoordinatorError
from kernel.log.manager import LogDirError
from kernel.protocol.client import BrokerConnectionError
from kernel.protocol.codec import InvalidRequest
from kernel.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "BrokerConnectionError",
    "ConfigError",
    "CoordinatorError",
    "ErrorCode",
    "InvalidRequest",
    "KafkaError",
    "LogDirError",
    "StartupError",
]
