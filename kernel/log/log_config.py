"""The topic-level configs a partition's log honours (Kafka's LogConfig), shared by the
loader, the segment list and the partition log."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel.config import (
    INTERNAL_SEGMENT_BYTES,
    LONG_MAX,
    BrokerConfig,
    resolve_topic_configs,
)
from kernel.protocol.compression import Compression


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The topic-level configs the log honours (Kafka names with dots as underscores);
    defaults are Kafka's. Build it from :func:`kernel.config.resolve_topic_configs`."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    file_delete_delay_ms: int = 60000
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    # Not a topic config: the broker's socket.request.max.bytes, what a compressed batch
    # may inflate to (see kernel.log.validator.validate_records).
    max_inflated_bytes: int = 104857600

    @classmethod
    def from_topic_configs(cls, resolved: Mapping[str, Any]) -> LogConfig:
        """From Kafka-named typed values; names the log does not use are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, value in resolved.items():
            attr = name.replace(".", "_")
            if attr in names:
                kwargs[attr] = tuple(value) if attr == "cleanup_policy" else value
        internal = resolved.get(INTERNAL_SEGMENT_BYTES)
        if internal is not None:  # Kafka's LogConfig.segmentSize(): the internal one wins
            kwargs["segment_bytes"] = internal
        return cls(**kwargs)

    @classmethod
    def from_broker(
        cls, broker: BrokerConfig, overrides: Mapping[str, str] | None = None
    ) -> LogConfig:
        resolved = resolve_topic_configs(broker, overrides or {})
        resolved["max.inflated.bytes"] = broker.socket_request_max_bytes
        return cls.from_topic_configs(resolved)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def target_compression(self) -> Compression | None:
        return Compression.from_config(self.compression_type)
