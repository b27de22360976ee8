"""Partition sizes on disk from DescribeLogDirs, which confluent-kafka does not send
(asked through kafka-python, admin/kafka_python.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from admin.client import ClientOptions
from admin.errors import AdminError
from admin.kafka_python import call


def partition_sizes(options: ClientOptions, topics: Iterable[str]
                    ) -> tuple[dict[tuple[int, str, int], int], str | None]:
    """(broker id, topic, partition) -> bytes, or an empty map and why not."""
    try:
        answers = call(options, "DescribeLogDirs",
                       lambda admin: admin.describe_log_dirs(topic_partitions=list(topics)))
    except AdminError as e:
        return {}, str(e)
    return _sizes(answers), None


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
