"""An in-memory :class:`~kernel.coordination.partition_writer.PartitionWriter`: the
coordination runtime (and a plugin's coordinator built on it) tested without a broker.

Each partition is a list of record batches in memory. The test plays the replica
manager: it makes a partition's replica leader or follower (leadership events go out
as the kernel's do), decides when appended records are committed (:meth:`commit`, or
``auto_commit`` for an ISR of one), and can refuse the next append with an error.
Offsets are assigned by rewriting each batch's base offset, as the log does; nothing
else of a batch is checked. Runs on the event loop of whoever calls it.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kernel.protocol.errors import KafkaError
from kernel.replica.leadership import LeadershipChange, LeadershipListener, Role

__all__ = ["InMemoryPartitionWriter"]

TopicPartition = tuple[str, int]

# Record batch v2: base offset (int64), batch length (int32, counts from byte 12), and
# the last offset delta (int32) at byte 23.
_BASE_OFFSET = struct.Struct(">q")
_LENGTH_AT = 8
_LAST_OFFSET_DELTA_AT = 23
_LOG_OVERHEAD = 12


class _Wait:
    __slots__ = ("_on_done", "_timeout", "is_completed", "offset", "partition")

    def __init__(self, partition: _Partition, offset: int,
                 on_done: Callable[[bool], None]) -> None:
        self.partition = partition
        self.offset = offset
        self._on_done = on_done
        self._timeout: asyncio.TimerHandle | None = None
        self.is_completed = False

    def force_complete(self) -> bool:
        if self.is_completed:
            return False
        self.is_completed = True
        if self._timeout is not None:
            self._timeout.cancel()
        if self in self.partition.waits:
            self.partition.waits.remove(self)
        self._on_done(self.partition.high_watermark >= self.offset)
        return True


@dataclass
class _Partition:
    role: Role = Role.FOLLOWER
    leader_epoch: int = -1
    # (base offset, last offset, bytes) in offset order.
    batches: list[tuple[int, int, bytes]] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0
    waits: list[_Wait] = field(default_factory=list)


class InMemoryPartitionWriter:
    """:param auto_commit: the high watermark follows every append (an ISR of one);
    else it moves only when the test calls :meth:`commit`."""

    def __init__(self, *, auto_commit: bool = True) -> None:
        self.auto_commit = auto_commit
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._listeners: list[LeadershipListener] = []
        self._refuse_next: KafkaError | None = None

    # -- what the test does ------------------------------------------------------------

    def become_leader(self, tp: TopicPartition, leader_epoch: int) -> None:
        self._set_role(tp, Role.LEADER, leader_epoch)

    def become_follower(self, tp: TopicPartition, leader_epoch: int) -> None:
        self._set_role(tp, Role.FOLLOWER, leader_epoch)

    def delete(self, tp: TopicPartition) -> None:
        # As the replica manager: the event goes out while waits are still pending.
        partition = self._partitions.pop(tp)
        self._publish(LeadershipChange(tp[0], tp[1], Role.DELETED, -1))
        for wait in list(partition.waits):
            wait.force_complete()

    def commit(self, tp: TopicPartition, offset: int | None = None) -> None:
        """Move the high watermark to ``offset`` (default: the log end offset)."""
        partition = self._partitions[tp]
        target = partition.log_end_offset if offset is None else offset
        if target <= partition.high_watermark:
            return
        partition.high_watermark = min(target, partition.log_end_offset)
        for wait in list(partition.waits):
            if wait.offset <= partition.high_watermark:
                wait.force_complete()

    def refuse_next_append(self, error: KafkaError) -> None:
        self._refuse_next = error

    def records(self, tp: TopicPartition) -> bytes:
        """Every batch of the partition's log, as the log would return them."""
        return b"".join(data for _, _, data in self._partitions[tp].batches)

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    def _set_role(self, tp: TopicPartition, role: Role, leader_epoch: int) -> None:
        partition = self._partitions.setdefault(tp, _Partition())
        partition.role = role
        partition.leader_epoch = leader_epoch
        self._publish(LeadershipChange(tp[0], tp[1], role, leader_epoch))

    def _publish(self, change: LeadershipChange) -> None:
        for listener in list(self._listeners):
            listener(change)

    # -- PartitionWriter ---------------------------------------------------------------

    def _partition(self, tp: TopicPartition) -> _Partition:
        partition = self._partitions.get(tp)
        if partition is None:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{tp} is not hosted here")
        return partition

    def append(self, tp: TopicPartition, records: bytes) -> int:
        partition = self._partition(tp)
        if partition.role is not Role.LEADER:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{tp} is not led here")
        refused, self._refuse_next = self._refuse_next, None
        if refused is not None:
            raise refused
        data = bytearray(records)
        position = 0
        while position < len(data):
            size = _LOG_OVERHEAD + int.from_bytes(
                data[position + _LENGTH_AT:position + _LOG_OVERHEAD], "big")
            base = partition.log_end_offset
            _BASE_OFFSET.pack_into(data, position, base)
            delta = int.from_bytes(
                data[position + _LAST_OFFSET_DELTA_AT:position + _LAST_OFFSET_DELTA_AT + 4],
                "big")
            partition.batches.append((base, base + delta, bytes(data[position:position + size])))
            partition.log_end_offset = base + delta + 1
            position += size
        if self.auto_commit:
            self.commit(tp)
        return partition.log_end_offset

    def high_watermark(self, tp: TopicPartition) -> int:
        return self._partition(tp).high_watermark

    def wait_until_committed(self, tp: TopicPartition, offset: int, timeout_ms: int,
                             on_done: Callable[[bool], None]) -> _Wait:
        partition = self._partition(tp)
        wait = _Wait(partition, offset, on_done)
        if partition.high_watermark >= offset:
            wait.force_complete()
            return wait
        partition.waits.append(wait)
        wait._timeout = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, wait.force_complete)
        return wait

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self._listeners.append(listener)
        for (topic, index), partition in list(self._partitions.items()):
            listener(LeadershipChange(topic, index, partition.role, partition.leader_epoch))

    def remove_leadership_listener(self, listener: LeadershipListener) -> None:
        self._listeners.remove(listener)

    def log_start_offset(self, tp: TopicPartition) -> int:
        return self._partition(tp).log_start_offset

    def log_end_offset(self, tp: TopicPartition) -> int:
        return self._partition(tp).log_end_offset

    def read(self, tp: TopicPartition, offset: int, max_bytes: int) -> bytes:
        out: list[bytes] = []
        size = 0
        for _, last, data in self._partition(tp).batches:
            if last < offset:
                continue
            if out and size + len(data) > max_bytes:
                break
            out.append(data)
            size += len(data)
        return b"".join(out)
