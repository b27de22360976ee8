"""The topic-level configs a partition's log honours (Kafka's LogConfig), shared by the
loader, the segment list and the partition log."""

from __future__ import annotations

import dataclasses
import random
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel.config import (
    BROKER_SCHEMA,
    INTERNAL_SEGMENT_BYTES,
    TOPIC_CONFIGS,
    BrokerConfig,
    resolve_topic_configs,
)
from kernel.protocol.compression import Compression


def _with_topic_configs(cls: type) -> type:
    """Add a field for each topic config the log reads, with the default its declaration
    gives (TOPIC_CONFIGS, broker synonyms at their defaults); lists become tuples."""
    annotations = cls.__annotations__  # its own: the class body has annotations
    for tc in TOPIC_CONFIGS:
        if tc.in_log:
            listed = typing.get_origin(tc.type) is list
            annotations[tc.attr] = tuple[str, ...] if listed else tc.type
            setattr(cls, tc.attr, tuple(tc.static_default) if listed else tc.static_default)
    return cls


@dataclass(frozen=True, slots=True)
@_with_topic_configs
class LogConfig:
    """The topic-level configs the log honours (Kafka names with dots as underscores:
    ``segment_bytes``), one plain field each, read per append. The fields and their
    defaults come from kernel/config/topic_defs.py (``in_log``). Build it from
    :func:`kernel.config.resolve_topic_configs`."""

    # Not a topic config: the broker's socket.request.max.bytes, what a compressed batch
    # may inflate to (see kernel.log.validator.validate_records).
    max_inflated_bytes: int = BROKER_SCHEMA.keys["socket.request.max.bytes"].default

    @classmethod
    def from_topic_configs(cls, resolved: Mapping[str, Any]) -> LogConfig:
        """From Kafka-named typed values; names the log does not use are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, value in resolved.items():
            attr = name.replace(".", "_")
            if attr in names:
                kwargs[attr] = tuple(value) if isinstance(value, list) else value
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

    def random_segment_jitter(self) -> int:
        """Kafka's LogConfig.randomSegmentJitter: a new segment's roll jitter, below
        min(segment.jitter.ms, segment.ms)."""
        if self.segment_jitter_ms == 0:
            return 0
        return random.randrange(min(self.segment_jitter_ms, self.segment_ms))

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

    def compression_level(self, codec: Compression) -> int | None:
        """compression.<codec>.level of the codec a batch is recompressed with."""
        if codec == Compression.GZIP:
            return self.compression_gzip_level
        if codec == Compression.LZ4:
            return self.compression_lz4_level
        if codec == Compression.ZSTD:
            return self.compression_zstd_level
        return None
