"""Group coordinator settings, named after Kafka's broker configs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["GroupCoordinatorConfig"]


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    group_min_session_timeout_ms: int = 6_000
    """group.min.session.timeout.ms: JoinGroup with a shorter session timeout is
    rejected with INVALID_SESSION_TIMEOUT."""
    group_max_session_timeout_ms: int = 1_800_000
    """group.max.session.timeout.ms."""
    group_initial_rebalance_delay_ms: int = 3_000
    """group.initial.rebalance.delay.ms: how long the first join phase of an Empty group
    waits for more members before forming a generation."""
    group_max_size: int = 2**31 - 1
    """group.max.size: members beyond it get GROUP_MAX_SIZE_REACHED."""
    offsets_retention_minutes: int = 10_080
    """offsets.retention.minutes."""
    offsets_retention_check_interval_ms: int = 600_000
    """offsets.retention.check.interval.ms: period of the offset expiration timer."""
    offset_metadata_max_bytes: int = 4_096
    """offset.metadata.max.bytes: longer commit metadata gets OFFSET_METADATA_TOO_LARGE."""
    new_member_join_timeout_ms: int = 300_000
    """How long a new member's JoinGroup may stay parked (Kafka's fixed 5 minutes). A
    new member has no id yet, so it cannot heartbeat; this is its only timeout."""

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
            )
        for f in dataclasses.fields(self):
            if getattr(self, f.name) < 0:
                raise ValueError(f"{_kafka_name(f.name)} must not be negative")
        if self.group_max_size < 1:
            raise ValueError("group.max.size must be at least 1")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_kafka_properties(cls, properties: Mapping[str, int]) -> GroupCoordinatorConfig:
        """Build from Kafka-style names (``"group.max.size"``); an unknown name is an
        error that lists the known ones."""
        known = {_kafka_name(f.name): f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for name, value in properties.items():
            if name not in known:
                raise ValueError(
                    f"unknown group coordinator setting {name!r}; known: {', '.join(known)}"
                )
            kwargs[known[name]] = int(value)
        return cls(**kwargs)


def _kafka_name(field_name: str) -> str:
    return field_name.replace("_", ".")
