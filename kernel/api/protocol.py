"""Building kio requests and responses: ``make(cls, **values)`` fills the fields a
version lacks with their defaults; ``response_module``/``request_module`` find an API's
kio module by key and version. ``BrokerConnection``: an outgoing connection to another
node (one request in flight), for a plugin's own peers (the KRaft quorum's voters)."""

from kernel.protocol.build import make, request_module, response_module
from kernel.protocol.client import BrokerConnection
from kernel.protocol.codec import InvalidRequest
from kernel.protocol.errors import ErrorCode, KafkaError

__all__ = ["BrokerConnection", "ErrorCode", "InvalidRequest", "KafkaError", "make",
           "request_module", "response_module"]
