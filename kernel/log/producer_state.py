"""Per-partition producer state (Kafka's ProducerStateManager, ProducerStateEntry and
ProducerAppendInfo), for idempotent and transactional producers.

For each producer id that wrote to the partition it keeps the epoch and the metadata of
the last :data:`NUM_BATCHES_TO_RETAIN` batches. A leader append is checked batch by
batch from the batch headers alone (no record is read): a retried batch whose epoch and
sequence range match one of those is a duplicate and is acknowledged with the original
offsets; an older epoch is INVALID_PRODUCER_EPOCH; a sequence that does not continue the
last one is OUT_OF_ORDER_SEQUENCE_NUMBER. Batches without a producer id (-1) cost
nothing.

The state is snapshotted to ``<offset>.snapshot`` files in Kafka's format (version 1:
one entry per producer, its last batch) at each segment roll and on close; opening a
log loads the latest snapshot at or below the log end offset and replays the batch
headers after it. Producers idle past ``producer.id.expiration.ms`` are dropped.

Transactions: a producer's first transactional batch opens its transaction at the
batch's first offset (the ongoing transactions); a non-transactional batch while one is
open is INVALID_TXN_STATE; a marker (a control batch, written by the coordinator or
replicated) ends it, fenced by the producer epoch (INVALID_PRODUCER_EPOCH) and the
coordinator epoch (TRANSACTION_COORDINATOR_FENCED). A completed transaction stays
unstable until the high watermark passes its marker (Kafka's unreplicatedTxns): the
first unstable offset is the lowest first offset of both, and holds back the log's last
stable offset. A marker with no transaction open only updates the producer's epochs.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import crc32c as _crc32c

from kernel.log.validator import AppendOrigin
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import (
    BatchHeader,
    ControlRecordType,
    iter_records,
    parse_control_record,
)

NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

# Kafka's snapshot file (ProducerStateManager.PID_SNAPSHOT_MAP_SCHEMA, version 1):
# version int16, crc uint32 (CRC-32C of everything after it), then an array (int32
# count) of entries: producer id int64, epoch int16, last sequence int32, last offset
# int64, offset delta int32, timestamp int64, coordinator epoch int32, current
# transaction first offset int64 (-1: none).
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hI")
_INT32 = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")


def snapshot_file(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """The offsets of the snapshot files in ``directory``, ascending."""
    offsets: list[int] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return offsets
    for entry in entries:
        name = entry.name
        if name.endswith(SNAPSHOT_SUFFIX):
            stem = name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                offsets.append(int(stem))
    offsets.sort()
    return offsets


def _add_seq(sequence: int, increment: int) -> int:
    """Sequences wrap at Int32.MAX_VALUE to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


class EndTxnMarker(NamedTuple):
    """The content of a marker's control record."""

    kind: ControlRecordType
    coordinator_epoch: int


def read_end_txn_marker(batch: bytes | bytearray | memoryview) -> EndTxnMarker | None:
    """The marker a control batch carries (its first record), None for another kind of
    control record. Raises KafkaError(CORRUPT_MESSAGE) for an unreadable one."""
    for record in iter_records(batch):
        try:
            kind, coordinator_epoch = parse_control_record(record)
        except ValueError:  # not ABORT/COMMIT
            return None
        return EndTxnMarker(kind, coordinator_epoch)
    return None


class CompletedTxn(NamedTuple):
    """A non-empty transaction a marker ended (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class BatchMetadata(NamedTuple):
    """One appended batch of a producer (Kafka's BatchMetadata); a tuple, as one is
    made per idempotent batch appended."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        # Kafka's DefaultRecordBatch.decrementSequence
        if self.last_seq < self.offset_delta:
            return INT32_MAX - (self.offset_delta - self.last_seq) + 1
        return self.last_seq - self.offset_delta

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """One producer's state in one partition (Kafka's ProducerStateEntry)."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        if epoch != self.producer_epoch:  # a new epoch starts a new sequence history
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None


class ProducerAppendInfo:
    """The checks and the pending update of one producer over one append (Kafka's
    ProducerAppendInfo): applied to the state only once the append is written."""

    __slots__ = ("completed", "current", "origin", "producer_id", "started",
                 "topic_partition", "updated")

    def __init__(self, topic_partition: str, producer_id: int,
                 current: ProducerStateEntry | None, origin: AppendOrigin) -> None:
        self.topic_partition = topic_partition
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        # Kafka's withProducerId: the update keeps the epoch with no batches, so the
        # checks see this append's own batches first.
        self.updated = ProducerStateEntry(producer_id) if current is None else \
            ProducerStateEntry(producer_id, current.producer_epoch,
                               last_timestamp=current.last_timestamp,
                               coordinator_epoch=current.coordinator_epoch,
                               current_txn_first_offset=current.current_txn_first_offset)
        # Tuples, rarely grown: an idempotent append allocates nothing for them.
        self.started: tuple[int, ...] = ()  # first offsets of the transactions it opens
        self.completed: tuple[CompletedTxn, ...] = ()

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.updated.producer_epoch:
            message = (
                f"Epoch of producer {self.producer_id} at offset {offset} in "
                f"{self.topic_partition} is {epoch}, which is smaller than the last seen "
                f"epoch {self.updated.producer_epoch}"
            )
            if self.origin is not AppendOrigin.REPLICATION:
                raise KafkaError(ErrorCode.invalid_producer_epoch, message)

    def append(self, header: BatchHeader) -> None:
        """Check one data batch (offsets assigned) and record it. Raises KafkaError:
        INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE."""
        epoch = header.producer_epoch
        first_seq = header.base_sequence
        offset = header.base_offset
        updated = self.updated
        self._check_epoch(epoch, offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, offset)
        delta = header.last_offset_delta
        last_offset = offset + delta
        updated.add_batch(epoch, _add_seq(first_seq, delta), last_offset, delta,
                          header.max_timestamp)
        # As Kafka's appendDataBatch; a replica (or a log being loaded) takes what the
        # leader wrote.
        if updated.current_txn_first_offset >= 0:
            if not header.is_transactional and self.origin is not AppendOrigin.REPLICATION:
                raise KafkaError(
                    ErrorCode.invalid_txn_state,
                    f"Expected transactional write from producer {self.producer_id} at "
                    f"offset {offset} in partition {self.topic_partition}",
                )
        elif header.is_transactional:
            updated.current_txn_first_offset = offset
            self.started += (offset,)

    def append_marker(self, header: BatchHeader, marker: EndTxnMarker) -> None:
        """Check one marker (Kafka's appendEndTxnMarker) and end the producer's
        transaction. Raises KafkaError: INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED."""
        offset = header.base_offset
        updated = self.updated
        self._check_epoch(header.producer_epoch, offset)
        if (updated.coordinator_epoch > marker.coordinator_epoch
                and self.origin is not AppendOrigin.REPLICATION):
            raise KafkaError(
                ErrorCode.transaction_coordinator_fenced,
                f"Invalid coordinator epoch for producerId {self.producer_id} at offset "
                f"{offset} in partition {self.topic_partition}: "
                f"{marker.coordinator_epoch} (zombie), {updated.coordinator_epoch} (current)",
            )
        # Only a non-empty transaction is completed: an empty one changes neither the
        # last stable offset nor the transaction index.
        if updated.current_txn_first_offset >= 0:
            self.completed += (CompletedTxn(
                self.producer_id, updated.current_txn_first_offset, offset,
                marker.kind is ControlRecordType.ABORT),)
        if header.producer_epoch != updated.producer_epoch:
            updated.batches.clear()
            updated.producer_epoch = header.producer_epoch
        updated.coordinator_epoch = marker.coordinator_epoch
        updated.current_txn_first_offset = -1
        updated.last_timestamp = header.max_timestamp

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        updated = self.updated
        current = self.current
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"Invalid sequence number for new epoch of producer {self.producer_id} "
                    f"at offset {offset} in partition {self.topic_partition}: {epoch} "
                    f"(request epoch), {first_seq} (seq. number), "
                    f"{updated.producer_epoch} (current producer epoch)",
                )
            return
        if updated.batches:
            last_seq = updated.last_seq
        elif current is not None and epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # With no epoch known (the producer's records are gone, or it is new here) any
        # sequence is accepted, as Kafka does since KIP-360.
        current_epoch = current.producer_epoch if current is not None else NO_PRODUCER_EPOCH
        if current_epoch != NO_PRODUCER_EPOCH and not (
            first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT32_MAX)
        ):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"Out of order sequence number for producer {self.producer_id} at offset "
                f"{offset} in partition {self.topic_partition}: {first_seq} (incoming seq. "
                f"number), {last_seq} (current end sequence number)",
            )

    def apply(self, producers: dict[int, ProducerStateEntry]) -> None:
        """Make the append's update the producer's state: the earlier batches of its
        epoch followed by this append's (Kafka's ProducerStateEntry.update)."""
        updated = self.updated
        current = self.current
        if current is None or current.producer_epoch != updated.producer_epoch:
            producers[self.producer_id] = updated
            return
        current.batches.extend(updated.batches)
        current.last_timestamp = updated.last_timestamp
        current.coordinator_epoch = updated.coordinator_epoch
        current.current_txn_first_offset = updated.current_txn_first_offset


class ProducerStateManager:
    """The producers of one partition: checks appends, snapshots, expiry. Owned by the
    partition's :class:`kernel.log.log.Log`, used on the event loop."""

    def __init__(self, directory: Path, topic_partition: str,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.dir = directory
        self.topic_partition = topic_partition
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # The offset up to which the state reflects the log (exclusive).
        self.map_end_offset = 0
        # Open transactions, first offset -> producer id, in offset order (appends come
        # in offset order; a snapshot's are sorted when loaded).
        self.ongoing_txns: dict[int, int] = {}
        # Completed transactions whose marker the high watermark has not passed yet,
        # first offset -> marker offset (Kafka's unreplicatedTxns).
        self.unreplicated_txns: dict[int, int] = {}
        # Producers being verified with the transaction coordinator before their first
        # transactional batch here (Kafka's VerificationGuard): a marker or the start of
        # the transaction drops the guard, so a batch verified before an abort but
        # arriving after its marker is refused instead of opening a hanging transaction.
        self.verification_guards: dict[int, object] = {}

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # -- transaction verification (KIP-890 part 1) ----------------------------------

    def needs_verification(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether a transactional batch of this producer would open a transaction
        here (only then is the coordinator asked: later batches cost one dict lookup)."""
        entry = self.producers.get(producer_id)
        return entry is None or entry.producer_epoch != producer_epoch \
            or entry.current_txn_first_offset < 0

    def start_verification(self, producer_id: int) -> object:
        guard = self.verification_guards.get(producer_id)
        if guard is None:
            guard = self.verification_guards[producer_id] = object()
        return guard

    def is_verified(self, producer_id: int, guard: object) -> bool:
        """The guard is still the producer's: no marker came since it was taken."""
        return self.verification_guards.get(producer_id) is guard

    # -- appends ------------------------------------------------------------------

    def prepare_append(
        self, batches: Sequence[BatchHeader], origin: AppendOrigin,
        markers: Mapping[int, EndTxnMarker] | None = None,
    ) -> tuple[BatchMetadata | None, dict[int, ProducerAppendInfo] | None]:
        """Check the batches of one append, in order; ``markers`` holds the content of
        its control batches by base offset. Returns (the original batch of a client's
        retried batch, None), or (None, the updates to apply once written), or (None,
        None) when no batch has a producer id. Raises KafkaError (INVALID_PRODUCER_EPOCH,
        OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE, TRANSACTION_COORDINATOR_FENCED);
        nothing changes then."""
        updates: dict[int, ProducerAppendInfo] | None = None
        producers = self.producers
        for header in batches:
            pid = header.producer_id
            if pid < 0:
                continue
            if header.is_control:
                marker = markers.get(header.base_offset) if markers else None
                if marker is None:
                    continue
                if updates is None:
                    updates = {}
                info = updates.get(pid)
                if info is None:
                    info = updates[pid] = ProducerAppendInfo(
                        self.topic_partition, pid, producers.get(pid), origin)
                info.append_marker(header, marker)
                # Any marker ends the verification (even of a transaction that wrote
                # nothing here): a batch verified before it must verify again.
                self.verification_guards.pop(pid, None)
                continue
            if updates is None:
                updates = {}
            info = updates.get(pid)
            if info is None:
                current = producers.get(pid)
                if origin is AppendOrigin.CLIENT and current is not None:
                    last_seq = _add_seq(header.base_sequence, header.last_offset_delta)
                    duplicate = current.find_duplicate(
                        header.producer_epoch, header.base_sequence, last_seq)
                    if duplicate is not None:
                        return duplicate, None
                info = updates[pid] = ProducerAppendInfo(
                    self.topic_partition, pid, current, origin)
            info.append(header)
        return None, updates

    def complete_append(self, updates: dict[int, ProducerAppendInfo] | None,
                        next_offset: int,
                        on_aborted: Callable[[CompletedTxn, int], None] | None = None) -> None:
        """Apply what :meth:`prepare_append` checked, once the batches are written.
        ``on_aborted`` hears each aborted transaction with the last stable offset at its
        marker (the transaction index entry), before it is marked complete."""
        if updates:
            completed: tuple[CompletedTxn, ...] = ()
            for info in updates.values():
                info.apply(self.producers)
                if info.started and self.verification_guards:
                    self.verification_guards.pop(info.producer_id, None)
                for first in info.started:
                    self.ongoing_txns[first] = info.producer_id
                if info.completed:
                    completed += info.completed
            if completed:
                for txn in sorted(completed, key=lambda txn: txn.last_offset):
                    if txn.is_aborted and on_aborted is not None:
                        on_aborted(txn, self.last_stable_offset_after(txn))
                    self.ongoing_txns.pop(txn.first_offset, None)
                    self.unreplicated_txns[txn.first_offset] = txn.last_offset
        self.map_end_offset = next_offset

    def replay(self, batches: Iterable[tuple[BatchHeader, EndTxnMarker | None]],
               on_aborted: Callable[[CompletedTxn, int], None] | None = None) -> None:
        """Rebuild from batches already in the log (loading, truncation): no checks."""
        for header, marker in batches:
            markers = {header.base_offset: marker} if marker is not None else None
            _, updates = self.prepare_append((header,), AppendOrigin.REPLICATION, markers)
            self.complete_append(updates, header.next_offset, on_aborted)

    # -- transactions -------------------------------------------------------------

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """Where the log is stable once ``txn`` completes: the first offset of the
        oldest other open transaction, else past the marker (Kafka's lastStableOffset
        of a CompletedTxn)."""
        for first, pid in self.ongoing_txns.items():
            if pid != txn.producer_id:
                return first
        return txn.last_offset + 1

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is open, or complete with its
        marker not yet below the high watermark; None when there is none."""
        first = next(iter(self.ongoing_txns), None)
        if self.unreplicated_txns:
            unreplicated = min(self.unreplicated_txns)
            if first is None or unreplicated < first:
                return unreplicated
        return first

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below ``high_watermark`` are stable."""
        if self.unreplicated_txns:
            self.unreplicated_txns = {
                first: last for first, last in self.unreplicated_txns.items()
                if last >= high_watermark
            }

    def _clear_txns(self) -> None:
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()

    # -- expiry -------------------------------------------------------------------

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop the producers idle for ``producer.id.expiration.ms`` or more (by the
        timestamp of their last batch, as Kafka does). Returns how many went."""
        limit = self.producer_id_expiration_ms
        expired = [
            pid for pid, entry in self.producers.items()
            if entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= limit
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- snapshots ----------------------------------------------------------------

    def take_snapshot(self, offset: int | None = None, sync: bool = True) -> Path | None:
        """Write the state at ``offset`` (default the map end offset) to
        ``<offset>.snapshot``; nothing if that snapshot exists already."""
        at = self.map_end_offset if offset is None else offset
        path = snapshot_file(self.dir, at)
        if path.exists():
            return None
        body = bytearray(_INT32.pack(len(self.producers)))
        for entry in self.producers.values():
            last = entry.batches[-1] if entry.batches else None
            body += _ENTRY.pack(
                entry.producer_id, entry.producer_epoch,
                last.last_seq if last else NO_SEQUENCE,
                last.last_offset if last else -1,
                last.offset_delta if last else 0,
                entry.last_timestamp, entry.coordinator_epoch,
                entry.current_txn_first_offset,
            )
        data = _SNAPSHOT_HEAD.pack(_SNAPSHOT_VERSION, _crc32c.crc32c(body)) + body
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        return path

    def sync_snapshots(self, after: int, up_to: int) -> None:
        """fsync the snapshots at offsets in (after, up_to]: those a roll wrote unsynced
        on the event loop, now that a flush moves the recovery point past them (Kafka's
        flushProducerStateSnapshot). A snapshot deleted meanwhile needs no sync."""
        for offset in list_snapshots(self.dir):
            if after < offset <= up_to:
                try:
                    fd = os.open(snapshot_file(self.dir, offset), os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    @staticmethod
    def read_snapshot(path: Path) -> list[ProducerStateEntry]:
        """Raises ValueError for a file that is not a valid snapshot."""
        data = path.read_bytes()
        if len(data) < _SNAPSHOT_HEAD.size + _INT32.size:
            raise ValueError(f"snapshot {path.name} is truncated ({len(data)} bytes)")
        version, crc = _SNAPSHOT_HEAD.unpack_from(data)
        if version != _SNAPSHOT_VERSION:
            raise ValueError(f"snapshot {path.name} has unknown version {version}")
        body = memoryview(data)[_SNAPSHOT_HEAD.size:]
        if _crc32c.crc32c(body) != crc:
            raise ValueError(f"snapshot {path.name} is corrupt (crc)")
        count = _INT32.unpack_from(body)[0]
        if count < 0 or _INT32.size + count * _ENTRY.size != len(body):
            raise ValueError(f"snapshot {path.name} has {count} entries in {len(body)} bytes")
        entries: list[ProducerStateEntry] = []
        for pid, epoch, last_seq, last_offset, delta, ts, coordinator_epoch, txn_first \
                in _ENTRY.iter_unpack(body[_INT32.size:]):
            entry = ProducerStateEntry(pid, epoch, last_timestamp=ts,
                                       coordinator_epoch=coordinator_epoch,
                                       current_txn_first_offset=txn_first)
            if last_offset >= 0:
                entry.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
            entries.append(entry)
        return entries

    def load_latest_snapshot(self, up_to: int, now_ms: int) -> int | None:
        """Delete the snapshots above ``up_to`` and load the newest valid one left (a
        corrupt one is deleted and the next older tried), without the producers
        expired by ``now_ms``; their open transactions are open again. Returns its
        offset, None when there is none."""
        self.producers.clear()
        self._clear_txns()
        for offset in list_snapshots(self.dir):
            if offset > up_to:
                snapshot_file(self.dir, offset).unlink(missing_ok=True)
        for offset in reversed(list_snapshots(self.dir)):
            path = snapshot_file(self.dir, offset)
            try:
                entries = self.read_snapshot(path)
            except (ValueError, OSError):
                path.unlink(missing_ok=True)
                continue
            limit = self.producer_id_expiration_ms
            for entry in entries:
                if entry.current_txn_first_offset >= 0 or now_ms - entry.last_timestamp < limit:
                    self.producers[entry.producer_id] = entry
            self.ongoing_txns = {
                entry.current_txn_first_offset: entry.producer_id
                for entry in sorted(self.producers.values(),
                                    key=lambda e: e.current_txn_first_offset)
                if entry.current_txn_first_offset >= 0
            }
            self.map_end_offset = offset
            return offset
        return None

    def truncate_snapshots_after(self, offset: int) -> None:
        for at in list_snapshots(self.dir):
            if at > offset:
                snapshot_file(self.dir, at).unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        """Snapshots of deleted segments go with them; the one at ``offset`` stays."""
        for at in list_snapshots(self.dir):
            if at < offset:
                snapshot_file(self.dir, at).unlink(missing_ok=True)

    def clear(self, offset: int) -> None:
        self.producers.clear()
        self._clear_txns()
        self.map_end_offset = offset
        self.delete_snapshots_before(2**63 - 1)


__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CompletedTxn",
    "EndTxnMarker",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "list_snapshots",
    "snapshot_file",
]
