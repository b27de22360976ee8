"""One partition's replica on this broker: its role, leader epoch, ISR and high watermark.

The leader appends client batches and moves the high watermark to the smallest log end
offset among the in-sync replicas (itself included), so with an ISR of one the high
watermark follows every append. Followers (the replication issue) append fetched
batches and take the leader's high watermark. Consumers read below the high watermark,
READ_COMMITTED ones below the last stable offset, which the log's open transactions
hold back (the log owns it; each high watermark move is told to the log first).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.cluster import PartitionState
from kernel.log.validator import AppendOrigin
from kernel.protocol.errors import KafkaError

HighWatermarkListener = Callable[["Partition", int], None]


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows about a follower (from its fetch requests)."""

    log_end_offset: int = -1
    log_start_offset: int = -1  # unknown until its first fetch, as in Kafka
    last_caught_up_ms: int = 0


class Partition:
    def __init__(
        self, topic: str, partition: int, topic_id: uuid.UUID, log: Any, local_broker_id: int,
        on_high_watermark: HighWatermarkListener,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log
        self.local_broker_id = local_broker_id
        self._on_high_watermark = on_high_watermark
        self.state: PartitionState | None = None
        self.high_watermark = 0
        self.remote_replicas: dict[int, ReplicaProgress] = {}

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def is_leader(self) -> bool:
        return self.state is not None and self.state.leader == self.local_broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1

    @property
    def last_stable_offset(self) -> int:
        """Offset below which every transaction is decided and replicated: the high
        watermark, or the log's first unstable offset when that is lower (Kafka's
        lastStableOffset)."""
        return int(self.log.last_stable_offset(self.high_watermark))

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state is not None else ()

    # -- role changes (driven by the cluster image) ---------------------------

    def make_leader(self, state: PartitionState) -> None:
        # As Kafka's makeLeader: the new epoch starts at the log end offset, so that
        # OffsetForLeaderEpoch answers for it before anything is appended in it.
        self.state = state
        self.log.assign_epoch_start_offset(state.leader_epoch, self.log.log_end_offset)
        self.remote_replicas = {
            r: self.remote_replicas.get(r, ReplicaProgress())
            for r in state.replicas if r != self.local_broker_id
        }
        self.maybe_increment_high_watermark()

    def make_follower(self, state: PartitionState) -> None:
        self.state = state
        self.remote_replicas = {}

    # -- leader path --------------------------------------------------------

    def append_records_to_leader(self, records: bytes | memoryview, required_acks: int,
                                 min_insync: int, now_ms: int,
                                 origin: AppendOrigin = AppendOrigin.CLIENT) -> Any:
        """Check leadership and min.insync.replicas, then append to the log. The high
        watermark is left to the caller (the replica manager's append path), which
        first gives producer state its turn."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self.local_broker_id} is not the leader of {self}")
        if required_acks == -1 and len(self.isr) < min_insync:
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"the size of the current ISR {self.isr} is less than min.insync.replicas "
                f"({min_insync}) for {self}",
            )
        return self.log.append_as_leader(records, leader_epoch=self.leader_epoch, now_ms=now_ms,
                                         origin=origin)

    def check_follower(self, replica_id: int, current_leader_epoch: int) -> None:
        """A follower fetch must come from one of the partition's replicas. As Kafka:
        UNKNOWN_LEADER_EPOCH when the request names an epoch (the replica may be new to
        an assignment this broker has not seen yet), else NOT_LEADER_OR_FOLLOWER."""
        if replica_id in self.remote_replicas:
            return
        raise KafkaError(
            ErrorCode.unknown_leader_epoch if current_leader_epoch >= 0
            else ErrorCode.not_leader_or_follower,
            f"broker {replica_id} is not a replica of {self} (replicas "
            f"{list(self.state.replicas) if self.state is not None else []})",
        )

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int,
                                    log_start_offset: int) -> None:
        """Record a follower's fetch: its log end offset (the offset it asks for) moves
        the high watermark, and its log start offset the low watermark."""
        progress = self.remote_replicas.get(replica_id)
        if progress is None:
            return
        progress.log_end_offset = fetch_offset
        progress.log_start_offset = log_start_offset
        if fetch_offset >= self.log.log_end_offset:
            progress.last_caught_up_ms = int(time.time() * 1000)
        self.maybe_increment_high_watermark()

    def low_watermark(self, live_brokers: Container[int]) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset among this replica
        and the followers on live brokers; DeleteRecords waits for it."""
        low = self.log.log_start_offset
        for replica_id, progress in self.remote_replicas.items():
            if replica_id in live_brokers and progress.log_start_offset < low:
                low = progress.log_start_offset
        return low

    def maybe_increment_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        candidates = [self.log.log_end_offset]
        for replica in self.isr:
            if replica != self.local_broker_id:
                progress = self.remote_replicas.get(replica)
                candidates.append(progress.log_end_offset if progress else -1)
        new_hw = max(min(candidates), self.log.log_start_offset)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.log.on_high_watermark_updated(new_hw)  # before the wake-ups read the LSO
            self._on_high_watermark(self, new_hw)
            return True
        return False

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320 fencing of requests that carry the leader epoch the client knows."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.fenced_leader_epoch,
                             f"epoch {current_leader_epoch} is older than {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.unknown_leader_epoch,
                             f"epoch {current_leader_epoch} is newer than {self.leader_epoch}")

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
