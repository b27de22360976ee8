"""Committed offsets of one ``__consumer_offsets`` partition (Kafka's
``OffsetMetadataManager``): OffsetCommit, OffsetFetch, OffsetDelete, deleting a group's
offsets and expiring them past retention. It owns the offsets, by group; whether a
group accepts a commit, and which topics it still subscribes to, are the classic group
manager's to say.
"""

from __future__ import annotations

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

    def offsets(self, group_id: str) -> Mapping[TopicPartition, OffsetAndMetadata]:
        """Read-only view for tests and metrics."""
        offsets = self._offsets.get(group_id)
        return _NO_OFFSETS if offsets is None else MappingProxyType(offsets)

    # ================================================================== loading

    def replay(self, key: OffsetCommitKey, value: bytes | None) -> None:
        """Apply an offset commit record (None: the offset's tombstone)."""
        tp = (key.topic, key.partition)
        if value is None:
            offsets = self._offsets.get(key.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self._offsets[key.group]
            return
        self._groups.get_or_create_simple_group(key.group)
        v = decode_offset_commit_value(value)
        self._offsets.setdefault(key.group, {})[tp] = OffsetAndMetadata(
            offset=v.offset,
            leader_epoch=v.leader_epoch,
            metadata=v.metadata,
            commit_timestamp_ms=v.commit_timestamp,
            expire_timestamp_ms=v.expire_timestamp,
        )

    def remove_group(self, group_id: str) -> None:
        """The group is gone (its tombstone was replayed): so are its offsets."""
        self._offsets.pop(group_id, None)

    def clear(self) -> None:
        self._offsets.clear()

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

    # ============================================================== OffsetFetch

    def fetch_offsets(
        self, ctx: RequestContext, request: OffsetFetchRequestGroup, *, require_stable: bool = False
    ) -> CoordinatorResult[OffsetFetchResponseGroup]:
        """Committed offsets of one group (OffsetFetch v8+ asks for several groups; call
        once per group). ``topics`` None means all. Offsets are returned whatever the
        group state, since groups may use Kafka only to store offsets. No transactional
        offsets are pending here yet, so ``require_stable`` changes nothing."""
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
                if (topic.name, p.partition_index) in offsets:
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
        for topic, partition in self.offsets(group_id):
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
        return expired == len(offsets)
