"""Creating a coordinator's internal topic (``__consumer_offsets``,
``__transaction_state``) as Kafka's coordinators do: compacted, the replication factor
capped at the brokers registered now (so a single broker works with Kafka's default of
3), a topic that exists already left as it is."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kernel.cluster import MetadataBackend, NewTopic
from kernel.protocol.errors import KafkaError

__all__ = ["create_internal_topic"]


async def create_internal_topic(metadata: MetadataBackend, log: Any, name: str,
                                partitions: int, replication_factor: int,
                                configs: dict[str, str]) -> int | None:
    """Create ``name`` unless it exists; returns the replication factor used (None when
    the topic existed or creating it failed: that failure is logged once, and the
    coordinator answers COORDINATOR_NOT_AVAILABLE until the topic exists)."""
    image = metadata.image
    if name in image.topics:
        return None
    wanted = replication_factor
    replication_factor = min(replication_factor, max(1, len(image.brokers)))
    if "min.insync.replicas" in configs:
        configs = {**configs, "min.insync.replicas":
                   str(min(int(configs["min.insync.replicas"]), replication_factor))}
    try:
        await metadata.create_topics([NewTopic(name, partitions, replication_factor,
                                               configs=configs, internal=True)])
    except KafkaError as e:
        if e.error_code != ErrorCode.topic_already_exists:
            log.error("cannot create an internal topic", topic=name,
                      error=e.error_code.name, detail=e.message)
        return None
    if replication_factor < wanted:
        # Kafka refuses until enough brokers are up; this cap lets one broker serve
        # groups, and the operator should hear that a cluster got less than asked.
        log.info("created an internal topic with fewer replicas than configured: not "
                    "enough brokers were registered", topic=name, partitions=partitions,
                    replication_factor=replication_factor, configured=wanted)
        return replication_factor
    log.info("created an internal topic", topic=name, partitions=partitions,
             replication_factor=replication_factor)
    return replication_factor
