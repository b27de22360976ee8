"""What the admin commands ask through kafka-python instead of confluent-kafka: calls
that librdkafka lacks (DescribeLogDirs) or gets wrong (2.16 answers a refused
DescribeAcls with an empty list, and aborts the process on a refused
DescribeUserScramCredentials of every user). The same connection settings, mapped to
kafka-python's names; its errors worded as librdkafka words Kafka's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from admin.client import ClientOptions
from admin.errors import AdminError

T = TypeVar("T")

# librdkafka property -> kafka-python's KafkaAdminClient argument
KAFKA_PYTHON_NAMES = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
}


def kafka_python_config(options: ClientOptions) -> dict[str, Any]:
    timeout_ms = int(options.timeout_s * 1000)
    config: dict[str, Any] = {"bootstrap_servers": options.bootstrap,
                              "request_timeout_ms": timeout_ms,
                              "bootstrap_timeout_ms": timeout_ms,
                              "client_id": "kafkernel-admin"}
    for key, value in options.properties.items():
        name = KAFKA_PYTHON_NAMES.get(key)
        if name is not None:
            config[name] = value
    return config


def error_text(error: Any) -> str:
    """CLUSTER_AUTHORIZATION_FAILED as librdkafka says it: "Cluster authorization
    failed."; anything else as it says itself."""
    name = getattr(error, "message", None)
    if isinstance(name, str) and name.isupper():
        return name.replace("_", " ").capitalize() + "."
    return str(error) or type(error).__name__


def call(options: ClientOptions, what: str, ask: Callable[[Any], T]) -> T:
    """``ask(admin)`` on a kafka-python admin client of its own; its errors (the broker's,
    or a broker out of reach) as an AdminError naming ``what``."""
    try:
        from kafka.admin import KafkaAdminClient
    except ImportError:
        raise AdminError(f"{what}: kafka-python is not installed (the admin extra)") from None
    try:
        admin = KafkaAdminClient(**kafka_python_config(options))
    except Exception as e:  # kafka.errors.*: unreachable, authentication
        raise AdminError(f"{what}: {error_text(e)}") from None
    try:
        return ask(admin)
    except AdminError:
        raise
    except Exception as e:
        raise AdminError(f"{what}: {error_text(e)}") from None
    finally:
        admin.close()
