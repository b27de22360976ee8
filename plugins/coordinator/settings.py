"""The ``[plugins.coordinator]`` table: Kafka's broker config names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.api.config import between, int_at_least, setting
from plugins.coordinator.config import GroupCoordinatorConfig

__all__ = ["CoordinatorSettings"]


@dataclass(frozen=True, slots=True)
class CoordinatorSettings(GroupCoordinatorConfig):
    """The group settings plus the keys of the offsets topic itself."""

    offsets_topic_num_partitions: int = setting(
        "offsets.topic.num.partitions", 50,
        "Partitions of __consumer_offsets when this plugin creates it; a group lives on "
        "partition abs(hash(group id)) % partitions.", check=int_at_least(1),
    )
    offsets_topic_replication_factor: int = setting(
        "offsets.topic.replication.factor", 3,
        "Replication factor of __consumer_offsets, capped at the brokers registered when "
        "it is created.", check=between(1, 32767),
    )
    offsets_topic_segment_bytes: int = setting(
        "offsets.topic.segment.bytes", 104857600,
        "segment.bytes of __consumer_offsets when this plugin creates it: small segments "
        "are cleaned sooner.", check=int_at_least(1),
    )
    offsets_commit_timeout_ms: int = setting(
        "offsets.commit.timeout.ms", 5000,
        "How long a coordinator response waits for its records to be committed.",
        check=int_at_least(1),
    )
