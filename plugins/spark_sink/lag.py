"""An export's position: per partition of the topics it reads, the offset its checkpoint
has exported up to and the partition's high watermark here."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from kernel.api.services import PluginServices
from spark.options import ExportOptions

__all__ = ["PartitionLag", "export_lag", "exported_topics"]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    exported: int  # next offset to export: every record below it is in the table
    high_watermark: int

    @property
    def lag(self) -> int:
        return max(0, self.high_watermark - self.exported)


def exported_topics(options: ExportOptions,
                        topics: Mapping[str, object]) -> Iterator[str]:
    """The topics among ``topics`` the export reads: its list, or those its pattern
    matches whole (Java's ``Pattern.matches``, as Spark's subscribePattern), internal
    topics excluded as the Kafka consumer excludes them."""
    if options.topics:
        yield from (t for t in options.topics if t in topics)
        return
    pattern = re.compile(options.topic_pattern or "")
    yield from (t for t in topics if not t.startswith("__") and pattern.fullmatch(t))


def export_lag(options: ExportOptions, exported: Mapping[tuple[str, int], int],
               broker: PluginServices) -> list[PartitionLag]:
    """Each partition of the export's topics with a replica on this broker; the others
    have no high watermark here and are left to their brokers' own metrics."""
    image = broker.metadata.image
    out = []
    for topic in exported_topics(options, image.topics):
        for partition in sorted(image.topics[topic].partitions):
            replica = broker.partition(topic, partition)
            if replica is None:
                continue
            out.append(PartitionLag(topic, partition, exported.get((topic, partition), 0),
                                    replica.high_watermark))
    return out
