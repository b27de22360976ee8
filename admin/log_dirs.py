"""Partition sizes on disk from DescribeLogDirs, which confluent-kafka does not send:
kafka-python's admin client does, with the same connection settings mapped to its
names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from admin.client import ClientOptions

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
    config: dict[str, Any] = {"bootstrap_servers": options.bootstrap,
                              "request_timeout_ms": int(options.timeout_s * 1000),
                              "client_id": "kafkernel-admin"}
    for key, value in options.properties.items():
        name = KAFKA_PYTHON_NAMES.get(key)
        if name is not None:
            config[name] = value
    return config


def partition_sizes(options: ClientOptions, topics: Iterable[str]
                    ) -> tuple[dict[tuple[int, str, int], int], str | None]:
    """(broker id, topic, partition) -> bytes, or an empty map and why not."""
    try:
        from kafka.admin import KafkaAdminClient
    except ImportError:
        return {}, "kafka-python is not installed (the admin extra)"
    try:
        admin = KafkaAdminClient(**kafka_python_config(options))
    except Exception as e:  # kafka.errors.*: unreachable, authentication
        return {}, f"DescribeLogDirs: {e}"
    try:
        answers = admin.describe_log_dirs(topic_partitions=list(topics))
        return _sizes(answers), None
    except Exception as e:
        return {}, f"DescribeLogDirs: {e}"
    finally:
        admin.close()


def _sizes(answers: list[dict[str, Any]]) -> dict[tuple[int, str, int], int]:
    """kafka-python answers one dict per broker; a partition in two dirs of a broker (a
    move between dirs) counts its larger copy."""
    out: dict[tuple[int, str, int], int] = {}
    for answer in answers:
        for log_dir in answer["log_dirs"]:
            for topic in log_dir["topics"]:
                for p in topic["partitions"]:
                    key = (int(answer["broker"]), topic["name"], int(p["partition_index"]))
                    out[key] = max(out.get(key, 0), int(p["partition_size"]))
    return out
