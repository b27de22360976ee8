"""Kafka 4.3's topic configs, each declared once: its type, check, doc and the broker
settings that supply its default (its synonyms), with that one default.

Everything else is derived from this table: the broker's fields for the synonyms
(``BrokerConfig``), the topic keys that CreateTopics and AlterConfigs check and
DescribeConfigs lists (kernel/config/topic.py) and the fields of the log's
``LogConfig`` (kernel/log/log_config.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kernel.config.schema import (
    LONG_MAX,
    MIN_SEGMENT_BYTES,
    Check,
    all_of,
    at_least,
    between,
    int_at_least,
    one_of,
)

MINUTE_MS = 60_000
HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A broker setting that supplies a topic config's default. The first of a topic's
    synonyms shares its type and check; later ones are the same quantity in another unit
    (``log.retention.hours``) or a fallback, read when those before it are unset."""

    name: str
    default: Any
    doc: str
    check: Check | None = None
    dynamic: bool = True
    unit_ms: int = 1  # the topic value is this setting times unit_ms
    int32: bool = False  # Kafka declares it INT (32-bit), not LONG
    # Described among the others when it is itself described (Kafka's
    # DynamicBrokerConfig.brokerConfigSynonyms groups the units of one quantity).
    grouped: bool = True

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    type: Any  # the value's type: int, float, bool, str or list[str]
    doc: str
    check: Check | None
    synonyms: tuple[BrokerSynonym, ...]  # most precedent first; () has `default`
    default: Any  # only for a config without a broker synonym
    int32: bool  # Kafka declares it INT (32-bit)
    in_log: bool  # a LogConfig field (the log or its cleaner reads it)
    # Kafka's KafkaConfig.logRetentionTimeMillis: any negative time means forever (-1).
    negative_is_forever: bool = False

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    @property
    def broker_key(self) -> str | None:
        return self.synonyms[0].name if self.synonyms else None

    def broker_type(self, synonym: BrokerSynonym) -> Any:
        return self.type | None if synonym.default is None else self.type

    def default_from(self, broker: Any) -> Any:
        """The value a topic without an override has: the first synonym set on the
        broker (``broker`` is a BrokerConfig), in the topic config's unit."""
        return self._first_set([getattr(broker, s.attr) for s in self.synonyms])

    @property
    def static_default(self) -> Any:
        """The default with every broker synonym at its own default."""
        return self._first_set([s.default for s in self.synonyms])

    def _first_set(self, values: list[Any]) -> Any:
        for synonym, value in zip(self.synonyms, values, strict=True):
            if value is not None:
                value = value * synonym.unit_ms if synonym.unit_ms != 1 else value
                return max(value, -1) if self.negative_is_forever else value
        return self.default


def _topic(name: str, type_: Any, default: Any, doc: str, *, broker: str | None = None,
           check: Check | None = None, broker_doc: str | None = None,
           broker_dynamic: bool = True, int32: bool = False, in_log: bool = True,
           also: tuple[BrokerSynonym, ...] = (),
           negative_is_forever: bool = False) -> TopicConfig:
    """A topic config whose default is its broker synonym's (``broker``), else its own."""
    if broker is None:
        return TopicConfig(name, type_, doc, check, (), default, int32, in_log)
    first = BrokerSynonym(broker, default, broker_doc or doc, check, broker_dynamic,
                          int32=int32)
    return TopicConfig(name, type_, doc, check, (first, *also), None, int32, in_log,
                       negative_is_forever)


def _gzip_level(v: int) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "[1,...,9] or -1"


_TIERED = ("; no effect: this broker has no tiered storage (Kafka's with "
           "remote.log.storage.system.enable=false)")

# Sorted by name, as DescribeConfigs lists them.
TOPIC_CONFIGS: tuple[TopicConfig, ...] = (
    _topic("cleanup.policy", list[str], ["delete"], "delete and/or compact.",
           broker="log.cleanup.policy", check=all_of("delete", "compact")),
    _topic("compression.gzip.level", int, -1, "The gzip level of batches this broker "
           "compresses (compression.type gzip): 1 to 9, or -1 for zlib's default.",
           broker="compression.gzip.level", check=_gzip_level, int32=True),
    _topic("compression.lz4.level", int, 9, "The lz4 level of batches this broker "
           "compresses (compression.type lz4).", broker="compression.lz4.level",
           check=between(1, 17), int32=True),
    _topic("compression.type", str, "producer", "Compression of stored batches.",
           broker="compression.type",
           check=one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    _topic("compression.zstd.level", int, 3, "The zstd level of batches this broker "
           "compresses (compression.type zstd).", broker="compression.zstd.level",
           check=between(-131072, 22), int32=True),
    _topic("delete.retention.ms", int, 86400000, "How long tombstones are kept.",
           broker="log.cleaner.delete.retention.ms", check=at_least(0)),
    _topic("file.delete.delay.ms", int, 60000, "Delay before a deleted segment's files go.",
           broker="log.segment.delete.delay.ms", check=at_least(0)),
    _topic("flush.messages", int, LONG_MAX, "Messages appended before an fsync.",
           broker="log.flush.interval.messages", check=at_least(1)),
    _topic("flush.ms", int, None, "Time between fsyncs of a partition.",
           broker="log.flush.interval.ms", check=at_least(0),
           also=(BrokerSynonym("log.flush.scheduler.interval.ms", LONG_MAX,
                               "How often flush.ms is checked.", at_least(1), dynamic=False,
                               grouped=False),)),
    _topic("follower.replication.throttled.replicas", list[str], [],
           "A list of replicas for which log replication should be throttled on the "
           "follower side. The list should describe a set of replicas in the form "
           "[PartitionId]:[BrokerId],[PartitionId]:[BrokerId]:... or alternatively the "
           "wildcard '*' can be used to throttle all replicas for this topic.",
           in_log=False),
    _topic("index.interval.bytes", int, 4096, "Bytes between offset index entries.",
           broker="log.index.interval.bytes", check=int_at_least(0), int32=True),
    _topic("leader.replication.throttled.replicas", list[str], [],
           "A list of replicas for which log replication should be throttled on the "
           "leader side. The list should describe a set of replicas in the form "
           "[PartitionId]:[BrokerId],[PartitionId]:[BrokerId]:... or alternatively the "
           "wildcard '*' can be used to throttle all replicas for this topic.",
           in_log=False),
    _topic("local.retention.bytes", int, -2, "Bytes of a tiered topic's partition kept "
           "on local disk; -2 is retention.bytes" + _TIERED + ".",
           broker="log.local.retention.bytes", check=at_least(-2), in_log=False),
    _topic("local.retention.ms", int, -2, "Time a tiered topic's segment is kept on "
           "local disk; -2 is retention.ms" + _TIERED + ".",
           broker="log.local.retention.ms", check=at_least(-2), in_log=False),
    _topic("max.compaction.lag.ms", int, LONG_MAX, "Maximum age of a record before it is "
           "eligible for compaction whatever the dirty ratio.",
           broker="log.cleaner.max.compaction.lag.ms", check=at_least(1)),
    _topic("max.message.bytes", int, 1048588, "Largest record batch a topic accepts.",
           broker="message.max.bytes", check=int_at_least(0), int32=True,
           broker_doc="Largest record batch a topic accepts (default for "
           "max.message.bytes)."),
    _topic("message.timestamp.after.max.ms", int, 3600000, "How far past the broker's "
           "clock a CreateTime record's timestamp may be; later ones are refused "
           "(INVALID_TIMESTAMP).", broker="log.message.timestamp.after.max.ms",
           check=at_least(0)),
    _topic("message.timestamp.before.max.ms", int, LONG_MAX, "How far before the "
           "broker's clock a CreateTime record's timestamp may be; earlier ones are "
           "refused (INVALID_TIMESTAMP).", broker="log.message.timestamp.before.max.ms",
           check=at_least(0)),
    _topic("message.timestamp.type", str, "CreateTime",
           "Timestamps from the producer or the broker.",
           broker="log.message.timestamp.type", check=one_of("CreateTime", "LogAppendTime")),
    _topic("min.cleanable.dirty.ratio", float, 0.5, "Dirty ratio that triggers compaction.",
           broker="log.cleaner.min.cleanable.ratio", check=between(0, 1)),
    _topic("min.compaction.lag.ms", int, 0, "Minimum age before compaction.",
           broker="log.cleaner.min.compaction.lag.ms", check=at_least(0)),
    _topic("min.insync.replicas", int, 1, "ISR size below which acks=all produce fails.",
           broker="min.insync.replicas", check=int_at_least(1), int32=True),
    _topic("preallocate", bool, False, "Reserve a new segment's disk blocks, "
           "segment.bytes of them, when it is created (fallocate, keeping the file's size; "
           "without it a few MB are reserved ahead of the writes).",
           broker="log.preallocate"),
    _topic("remote.log.copy.disable", bool, False, "Stop copying a tiered topic's "
           "segments to remote storage" + _TIERED + ".", in_log=False),
    _topic("remote.log.delete.on.disable", bool, False, "Delete a tiered topic's remote "
           "segments when tiering is turned off" + _TIERED + ".", in_log=False),
    _topic("remote.storage.enable", bool, False, "Tier the topic's segments to remote "
           "storage; true is refused (INVALID_CONFIG), as by a Kafka broker without "
           "tiered storage.", in_log=False),
    _topic("retention.bytes", int, -1, "Size a partition may keep; -1 is unlimited.",
           broker="log.retention.bytes", check=at_least(-1)),
    _topic("retention.ms", int, None, "Time to keep a segment; -1 keeps forever.",
           broker="log.retention.ms",
           broker_doc="Overrides log.retention.minutes; -1 keeps forever.",
           check=at_least(-1), negative_is_forever=True,
           also=(BrokerSynonym("log.retention.minutes", None, "Overrides log.retention.hours.",
                               int_at_least(-1), dynamic=False, unit_ms=MINUTE_MS, int32=True),
                 BrokerSynonym("log.retention.hours", 168,
                               "Time to keep a segment; -1 keeps forever.", int_at_least(-1),
                               dynamic=False, unit_ms=HOUR_MS, int32=True))),
    _topic("segment.bytes", int, 1073741824, "Size at which a segment rolls; at least 1 MiB "
           "(Kafka 4, KIP-1030; tests use the topic config internal.segment.bytes).",
           broker="log.segment.bytes", check=int_at_least(MIN_SEGMENT_BYTES), int32=True),
    _topic("segment.index.bytes", int, 10485760, "Size of an offset index; full rolls.",
           broker="log.index.size.max.bytes", check=int_at_least(4), int32=True),
    _topic("segment.jitter.ms", int, None, "The most random jitter subtracted from a "
           "segment's segment.ms age limit (drawn per segment), so partitions created "
           "together do not all roll at once.", broker="log.roll.jitter.ms",
           broker_doc="The most random jitter subtracted from a segment's age limit; "
           "overrides log.roll.jitter.hours.", check=at_least(0),
           also=(BrokerSynonym("log.roll.jitter.hours", 0, "The most random jitter "
                               "subtracted from a segment's age limit, in hours.",
                               int_at_least(0), dynamic=False, unit_ms=HOUR_MS,
                               int32=True),)),
    _topic("segment.ms", int, None, "Age at which a segment rolls.", broker="log.roll.ms",
           broker_doc="Age at which a segment rolls; overrides log.roll.hours.", check=at_least(1),
           also=(BrokerSynonym("log.roll.hours", 168, "Age at which a segment rolls.",
                               int_at_least(1), dynamic=False, unit_ms=HOUR_MS,
                               int32=True),)),
    _topic("unclean.leader.election.enable", bool, False,
           "When no in-sync replica is live, the controller makes the first live replica "
           "leader, with an ISR of itself alone (records may be lost). Topic default.",
           broker="unclean.leader.election.enable"),
)


@cache
def topic_configs() -> Mapping[str, TopicConfig]:
    return {tc.name: tc for tc in TOPIC_CONFIGS}


def broker_synonyms(name: str) -> tuple[str, ...]:
    """Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the broker keys that set what
    ``name`` sets, most precedent first (``name`` alone for most keys)."""
    for tc in TOPIC_CONFIGS:
        for i, synonym in enumerate(tc.synonyms):
            if synonym.name == name:
                return tuple(s.name for s in tc.synonyms) if i == 0 or synonym.grouped \
                    else (name,)
    return (name,)
