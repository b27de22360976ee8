"""Committed offsets of one ``__consumer_offsets`` partition (Kafka's
``OffsetMetadataManager``): OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete,
deleting a group's offsets and expiring them past retention. It owns the offsets, by
group, and the transactional offsets still pending, by producer id; whether a group
accepts a commit, and which topics it still subscribes to, are the classic group
manager's to say.

A transactional commit (a record in a batch with a producer id) stays pending until its
producer's marker: COMMIT materialises it, ABORT drops it, at load and live alike. When
a transactional and a plain commit race for one partition, Kafka keeps whichever record
comes later in the log (its record offset); so does this manager, by the order in which
records reach it (replay offsets at load; live records and markers follow in log order,
since the runtime appends each operation's records before the next runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v9.request import OffsetCommitRequest
from kio.schema.offset_commit.v9.response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from kio.schema.offset_delete.v0.request import OffsetDeleteRequest
from kio.schema.offset_delete.v0.response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup
from kio.schema.offset_fetch.v9.response import (
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopics,
)
from kio.schema.txn_offset_commit.v4.request import TxnOffsetCommitRequest
from kio.schema.txn_offset_commit.v4.response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

from kernel.api.coordination import TransactionResult
from plugins.coordinator.classic import ClassicGroupManager
from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.context import NO_THROTTLE, RequestContext, group_status_error
from plugins.coordinator.group import GroupMetadata, GroupState, TopicPartition
from plugins.coordinator.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    decode_key,
    decode_offset_commit_value,
    offset_commit_record,
)
from plugins.coordinator.result import CoordinatorResult, Effects

__all__ = ["OffsetAndMetadata", "OffsetMetadataManager"]

_NO_OFFSET = -1
_NO_PRODUCER_ID = -1
_NO_OFFSETS: Mapping[TopicPartition, OffsetAndMetadata] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    """-1 when the client did not send one."""
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1
    """Set only by OffsetCommit v2-v4 retention_time; -1 lets offsets.retention.minutes
    decide."""


def _java_length(s: str) -> int:
    """String.length() in Java counts UTF-16 code units; Kafka's limits use it."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


class OffsetMetadataManager:
    """The committed offsets of one ``__consumer_offsets`` partition, by group. Offsets
    exist only for groups the classic group manager knows: replaying a commit for an
    unknown group creates it (a simple consumer group), and the shard drops a group's
    offsets with the group."""

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        clock: Callable[[], int],
        groups: ClassicGroupManager,
        is_loaded: Callable[[], bool],
    ) -> None:
        self._config = config
        self._clock = clock
        self._groups = groups
        self._is_loaded = is_loaded
        self._offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        # Where each committed offset's record sits in the log order (see the module).
        self._positions: dict[str, dict[TopicPartition, int]] = {}
        # Transactional commits awaiting their marker: producer id -> group -> partition
        # -> (log position, offset).
        self._pending: dict[int, dict[str, dict[TopicPartition,
                                                tuple[int, OffsetAndMetadata]]]] = {}
        # Group -> producer ids with pending commits for it (Kafka's openTransactions).
        self._open: dict[str, set[int]] = {}
        # The log position of the last record or marker applied.
        self._position = -1

    def offsets(self, group_id: str) -> Mapping[TopicPartition, OffsetAndMetadata]:
        """Read-only view for tests and metrics."""
        offsets = self._offsets.get(group_id)
        return _NO_OFFSETS if offsets is None else MappingProxyType(offsets)

    # ================================================================== loading

    def pending_offsets(self, producer_id: int) -> Mapping[str, Mapping[TopicPartition, int]]:
        """The producer's pending transactional offsets by group: read-only, for tests."""
        return {group: {tp: o.offset for tp, (_, o) in offsets.items()}
                for group, offsets in self._pending.get(producer_id, {}).items()}

    def has_pending_offsets(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction commits an offset for the group's partition."""
        return any(tp in self._pending.get(pid, {}).get(group_id, {})
                   for pid in self._open.get(group_id, ()))

    def _advance(self, offset: int | None) -> int:
        """The log position of the record being applied: its offset at load, the next
        position live (records are applied in log order either way)."""
        self._position = self._position + 1 if offset is None else max(self._position, offset)
        return self._position

    def replay(self, key: OffsetCommitKey, value: bytes | None, *, offset: int | None = None,
               producer_id: int = _NO_PRODUCER_ID) -> None:
        """Apply an offset commit record (None: the offset's tombstone) at log ``offset``
        (None: written live, after everything applied so far), from a batch of
        ``producer_id`` (-1: not transactional)."""
        position = self._advance(offset)
        group_id = key.group
        tp = (key.topic, key.partition)
        if value is None:
            self._remove(group_id, tp)
            # A tombstone drops the transactional commits pending for the partition too.
            for pid in self._open.get(group_id, ()):
                self._pending.get(pid, {}).get(group_id, {}).pop(tp, None)
            return
        self._groups.get_or_create_simple_group(group_id)
        v = decode_offset_commit_value(value)
        committed = OffsetAndMetadata(
            offset=v.offset,
            leader_epoch=v.leader_epoch,
            metadata=v.metadata,
            commit_timestamp_ms=v.commit_timestamp,
            expire_timestamp_ms=v.expire_timestamp,
        )
        if producer_id == _NO_PRODUCER_ID:
            self._put(group_id, tp, committed, position)
            return
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = (
            position, committed)
        self._open.setdefault(group_id, set()).add(producer_id)

    def replay_end_transaction(self, producer_id: int, result: TransactionResult,
                               offset: int | None = None) -> None:
        """The producer's transaction ended (its marker at ``offset``): COMMIT
        materialises its pending offsets unless a later record committed the same
        partition, ABORT drops them."""
        self._advance(offset)
        pending = self._pending.pop(producer_id, None)
        if pending is None:
            return
        for group_id, offsets in pending.items():
            open_producers = self._open.get(group_id)
            if open_producers is not None:
                open_producers.discard(producer_id)
                if not open_producers:
                    del self._open[group_id]
            if result is not TransactionResult.COMMIT:
                continue
            positions = self._positions.get(group_id, {})
            for tp, (position, committed) in offsets.items():
                if position > positions.get(tp, -1):
                    self._put(group_id, tp, committed, position)

    def _put(self, group_id: str, tp: TopicPartition, committed: OffsetAndMetadata,
             position: int) -> None:
        self._offsets.setdefault(group_id, {})[tp] = committed
        self._positions.setdefault(group_id, {})[tp] = position

    def _remove(self, group_id: str, tp: TopicPartition) -> None:
        offsets = self._offsets.get(group_id)
        if offsets is not None:
            offsets.pop(tp, None)
            self._positions[group_id].pop(tp, None)
            if not offsets:
                del self._offsets[group_id]
                del self._positions[group_id]

    def remove_group(self, group_id: str) -> None:
        """The group is gone (its tombstone was replayed): so are its offsets."""
        self._offsets.pop(group_id, None)
        self._positions.pop(group_id, None)

    def clear(self) -> None:
        self._offsets.clear()
        self._positions.clear()
        self._pending.clear()
        self._open.clear()

    def _status_error(self, group_id: str, *, allow_empty_group_id: bool) -> ErrorCode | None:
        return group_status_error(group_id, loaded=self._is_loaded(),
                                  allow_empty_group_id=allow_empty_group_id)

    def _replay_all(self, records: Iterable[Record]) -> None:
        """Commits and deletions change state the same way at load and live."""
        for key, value in records:
            record_key = decode_key(key)
            assert isinstance(record_key, OffsetCommitKey)
            self.replay(record_key, value)

    # ============================================================= OffsetCommit

    def commit_offsets(
        self,
        ctx: RequestContext,
        request: OffsetCommitRequest,
        *,
        retention_time_ms: int = -1,
    ) -> CoordinatorResult[OffsetCommitResponse]:
        """OffsetCommit. ``retention_time_ms`` is the v2-v4 ``retention_time`` field
        (-1: use offsets.retention.minutes). For v10 resolve topic ids to names first."""
        fx = Effects()
        group = self._groups.group(request.group_id)
        error = self._status_error(request.group_id, allow_empty_group_id=True)
        if error is None:
            error = self._groups.validate_offset_commit(ctx, group, request)
        if error is not None:
            return fx.result(self._commit_response(request, lambda _p: error))

        if group is not None:
            self._groups.reschedule_heartbeat(group, request.member_id, fx)
        now = self._clock()
        expire = now + retention_time_ms if retention_time_ms >= 0 else -1
        errors: dict[TopicPartition, ErrorCode] = {}
        for topic in request.topics:
            for p in topic.partitions:
                metadata = p.committed_metadata or ""
                if _java_length(metadata) > self._config.offset_metadata_max_bytes:
                    errors[(topic.name, p.partition_index)] = ErrorCode.offset_metadata_too_large
                    continue
                errors[(topic.name, p.partition_index)] = ErrorCode.none
                fx.records.append(
                    offset_commit_record(
                        request.group_id,
                        topic.name,
                        p.partition_index,
                        OffsetCommitValue(
                            offset=p.committed_offset,
                            metadata=metadata,
                            commit_timestamp=now,
                            leader_epoch=p.committed_leader_epoch,
                            expire_timestamp=expire,
                        ),
                    )
                )
        self._replay_all(fx.records)
        return fx.result(self._commit_response(request, lambda tp: errors[tp]))

    @staticmethod
    def _commit_response(
        request: OffsetCommitRequest, error_of: Callable[[TopicPartition], ErrorCode]
    ) -> OffsetCommitResponse:
        return OffsetCommitResponse(
            throttle_time=NO_THROTTLE,
            topics=tuple(
                OffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=tuple(
                        OffsetCommitResponsePartition(
                            partition_index=p.partition_index,
                            error_code=error_of((topic.name, p.partition_index)),
                        )
                        for p in topic.partitions
                    ),
                )
                for topic in request.topics
            ),
        )

    # ========================================================== TxnOffsetCommit

    def commit_transactional_offsets(
        self, ctx: RequestContext, request: TxnOffsetCommitRequest
    ) -> CoordinatorResult[TxnOffsetCommitResponse]:
        """TxnOffsetCommit (Kafka's ``commitTransactionalOffset``): the offsets are
        written in the producer's transaction and stay pending until its marker. The
        result carries the producer, so the runtime appends a transactional batch."""
        fx = Effects()
        error = self._status_error(request.group_id, allow_empty_group_id=False)
        if error is None:
            error = self._groups.validate_txn_offset_commit(
                self._groups.group(request.group_id), request.member_id,
                request.group_instance_id, request.generation_id)
        errors: dict[TopicPartition, ErrorCode] = {}
        if error is None:
            now = self._clock()
            for topic in request.topics:
                for p in topic.partitions:
                    tp = (topic.name, p.partition_index)
                    metadata = p.committed_metadata or ""
                    if _java_length(metadata) > self._config.offset_metadata_max_bytes:
                        errors[tp] = ErrorCode.offset_metadata_too_large
                        continue
                    errors[tp] = ErrorCode.none
                    fx.records.append(offset_commit_record(
                        request.group_id, topic.name, p.partition_index,
                        OffsetCommitValue(offset=p.committed_offset, metadata=metadata,
                                          commit_timestamp=now,
                                          leader_epoch=p.committed_leader_epoch,
                                          expire_timestamp=-1)))
            for key, value in fx.records:
                record_key = decode_key(key)
                assert isinstance(record_key, OffsetCommitKey)
                self.replay(record_key, value, producer_id=request.producer_id)
        response = TxnOffsetCommitResponse(
            throttle_time=NO_THROTTLE,
            topics=tuple(
                TxnOffsetCommitResponseTopic(name=topic.name, partitions=tuple(
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=error if error is not None
                        else errors[(topic.name, p.partition_index)])
                    for p in topic.partitions))
                for topic in request.topics
            ),
        )
        return dataclasses.replace(
            fx.result(response), producer_id=request.producer_id,
            producer_epoch=request.producer_epoch, transactional_id=request.transactional_id)

    # ============================================================== OffsetFetch

    def fetch_offsets(
        self, ctx: RequestContext, request: OffsetFetchRequestGroup, *, require_stable: bool = False
    ) -> CoordinatorResult[OffsetFetchResponseGroup]:
        """Committed offsets of one group (OffsetFetch v8+ asks for several groups; call
        once per group). ``topics`` None means all. Offsets are returned whatever the
        group state, since groups may use Kafka only to store offsets. With
        ``require_stable`` (v7+) a partition that an open transaction commits answers
        UNSTABLE_OFFSET_COMMIT, as Kafka's; the client retries."""
        fx = Effects()
        error = self._status_error(request.group_id, allow_empty_group_id=True)
        if error is not None:
            return fx.result(
                OffsetFetchResponseGroup(group_id=request.group_id, topics=(), error_code=error)
            )
        offsets = self.offsets(request.group_id)
        wanted: dict[str, list[int]] = {}
        if request.topics is None:
            for topic, partition in sorted(offsets):
                wanted.setdefault(topic, []).append(partition)
        else:
            for t in request.topics:
                wanted.setdefault(t.name, []).extend(t.partition_indexes)
        topics = []
        for topic, partitions in wanted.items():
            rows = []
            for partition in partitions:
                if require_stable and self.has_pending_offsets(request.group_id,
                                                               (topic, partition)):
                    rows.append(OffsetFetchResponsePartitions(
                        partition_index=partition, committed_offset=_NO_OFFSET,
                        committed_leader_epoch=-1, metadata="",
                        error_code=ErrorCode.unstable_offset_commit))
                    continue
                o = offsets.get((topic, partition))
                rows.append(
                    OffsetFetchResponsePartitions(
                        partition_index=partition,
                        committed_offset=_NO_OFFSET if o is None else o.offset,
                        committed_leader_epoch=-1 if o is None else o.leader_epoch,
                        metadata="" if o is None else o.metadata,
                        error_code=ErrorCode.none,
                    )
                )
            topics.append(OffsetFetchResponseTopics(name=topic, partitions=tuple(rows)))
        return fx.result(
            OffsetFetchResponseGroup(
                group_id=request.group_id, topics=tuple(topics), error_code=ErrorCode.none
            )
        )

    # ============================================================= OffsetDelete

    def delete_offsets(
        self, ctx: RequestContext, request: OffsetDeleteRequest
    ) -> CoordinatorResult[OffsetDeleteResponse]:
        """OffsetDelete. A consumer group with members keeps the offsets of topics it
        subscribes to (GROUP_SUBSCRIBED_TO_TOPIC); other groups with members refuse
        (NON_EMPTY_GROUP). An Empty group left without offsets stays, as in Kafka 4.3,
        until DeleteGroups or the next offset expiration check removes it."""
        fx = Effects()

        def top_level(error: ErrorCode) -> CoordinatorResult[OffsetDeleteResponse]:
            return fx.result(
                OffsetDeleteResponse(error_code=error, throttle_time=NO_THROTTLE, topics=())
            )

        error = self._status_error(request.group_id, allow_empty_group_id=False)
        if error is not None:
            return top_level(error)
        group = self._groups.group(request.group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return top_level(ErrorCode.group_id_not_found)
        consumer_with_members = group.is_consumer_group() and not group.is_in(GroupState.EMPTY)
        if not group.is_in(GroupState.EMPTY) and not consumer_with_members:
            return top_level(ErrorCode.non_empty_group)

        offsets = self.offsets(group.group_id)
        topics = []
        for topic in request.topics:
            subscribed = consumer_with_members and group.is_subscribed_to_topic(topic.name)
            rows = []
            for p in topic.partitions:
                if subscribed:
                    rows.append(
                        OffsetDeleteResponsePartition(
                            partition_index=p.partition_index,
                            error_code=ErrorCode.group_subscribed_to_topic,
                        )
                    )
                    continue
                tp = (topic.name, p.partition_index)
                if tp in offsets or self.has_pending_offsets(group.group_id, tp):
                    fx.records.append(
                        offset_commit_record(group.group_id, topic.name, p.partition_index, None)
                    )
                rows.append(
                    OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=ErrorCode.none
                    )
                )
            topics.append(OffsetDeleteResponseTopic(name=topic.name, partitions=tuple(rows)))
        self._replay_all(fx.records)
        return fx.result(
            OffsetDeleteResponse(
                error_code=ErrorCode.none, throttle_time=NO_THROTTLE, topics=tuple(topics)
            )
        )

    # ====================================================== group-wide operations

    def delete_all_offsets(self, group_id: str, fx: Effects) -> None:
        """Tombstones for every offset of the group (DeleteGroups); the caller replays
        them with the group's own tombstone."""
        offsets = self.offsets(group_id)
        for topic, partition in offsets:
            fx.records.append(offset_commit_record(group_id, topic, partition, None))
        # And the transactional commits still pending, as Kafka's deleteAllOffsets.
        pending = {tp for pid in self._open.get(group_id, ())
                   for tp in self._pending.get(pid, {}).get(group_id, {})}
        for topic, partition in sorted(pending - offsets.keys()):
            fx.records.append(offset_commit_record(group_id, topic, partition, None))

    def expire_offsets(self, group: GroupMetadata, now_ms: int, fx: Effects) -> bool:
        """Tombstones for the group's offsets past retention, by the group's expiration
        condition; True when none of its offsets is left. The caller replays them."""
        offsets = self.offsets(group.group_id)
        condition = group.offset_expiration_condition()
        if condition is None:
            return not offsets
        retention_ms = self._config.offsets_retention_ms
        expired = 0
        for (topic, partition), o in offsets.items():
            if topic in condition.kept_topics:
                continue
            if self.has_pending_offsets(group.group_id, (topic, partition)):
                continue  # as Kafka: not while a transaction commits it
            if o.expire_timestamp_ms >= 0:
                # Commits from OffsetCommit v2-v4 carried their own expiry.
                if now_ms < o.expire_timestamp_ms:
                    continue
            else:
                base = condition.base_timestamp_ms
                since = o.commit_timestamp_ms if base is None else base
                if now_ms - since < retention_ms:
                    continue
            fx.records.append(offset_commit_record(group.group_id, topic, partition, None))
            expired += 1
        # As Kafka, a group with open transactions is not removed.
        return expired == len(offsets) and group.group_id not in self._open
