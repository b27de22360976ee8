"""Group coordinator settings, declared once with Kafka's names, defaults and checks.

The state machine reads these; the plugin's ``[plugins.coordinator]`` table
(:class:`plugins.coordinator.settings.CoordinatorSettings`) extends them with the
offsets-topic keys, so the table and the state machine cannot disagree on a default.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.api.config import ConfigError, at_least, int_at_least, setting

__all__ = ["GroupCoordinatorConfig"]

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    group_min_session_timeout_ms: int = setting(
        "group.min.session.timeout.ms", 6000,
        "Shortest session timeout a member may ask for (else INVALID_SESSION_TIMEOUT).",
        check=int_at_least(0),
    )
    group_max_session_timeout_ms: int = setting(
        "group.max.session.timeout.ms", 1800000,
        "Longest session timeout a member may ask for.", check=int_at_least(0),
    )
    group_initial_rebalance_delay_ms: int = setting(
        "group.initial.rebalance.delay.ms", 3000,
        "How long the first rebalance of an empty group waits for more members.",
        check=int_at_least(0),
    )
    group_max_size: int = setting(
        "group.max.size", INT32_MAX, "Members a group may have (else GROUP_MAX_SIZE_REACHED).",
        check=int_at_least(1),
    )
    offsets_retention_minutes: int = setting(
        "offsets.retention.minutes", 10080,
        "How long committed offsets of a group without members are kept.",
        check=int_at_least(1),
    )
    offsets_retention_check_interval_ms: int = setting(
        "offsets.retention.check.interval.ms", 600000,
        "How often expired offsets are removed.", check=at_least(1),
    )
    offset_metadata_max_bytes: int = setting(
        "offset.metadata.max.bytes", 4096,
        "Longest metadata string an offset commit may carry (else "
        "OFFSET_METADATA_TOO_LARGE).", check=int_at_least(0),
    )
    # Not a Kafka setting: Kafka's fixed 5 minutes a new member's JoinGroup may stay
    # parked. A new member has no id yet, so it cannot heartbeat; this is its timeout.
    new_member_join_timeout_ms: int = 300_000

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(
                f"plugins.coordinator: group.min.session.timeout.ms "
                f"({self.group_min_session_timeout_ms}) must not exceed "
                f"group.max.session.timeout.ms ({self.group_max_session_timeout_ms})"
            )

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000
