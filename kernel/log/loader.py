"""Kafka's LogLoader: a partition directory as found at start-up, made consistent.

Temporary files of an interrupted deletion, cleaning or checkpoint go, and so do index
files without their segment. After a clean shutdown no segment data is read beyond the
active segment's tail after its last index entry; otherwise the segments from the
recovery point on are re-validated (framing, CRC, increasing offsets), their indexes
rebuilt and the log truncated at the first invalid batch, and the leader epochs of the
recovered batches assigned again. The checkpointed log start offset and the leader
epoch cache are then trimmed to the log's ends, and the producer state is rebuilt: the
latest ``.snapshot`` at or below the log end offset, then the batch headers after it
(:func:`rebuild_producer_state`), which also writes the recovered segments' aborted
transactions (``.txnindex``) again. Before a load, :func:`bytes_to_recover` tells the
log manager what an unclean log's recovery will re-read, and the loader reports the
bytes as it re-validates them (``on_recovered``), for the start-up's progress.
"""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernel.log.leader_epoch import LeaderEpochFileCache
from kernel.log.local_log import new_segment
from kernel.log.log_config import LogConfig
from kernel.log.producer_state import (
    CompletedTxn,
    EndTxnMarker,
    ProducerStateManager,
    read_end_txn_marker,
)
from kernel.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
)
from kernel.log.txn_index import AbortedTxn
from kernel.protocol.errors import KafkaError
from kernel.protocol.records import BatchHeader

_TEMP_SUFFIXES = (DELETED_SUFFIX, ".tmp")
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _offset_from_name(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def _segment_base(name: str) -> int | None:
    """The base offset of a segment's ``.log`` file name, None for any other file."""
    stem = name[: -len(LOG_SUFFIX)]
    return int(stem) if name.endswith(LOG_SUFFIX) and stem.isdigit() else None


@dataclass(frozen=True, slots=True)
class LoadedLogOffsets:
    """Where the loaded log stands (Kafka's LoadedLogOffsets)."""

    log_start_offset: int
    recovery_point: int
    log_end_offset: int


class LogLoader:
    """Loads one partition directory, which must exist; :meth:`load` once."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int,
        log_start_offset: int,
        had_clean_shutdown: bool,
        leader_epoch_cache: LeaderEpochFileCache,
        now_ms: int,
        producer_state: ProducerStateManager | None = None,
        on_recovered: Callable[[int], None] | None = None,
    ) -> None:
        self.dir = directory
        self.config = config
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.had_clean_shutdown = had_clean_shutdown
        self.leader_epoch_cache = leader_epoch_cache
        self.now_ms = now_ms
        self.producer_state = producer_state
        # told the bytes of segment data re-validated, a chunk at a time
        self.on_recovered = on_recovered

    def load(self) -> tuple[list[LogSegment], LoadedLogOffsets]:
        """The segments, oldest first (the last one active), and the offsets."""
        directory, config, now = self.dir, self.config, self.now_ms
        epochs = self.leader_epoch_cache
        log_start_offset = self.log_start_offset
        bases = self._remove_temp_files_and_collect_bases()
        segments = [
            LogSegment(
                directory, base, index_interval_bytes=config.index_interval_bytes,
                max_index_size=config.segment_index_bytes, created_ms=now,
                active=(i == len(bases) - 1),
                roll_jitter_ms=config.random_segment_jitter() if i == len(bases) - 1 else 0,
            )
            for i, base in enumerate(bases)
        ]
        txn_index_from: int | None = None
        if not self.had_clean_shutdown and segments:
            segments, txn_index_from = self._recover_segments(
                segments, self.recovery_point, epochs, self.on_recovered)
        if not segments:
            segments = [new_segment(directory, log_start_offset, config, now)]
        active = segments[-1]
        active.make_active()
        log_end_offset = active.read_next_offset()
        start = max(log_start_offset, segments[0].base_offset)
        if start > log_end_offset:
            # the checkpointed start is past the data (lost unflushed tail): start there
            for segment in segments:
                segment.delete()
            segments = [new_segment(directory, start, config, now)]
            log_end_offset = start
            epochs.clear()
        recovery = (
            log_end_offset if self.had_clean_shutdown
            else min(self.recovery_point, log_end_offset)
        )
        epochs.truncate_from_end(log_end_offset)
        epochs.truncate_from_start(start)
        if self.producer_state is not None:
            rebuild_producer_state(self.producer_state, segments, start, log_end_offset, now,
                                   txn_index_from)
        return segments, LoadedLogOffsets(start, recovery, log_end_offset)

    def _complete_interrupted_swaps(self) -> None:
        """Kafka's LogLoader on an interrupted cleaner swap: ``.cleaned`` files (an
        incomplete clean) go, and so do ``.swap`` files at or above the lowest of them
        (their swap had not finished being named). The other ``.swap`` files are
        complete and fsynced: the segment files they replace (base offsets in [first
        swap base, offset after the last swap batch)) go, and the suffix is dropped."""
        directory = self.dir
        cleaned: list[str] = []
        swaps: list[tuple[int, str]] = []
        min_cleaned: int | None = None
        for entry in os.scandir(directory):
            offset = _offset_from_name(entry.name)
            if offset is None:
                continue
            if entry.name.endswith(CLEANED_SUFFIX):
                cleaned.append(entry.path)
                min_cleaned = offset if min_cleaned is None else min(min_cleaned, offset)
            elif entry.name.endswith(SWAP_SUFFIX):
                swaps.append((offset, entry.path))
        for offset, path in swaps:
            if min_cleaned is not None and offset >= min_cleaned:
                os.unlink(path)
        swaps = [(o, p) for o, p in swaps if min_cleaned is None or o < min_cleaned]
        for path in cleaned:
            os.unlink(path)
        if not swaps:
            return
        low, high = None, None
        for offset, path in swaps:
            if not path.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                continue
            segment = LogSegment(
                directory, offset, index_interval_bytes=self.config.index_interval_bytes,
                max_index_size=self.config.segment_index_bytes, created_ms=self.now_ms,
                file_suffix=SWAP_SUFFIX,
            )
            next_offset = offset
            for _, header in segment.scan_headers():
                next_offset = header.last_offset + 1
            segment.close_files()
            low = offset if low is None else min(low, offset)
            high = next_offset if high is None else max(high, next_offset)
        if low is not None and high is not None:
            for entry in os.scandir(directory):
                offset = _offset_from_name(entry.name)
                if (offset is not None and low <= offset < high
                        and entry.name.endswith(_SEGMENT_SUFFIXES)):
                    os.unlink(entry.path)  # compacted away; its deletion was interrupted
        for _, path in swaps:
            os.replace(path, path[: -len(SWAP_SUFFIX)])

    def _remove_temp_files_and_collect_bases(self) -> list[int]:
        """Base offsets of the segments in the directory, sorted; temporary files and
        indexes without a segment are removed on the way, interrupted swaps completed."""
        directory = self.dir
        self._complete_interrupted_swaps()
        bases: list[int] = []
        for entry in os.scandir(directory):
            name = entry.name
            if name.endswith(_TEMP_SUFFIXES):
                os.unlink(entry.path)
            elif (base := _segment_base(name)) is not None:
                bases.append(base)
        bases.sort()
        known = {f"{b:020d}" for b in bases}
        for entry in os.scandir(directory):
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                if entry.name.endswith(suffix) and entry.name[: -len(suffix)] not in known:
                    os.unlink(entry.path)  # an index without its log is useless
        return bases

    @staticmethod
    def _recover_segments(
        segments: list[LogSegment], recovery_point: int, epochs: LeaderEpochFileCache,
        on_recovered: Callable[[int], None] | None = None,
    ) -> tuple[list[LogSegment], int]:
        """Recover the segments that may hold unflushed data: the one containing the
        recovery point and everything after. A truncated segment ends the log: the
        later segments hold garbage or data that never reached disk in order. Also
        returns the offset from which the transaction indexes were emptied (the first
        recovered segment's base: its index entries are rebuilt whole)."""

        def assign(header: BatchHeader) -> None:
            if header.partition_leader_epoch >= 0:
                epochs.assign(header.partition_leader_epoch, header.base_offset)

        first = _first_unflushed([s.base_offset for s in segments], recovery_point)
        segments[first].txn_index.reset()
        for i in range(first, len(segments)):
            start = recovery_point if i == first else None
            if segments[i].recover(assign, start_offset=start, on_progress=on_recovered) > 0:
                for later in segments[i + 1:]:
                    later.delete()
                return segments[: i + 1], segments[first].base_offset
        return segments, segments[first].base_offset


def _first_unflushed(bases: Sequence[int], recovery_point: int) -> int:
    """Index of the segment holding the recovery point: recovery starts there."""
    return max(0, bisect_right(bases, recovery_point) - 1)


def bytes_to_recover(directory: Path, recovery_point: int) -> int:
    """What recovering an unclean log re-reads: the sizes of its segment files from the
    one holding ``recovery_point``. At most that: the loader enters that segment at the
    recovery point's index entry when it can. Reads no data (one directory listing)."""
    sizes: dict[int, int] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            if (base := _segment_base(entry.name)) is not None:
                sizes[base] = entry.stat().st_size
    bases = sorted(sizes)
    return sum(sizes[base] for base in bases[_first_unflushed(bases, recovery_point):])


def rebuild_producer_state(
    state: ProducerStateManager, segments: Sequence[LogSegment], log_start_offset: int,
    log_end_offset: int, now_ms: int, txn_index_from: int | None = None,
) -> None:
    """Kafka's rebuildProducerState: the latest snapshot at or below the log end offset,
    then the batch headers from it to the log end (and each marker's control record).
    Without any snapshot (a log written before snapshots existed) only the last two
    segments are read, as Kafka does, so opening an old log does not read it all;
    producers older than that are unknown and their next batch is accepted whatever its
    sequence (KIP-360). With ``txn_index_from`` (recovery emptied the transaction
    indexes from there) the replay starts at or below it and writes the aborted
    transactions whose marker is at or after it to their segment's index again."""
    up_to = log_end_offset if txn_index_from is None else min(log_end_offset, txn_index_from)
    snapshot = state.load_latest_snapshot(up_to, now_ms)
    if snapshot is None:
        start = segments[-2].base_offset if len(segments) > 1 else segments[0].base_offset
        if txn_index_from is not None:
            start = min(start, txn_index_from)
        state.producers.clear()
    else:
        start = snapshot
    start = max(start, log_start_offset)
    on_aborted = None
    if txn_index_from is not None:
        bases = [s.base_offset for s in segments]

        def on_aborted(txn: CompletedTxn, last_stable_offset: int) -> None:
            if txn.last_offset >= txn_index_from:
                segment = segments[bisect_right(bases, txn.last_offset) - 1]
                segment.txn_index.append(AbortedTxn(
                    txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset))

    state.replay(batches_between(segments, start, log_end_offset), on_aborted)
    state.map_end_offset = log_end_offset


def batches_between(
    segments: Sequence[LogSegment], start: int, end: int
) -> Iterator[tuple[BatchHeader, EndTxnMarker | None]]:
    """The headers of the batches holding offsets in [start, end), records unread but
    a marker's (a control batch with a producer id)."""
    for i, segment in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
            continue
        position = 0
        if segment.base_offset < start:
            found = segment.translate_offset(start)
            if found is None:
                continue
            position = found[0]
        for at, header in segment.scan_headers(position):
            if header.base_offset >= end:
                return
            if header.base_offset + header.last_offset_delta >= start:
                marker = None
                if header.is_control and header.producer_id >= 0:
                    # an unreadable one was refused when appended; a replica's is
                    # skipped rather than stop the log loading
                    with contextlib.suppress(KafkaError):
                        marker = read_end_txn_marker(segment.read_batch(at, header))
                yield header, marker
