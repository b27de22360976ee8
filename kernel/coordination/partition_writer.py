"""What the coordination runtime needs of the partitions it writes, and the kernel's
implementation over the replica manager.

:class:`PartitionWriter` (declared in ``kernel.services``, so that the plugins' view of
the broker can hand one out) is Kafka's ``PartitionWriter`` (append, the high watermark,
waiting until an offset is committed) together with what its ``CoordinatorLoader``
reads to load a shard, and the leadership events that tell the runtime which
partitions to load and unload. The runtime sees nothing else of the broker, so its
unit tests run it over an in-memory writer (``kernel.testing.partition_writer``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kernel.log import AppendOrigin
from kernel.protocol.errors import KafkaError
from kernel.purgatory import DelayedOperation
from kernel.services import CommitWait, PartitionWriter, TopicPartition

if TYPE_CHECKING:
    from kernel.replica.leadership import LeadershipListener
    from kernel.replica.manager import ReplicaManager
    from kernel.replica.partition import Partition

__all__ = ["CommitWait", "CoordinatorPartitionWriter", "PartitionWriter", "TopicPartition"]


# --------------------------------------------------------------- kernel implementation


class _DelayedCommit(DelayedOperation):
    """Waits in the Produce purgatory, watched on the partition, as Kafka's coordinators
    waited through ``appendRecords(acks=-1)``: the replica manager's high-watermark
    wake-ups complete it, in the order the waits were watched."""

    __slots__ = ("offset", "on_done", "partition")

    def __init__(self, partition: Partition, offset: int, timeout_ms: int,
                 on_done: Callable[[bool], None]) -> None:
        super().__init__(timeout_ms)
        self.partition = partition
        self.offset = offset
        self.on_done = on_done

    def try_complete(self) -> bool:
        if self.partition.high_watermark >= self.offset:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.on_done(self.partition.high_watermark >= self.offset)

    def on_expiration(self) -> None:
        pass


class CoordinatorPartitionWriter:
    """:class:`PartitionWriter` over the broker's replica manager (Kafka's
    ``CoordinatorPartitionWriter``): appends take the replica manager's one append
    path, so they wake fetches and reach the ``log_appended`` hook like a Produce."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas

    def _partition(self, tp: TopicPartition) -> Partition:
        partition = self._replicas.get_partition(*tp)
        if partition is None:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"{tp[0]}-{tp[1]} is not hosted here")
        return partition

    def append(self, tp: TopicPartition, records: bytes) -> int:
        partition = self._partition(tp)
        # As Kafka's: the coordinator's origin, which may write control batches (markers)
        # and transactional batches without sequence numbers.
        info = self._replicas.append_records(partition, records, -1,
                                              time.time_ns() // 1_000_000,
                                              origin=AppendOrigin.COORDINATOR)
        return int(info.last_offset) + 1

    def high_watermark(self, tp: TopicPartition) -> int:
        return self._partition(tp).high_watermark

    def wait_until_committed(self, tp: TopicPartition, offset: int, timeout_ms: int,
                             on_done: Callable[[bool], None]) -> CommitWait:
        partition = self._partition(tp)
        wait = _DelayedCommit(partition, offset, timeout_ms, on_done)
        self._replicas.produce_purgatory.try_complete_else_watch(wait, [partition.key])
        return wait

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self._replicas.add_leadership_listener(listener)

    def remove_leadership_listener(self, listener: LeadershipListener) -> None:
        self._replicas.remove_leadership_listener(listener)

    def log_start_offset(self, tp: TopicPartition) -> int:
        return int(self._partition(tp).log.log_start_offset)

    def log_end_offset(self, tp: TopicPartition) -> int:
        return int(self._partition(tp).log.log_end_offset)

    def read(self, tp: TopicPartition, offset: int, max_bytes: int) -> bytes | memoryview:
        return self._partition(tp).log.read(offset, max_bytes).records
