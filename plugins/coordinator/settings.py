"""The ``[plugins.coordinator]`` table: Kafka's broker config names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.config import ConfigError, at_least, setting
from plugins.coordinator.config import GroupCoordinatorConfig

__all__ = ["CoordinatorSettings"]

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    offsets_topic_num_partitions: int = setting(
        "offsets.topic.num.partitions", 50,
        "Partitions of __consumer_offsets when this plugin creates it; a group lives on "
        "partition abs(hash(group id)) % partitions.", check=at_least(1),
    )
    offsets_topic_replication_factor: int = setting(
        "offsets.topic.replication.factor", 3,
        "Replication factor of __consumer_offsets, capped at the brokers registered when "
        "it is created.", check=at_least(1),
    )
    offsets_commit_timeout_ms: int = setting(
        "offsets.commit.timeout.ms", 5000,
        "How long a coordinator response waits for its records to be committed.",
        check=at_least(1),
    )
    group_min_session_timeout_ms: int = setting(
        "group.min.session.timeout.ms", 6000,
        "Shortest session timeout a member may ask for.", check=at_least(0),
    )
    group_max_session_timeout_ms: int = setting(
        "group.max.session.timeout.ms", 1800000,
        "Longest session timeout a member may ask for.", check=at_least(0),
    )
    group_initial_rebalance_delay_ms: int = setting(
        "group.initial.rebalance.delay.ms", 3000,
        "How long the first rebalance of an empty group waits for more members.",
        check=at_least(0),
    )
    group_max_size: int = setting(
        "group.max.size", INT32_MAX, "Members a group may have.", check=at_least(1),
    )
    offsets_retention_minutes: int = setting(
        "offsets.retention.minutes", 10080,
        "How long committed offsets of a group without members are kept.",
        check=at_least(1),
    )
    offsets_retention_check_interval_ms: int = setting(
        "offsets.retention.check.interval.ms", 600000,
        "How often expired offsets are removed.", check=at_least(1),
    )
    offset_metadata_max_bytes: int = setting(
        "offset.metadata.max.bytes", 4096,
        "Longest metadata string an offset commit may carry.", check=at_least(0),
    )

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(
                f"plugins.coordinator: group.min.session.timeout.ms "
                f"({self.group_min_session_timeout_ms}) must not exceed "
                f"group.max.session.timeout.ms ({self.group_max_session_timeout_ms})"
            )

    def group_config(self) -> GroupCoordinatorConfig:
        return GroupCoordinatorConfig(
            group_min_session_timeout_ms=self.group_min_session_timeout_ms,
            group_max_session_timeout_ms=self.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=self.group_initial_rebalance_delay_ms,
            group_max_size=self.group_max_size,
            offsets_retention_minutes=self.offsets_retention_minutes,
            offsets_retention_check_interval_ms=self.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=self.offset_metadata_max_bytes,
        )
