"""Partition offsets through ListOffsets (confluent-kafka's list_offsets): earliest,
latest, or the first offset at or after a time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from admin.client import ClientOptions, result

TopicPartitionKey = tuple[str, int]


def list_offsets(client: Any, options: ClientOptions, partitions: Iterable[TopicPartitionKey],
                 spec: str | int) -> dict[TopicPartitionKey, int]:
    """``spec``: "earliest", "latest", or a timestamp in ms (-1 for a time past the end,
    as Kafka answers it)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    if spec == "earliest":
        offset_spec = OffsetSpec.earliest()
    elif spec == "latest":
        offset_spec = OffsetSpec.latest()
    else:
        offset_spec = OffsetSpec.for_timestamp(int(spec))
    wanted = {TopicPartition(t, p): offset_spec for t, p in partitions}
    if not wanted:
        return {}
    futures = client.list_offsets(wanted, request_timeout=options.timeout_s)
    return {(tp.topic, tp.partition): int(result(f, options, "ListOffsets").offset)
            for tp, f in futures.items()}
