"""Where an offset lives and what a read returns: the small value types that the log's
readers (fetch, delayed fetch, ListOffsets) pass around (Kafka's LogOffsetMetadata,
FetchDataInfo and TimestampAndOffset)."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.log.file_records import FileRecords


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset with where it lives, so delayed fetches can count bytes available
    without touching files (Kafka's LogOffsetMetadata)."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1

    @property
    def message_offset_only(self) -> bool:
        return self.segment_base_offset < 0

    def on_same_segment(self, other: LogOffsetMetadata) -> bool:
        return (
            not self.message_offset_only
            and self.segment_base_offset == other.segment_base_offset
        )

    def on_older_segment(self, other: LogOffsetMetadata) -> bool:
        return self.segment_base_offset < other.segment_base_offset

    def position_diff(self, other: LogOffsetMetadata) -> int:
        """Bytes between two offsets of one segment."""
        return self.relative_position_in_segment - other.relative_position_in_segment


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Bytes read for a fetch: whole batches, or the start of the first batch when it
    alone is larger than the limit (``first_entry_incomplete``)."""

    fetch_offset_metadata: LogOffsetMetadata
    records: bytes | memoryview | FileRecords
    first_entry_incomplete: bool = False
    records_count: int = 0  # in the whole batches


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """ListOffsets answer: ``leader_epoch`` None when unknown."""

    timestamp: int
    offset: int
    leader_epoch: int | None
