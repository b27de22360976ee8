"""One partition's replica on this broker: its role, leader epoch, ISR and high watermark.

The leader appends client batches and moves the high watermark to the smallest log end
offset among the in-sync replicas (itself included), so with an ISR of one the high
watermark follows every append. Followers append what their fetcher brings from the
leader and take the leader's high watermark, capped at their own log end. Consumers
read below the high watermark, READ_COMMITTED ones below the last stable offset, which
the log's open transactions hold back (the log owns it; each high watermark move is
told to the log first).

The leader keeps its ISR as Kafka's Partition does: a follower whose log end reached
the high watermark and the current leader epoch's start offset joins it; one that has
not caught up with the leader's log end for ``replica.lag.time.max.ms`` leaves it. Each
change goes to the controller (``alter_isr``, AlterPartition) and takes effect when the
cluster image brings it back; while one is in flight no other is sent, and the high
watermark waits for the larger of the two ISRs (Kafka's maximal ISR), so a follower
being added can never be behind a committed offset.
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
# Asks the controller for a new ISR of a partition this broker leads (AlterPartition);
# the answer comes back through the cluster image.
AlterIsr = Callable[["Partition", tuple[int, ...]], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows about a follower (from its fetch requests)."""

    log_end_offset: int = -1
    log_start_offset: int = -1  # unknown until its first fetch, as in Kafka
    last_caught_up_ms: int = 0
    # The leader's log end and the time at the follower's previous fetch: a follower
    # that reached it has caught up as of then (Kafka's lastFetchLeaderLogEndOffset).
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_ms: int = 0

    def fetched(self, fetch_offset: int, leader_log_end_offset: int, now_ms: int) -> None:
        """Kafka's Replica.updateFetchStateOrThrow: a follower caught up when it asks for
        the leader's log end, or for the log end the leader had at its previous fetch."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_ms = now_ms


class Partition:
    def __init__(
        self, topic: str, partition: int, topic_id: uuid.UUID, log: Any, local_broker_id: int,
        on_high_watermark: HighWatermarkListener, alter_isr: AlterIsr | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log
        self.local_broker_id = local_broker_id
        self._on_high_watermark = on_high_watermark
        self.state: PartitionState | None = None
        self._alter_isr = alter_isr
        self.high_watermark = 0
        self.remote_replicas: dict[int, ReplicaProgress] = {}
        # The ISR of an AlterPartition in flight (None: none is).
        self.pending_isr: tuple[int, ...] | None = None
        # Where this broker's current leader epoch starts in its log.
        self.leader_epoch_start_offset = -1

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
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def min_insync_replicas(self) -> int:
        """The topic's min.insync.replicas, as its log has it."""
        return int(self.log.config.min_insync_replicas)

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state is not None else ()

    @property
    def is_under_replicated(self) -> bool:
        """Led here with fewer replicas in sync than assigned (Kafka's
        isUnderReplicated: the replicas a reassignment is adding do not count)."""
        state = self.state
        return (state is not None and state.leader == self.local_broker_id
                and len(state.isr) < len(state.replicas) - len(state.adding_replicas))

    @property
    def is_under_min_isr(self) -> bool:
        """Led here with fewer replicas in sync than min.insync.replicas: acks=all
        produces are refused (Kafka's isUnderMinIsr)."""
        state = self.state
        return (state is not None and state.leader == self.local_broker_id
                and len(state.isr) < self.min_insync_replicas)

    # -- role changes (driven by the cluster image) ---------------------------

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark waits for: with a change in flight, the union of
        the committed and the proposed ISR (Kafka's maximalIsr)."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    def make_leader(self, state: PartitionState) -> None:
        """Lead in ``state``'s epoch (again, when only the ISR or replicas changed)."""
        new_epoch = not self.is_leader or state.leader_epoch != self.leader_epoch
        self.state = state
        self.pending_isr = None  # whatever was in flight is answered by this state
        now = _now_ms()
        if new_epoch:
            # As Kafka's makeLeader: the new epoch starts at the log end offset, so that
            # OffsetForLeaderEpoch answers for it before anything is appended in it, and
            # the ISR's followers count as caught up now, not at their last fetch.
            self.leader_epoch_start_offset = self.log.log_end_offset
            self.log.assign_epoch_start_offset(state.leader_epoch,
                                               self.leader_epoch_start_offset)
            self.remote_replicas = {
                r: ReplicaProgress(last_caught_up_ms=now if r in state.isr else 0)
                for r in state.replicas if r != self.local_broker_id
            }
        else:
            self.remote_replicas = {
                r: self.remote_replicas.get(r) or ReplicaProgress()
                for r in state.replicas if r != self.local_broker_id
            }
        self.maybe_increment_high_watermark()

    def make_follower(self, state: PartitionState) -> None:
        self.state = state
        self.remote_replicas = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = -1

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
        the high watermark and may return it to the ISR, and its log start offset the
        low watermark."""
        progress = self.remote_replicas.get(replica_id)
        if progress is None:
            return
        progress.fetched(fetch_offset, self.log.log_end_offset, _now_ms())
        progress.log_start_offset = log_start_offset
        self.maybe_expand_isr(replica_id, progress)
        self.maybe_increment_high_watermark()

    # -- the ISR (leader) ---------------------------------------------------------

    def maybe_expand_isr(self, replica_id: int, progress: ReplicaProgress) -> None:
        """Kafka's maybeExpandIsr: a follower outside the ISR that reached the high
        watermark and this epoch's start joins it."""
        if (self.pending_isr is not None or replica_id in self.isr
                or self._alter_isr is None or not self.is_leader):
            return
        if (progress.log_end_offset >= self.high_watermark
                and progress.log_end_offset >= self.leader_epoch_start_offset):
            self._propose_isr((*self.isr, replica_id))

    def maybe_shrink_isr(self, now_ms: int, lag_time_max_ms: int) -> tuple[int, ...]:
        """Kafka's maybeShrinkIsr: followers in the ISR that have not caught up for
        ``lag_time_max_ms`` leave it. Returns those asked to leave."""
        if self.pending_isr is not None or self._alter_isr is None or not self.is_leader:
            return ()
        lagging = tuple(
            r for r in self.isr if r != self.local_broker_id and (
                (p := self.remote_replicas.get(r)) is None
                or now_ms - p.last_caught_up_ms > lag_time_max_ms)
        )
        if lagging:
            self._propose_isr(tuple(r for r in self.isr if r not in lagging))
        return lagging

    def _propose_isr(self, isr: tuple[int, ...]) -> None:
        assert self._alter_isr is not None
        self.pending_isr = isr
        self._alter_isr(self, isr)

    def alter_isr_answered(self, proposed: tuple[int, ...]) -> None:
        """The controller answered ``proposed`` (made, refused or unreachable): the
        image holds the ISR in force, and a later fetch or check may propose again."""
        if self.pending_isr == proposed:
            self.pending_isr = None

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
        for replica in self.maximal_isr:
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

    # -- follower path -------------------------------------------------------------

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """A follower takes the leader's high watermark, capped at its own log end (as
        Kafka's follower does); True when it moved."""
        new_hw = min(leader_high_watermark, self.log.log_end_offset)
        if new_hw <= self.high_watermark:
            return False
        self.high_watermark = new_hw
        self.log.on_high_watermark_updated(new_hw)
        self._on_high_watermark(self, new_hw)
        return True

    def truncate_to(self, offset: int) -> None:
        """A follower's divergent tail goes; the high watermark cannot stay above the
        new log end."""
        self.log.truncate_to(offset)
        if self.high_watermark > self.log.log_end_offset:
            self.high_watermark = self.log.log_end_offset

    # -- reads (Fetch, ListOffsets, OffsetForLeaderEpoch, DescribeProducers) -----------

    def read_records(self, fetch_offset: int, max_bytes: int, max_offset: int,
                     min_one_batch: bool) -> Any:
        """The log's batches from ``fetch_offset`` below ``max_offset`` (Kafka's
        readRecords): a FetchDataInfo, a large read as a slice of the segment file."""
        return self.log.read(fetch_offset, max_bytes, max_offset,
                             min_one_batch=min_one_batch, zero_copy=True)

    def collect_aborted_transactions(self, start_offset: int, upper_offset: int) -> Any:
        """The aborted transactions overlapping [start, upper) (read_committed fetches)."""
        return self.log.collect_aborted_transactions(start_offset, upper_offset)

    def convert_to_offset_metadata(self, offset: int) -> Any:
        """Segment and position of ``offset``: a delayed fetch measures bytes with it."""
        return self.log.convert_to_offset_metadata(offset)

    def fetch_offset_for_timestamp(self, timestamp: int) -> Any:
        """ListOffsets' lookup (Kafka's fetchOffsetForTimestamp): a TimestampAndOffset,
        or None where no record answers."""
        return self.log.fetch_offset_for_timestamp(timestamp)

    def last_offset_for_leader_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch (Kafka's lastOffsetForLeaderEpoch): (epoch, end offset),
        (-1, -1) when unknown."""
        return self.log.end_offset_for_epoch(leader_epoch)

    def active_producers(self) -> list[Any]:
        """Each producer id's state in this replica's log (Kafka's
        activeProducerState; leader or follower alike)."""
        return list(self.log.producer_state.producers.values())

    # -- DeleteRecords (leader) -------------------------------------------------------

    def delete_records_on_leader(self, offset: int) -> int:
        """Kafka's deleteRecordsOnLeader: move the log start offset to ``offset`` (-1:
        the high watermark); a topic without cleanup.policy=delete refuses
        (POLICY_VIOLATION), an offset above the high watermark too (OFFSET_OUT_OF_RANGE).
        Returns the offset the low watermark must reach."""
        config = self.log.config
        if not config.delete:
            raise KafkaError(ErrorCode.policy_violation,
                             f"records of {self} cannot be deleted: cleanup.policy is "
                             f"{','.join(config.cleanup_policy)}")
        hw = self.high_watermark
        requested = hw if offset == -1 else offset
        self.log.delete_records_before(requested, high_watermark=hw)
        return requested

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
