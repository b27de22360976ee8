"""The group coordinator of one ``__consumer_offsets`` partition, as a sans-io state
machine (Kafka's ``GroupCoordinatorShard``): it replays the partition's records into the
classic group manager (``classic.py``) and the offset manager (``offsets.py``), routes
timers to them, and runs the operations that span both (DeleteGroups, offset expiry).

How to drive it (the contract of the kernel's ``CoordinatorRuntime``):

* Load: replay every record of the partition in log order (:meth:`replay`, and
  :meth:`replay_end_transaction` for transaction markers), then call :meth:`on_loaded`
  and apply its timers. Before that, requests get COORDINATOR_LOAD_IN_PROGRESS (or what
  Kafka answers instead for old clients).
* Each request method returns a :class:`CoordinatorResult`. The shard's state already
  includes its effects. Append ``records`` (if any) to the partition in one batch. Apply
  ``timers`` right away. Deliver ``response`` and ``completions`` only once everything
  this shard appended so far is committed (high watermark past the last append), even
  when the result itself has no records: a response must never reveal state that could
  still be lost.
* ``response`` is None when the request is parked (see ``classic.py``); its response
  arrives later as a :class:`Completion` of some other call.
* When a timer fires, call :meth:`on_timer` with its key and treat the result the same
  way.
* If an append fails, the in-memory state is ahead of the log. Answer the requests
  waiting on it with :func:`append_error_to_response_error`, call :meth:`on_unloaded`
  (it answers parked requests with NOT_COORDINATOR and cancels the shard's timers) and
  load a fresh shard from the log; Kafka reverts to its last committed snapshot instead,
  which amounts to the same thing.
* On losing leadership of the partition, call :meth:`on_unloaded`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable, Mapping

from kio.schema.delete_groups.v2.response import DeletableGroupResult
from kio.schema.describe_groups.v6.response import DescribedGroup
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.join_group.v9.request import JoinGroupRequest
from kio.schema.join_group.v9.response import JoinGroupResponse
from kio.schema.leave_group.v5.request import LeaveGroupRequest
from kio.schema.leave_group.v5.response import LeaveGroupResponse
from kio.schema.list_groups.v5.response import ListGroupsResponse
from kio.schema.offset_commit.v9.request import OffsetCommitRequest
from kio.schema.offset_commit.v9.response import OffsetCommitResponse
from kio.schema.offset_delete.v0.request import OffsetDeleteRequest
from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup
from kio.schema.offset_fetch.v9.response import OffsetFetchResponseGroup
from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.schema.sync_group.v5.response import SyncGroupResponse
from kio.schema.txn_offset_commit.v4.request import TxnOffsetCommitRequest
from kio.schema.txn_offset_commit.v4.response import TxnOffsetCommitResponse

from kernel.api.coordination import TransactionResult
from plugins.coordinator.classic import ClassicGroupManager
from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.context import RequestContext, group_status_error
from plugins.coordinator.group import GroupMetadata, TopicPartition
from plugins.coordinator.offsets import OffsetAndMetadata, OffsetMetadataManager
from plugins.coordinator.records import (
    OffsetCommitKey,
    Record,
    UnknownRecordType,
    decode_group_metadata_value,
    decode_key,
)
from plugins.coordinator.result import (
    CoordinatorResult,
    Effects,
    HeartbeatDeadline,
    JoinDeadline,
    OffsetExpiration,
    SyncDeadline,
    TimerKey,
)

__all__ = ["GroupCoordinatorShard"]

log = logging.getLogger(__name__)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinatorShard:
    """The classic groups of one ``__consumer_offsets`` partition and their offsets."""

    def __init__(
        self,
        config: GroupCoordinatorConfig | None = None,
        *,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        """``clock`` returns milliseconds since the epoch; commit timestamps and offset
        retention use it."""
        self._config = config or GroupCoordinatorConfig()
        self._clock = clock
        self._loaded = False
        self._classic = ClassicGroupManager(self._config, clock, lambda: self._loaded)
        self._offsets = OffsetMetadataManager(self._config, clock, self._classic,
                                              lambda: self._loaded)

    @property
    def config(self) -> GroupCoordinatorConfig:
        return self._config

    @property
    def is_loaded(self) -> bool:
        return self._loaded

    def group(self, group_id: str) -> GroupMetadata | None:
        """Read-only view for tests and metrics; mutate only through the operations."""
        return self._classic.group(group_id)

    def group_ids(self) -> list[str]:
        return self._classic.group_ids()

    def offsets(self, group_id: str) -> Mapping[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets; read-only, for tests and metrics."""
        return self._offsets.offsets(group_id)

    # ================================================================== loading

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: bytes, value: bytes | None) -> None:
        """Apply one ``__consumer_offsets`` record: at load, for every record in log
        order. Records of group types this coordinator does not host are skipped. An
        offset commit in a batch with a producer id (TxnOffsetCommit) stays pending
        until that producer's transaction marker."""
        self._apply(key, value, offset, producer_id)

    def replay_end_transaction(self, offset: int, producer_id: int, producer_epoch: int,
                               result: TransactionResult) -> None:
        """A transaction marker, at load or written live (WriteTxnMarkers): the
        producer's pending offsets are committed or dropped."""
        self._offsets.replay_end_transaction(producer_id, result, offset)

    def _apply(self, key: bytes, value: bytes | None, offset: int | None = None,
               producer_id: int = -1) -> None:
        try:
            record_key = decode_key(key)
        except UnknownRecordType:
            log.debug("skipping a __consumer_offsets record of another group type")
            return
        if isinstance(record_key, OffsetCommitKey):
            self._offsets.replay(record_key, value, offset=offset, producer_id=producer_id)
        elif value is None:
            self._classic.replay(record_key.group, None)
            self._offsets.remove_group(record_key.group)
        else:
            self._classic.replay(record_key.group, decode_group_metadata_value(value))

    def _replay_all(self, records: Iterable[Record]) -> None:
        """Records written live change state the same way as at load."""
        for key, value in records:
            self._apply(key, value)

    def on_loaded(self) -> CoordinatorResult[None]:
        """Loading is complete: start serving (see ``ClassicGroupManager.on_loaded``) and
        arm the periodic offset expiration."""
        fx = Effects()
        self._loaded = True
        self._classic.on_loaded(fx)
        fx.schedule(OffsetExpiration(), self._config.offsets_retention_check_interval_ms)
        return fx.result()

    def on_unloaded(self) -> CoordinatorResult[None]:
        """This broker no longer leads the partition: answer every parked request with
        NOT_COORDINATOR (clients then find the new coordinator) and cancel all timers."""
        fx = Effects()
        self._classic.on_unloaded(fx)
        self._offsets.clear()
        fx.cancel(OffsetExpiration())
        self._loaded = False
        return fx.result()

    # =================================================================== timers

    def on_timer(self, key: TimerKey) -> CoordinatorResult[None]:
        """A timer armed by an earlier result fired."""
        match key:
            case HeartbeatDeadline(group_id=group_id, member_id=member_id):
                return self._classic.on_session_timeout(group_id, member_id)
            case JoinDeadline(group_id=group_id):
                return self._classic.on_join_deadline(group_id)
            case SyncDeadline(group_id=group_id, generation_id=generation_id):
                return self._classic.on_sync_deadline(group_id, generation_id)
            case OffsetExpiration():
                return self.on_offset_expiration()

    def on_offset_expiration(self) -> CoordinatorResult[None]:
        """Drop offsets past retention (offsets.retention.minutes), and Empty groups that
        have no offsets left; re-arms itself."""
        fx = Effects()
        now = self._clock()
        for group in self._classic.groups():
            if self._offsets.expire_offsets(group, now, fx) and self._classic.can_expire(group):
                self._classic.delete_group(group.group_id, fx)
        self._replay_all(fx.records)
        fx.schedule(OffsetExpiration(), self._config.offsets_retention_check_interval_ms)
        return fx.result()

    # ======================================================= the classic protocol

    def join_group(
        self, ctx: RequestContext, request: JoinGroupRequest, reply_to: Hashable
    ) -> CoordinatorResult[JoinGroupResponse]:
        return self._classic.join_group(ctx, request, reply_to)

    def sync_group(
        self, ctx: RequestContext, request: SyncGroupRequest, reply_to: Hashable
    ) -> CoordinatorResult[SyncGroupResponse]:
        return self._classic.sync_group(ctx, request, reply_to)

    def heartbeat(
        self, ctx: RequestContext, request: HeartbeatRequest
    ) -> CoordinatorResult[HeartbeatResponse]:
        return self._classic.heartbeat(ctx, request)

    def leave_group(
        self, ctx: RequestContext, request: LeaveGroupRequest
    ) -> CoordinatorResult[LeaveGroupResponse]:
        return self._classic.leave_group(ctx, request)

    def list_groups(
        self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
    ) -> ListGroupsResponse:
        return self._classic.list_groups(states_filter, types_filter)

    def describe_group(self, ctx: RequestContext, group_id: str) -> DescribedGroup:
        return self._classic.describe_group(ctx, group_id)

    # ================================================================== offsets

    def commit_offsets(
        self,
        ctx: RequestContext,
        request: OffsetCommitRequest,
        *,
        retention_time_ms: int = -1,
    ) -> CoordinatorResult[OffsetCommitResponse]:
        return self._offsets.commit_offsets(ctx, request, retention_time_ms=retention_time_ms)

    def commit_transactional_offsets(
        self, ctx: RequestContext, request: TxnOffsetCommitRequest
    ) -> CoordinatorResult[TxnOffsetCommitResponse]:
        return self._offsets.commit_transactional_offsets(ctx, request)

    def pending_offsets(self, producer_id: int) -> Mapping[str, Mapping[TopicPartition, int]]:
        """The producer's pending transactional offsets by group; for tests."""
        return self._offsets.pending_offsets(producer_id)

    def fetch_offsets(
        self, ctx: RequestContext, request: OffsetFetchRequestGroup, *, require_stable: bool = False
    ) -> CoordinatorResult[OffsetFetchResponseGroup]:
        return self._offsets.fetch_offsets(ctx, request, require_stable=require_stable)

    def delete_offsets(
        self, ctx: RequestContext, request: OffsetDeleteRequest
    ) -> CoordinatorResult[OffsetDeleteResponse]:
        return self._offsets.delete_offsets(ctx, request)

    # ============================================================ DeleteGroups

    def delete_groups(
        self, group_ids: Iterable[str]
    ) -> CoordinatorResult[tuple[DeletableGroupResult, ...]]:
        """DeleteGroups for the groups of this shard: only Empty groups go, with all
        their offsets (tombstones for each, then for the group)."""
        fx = Effects()
        results = []
        for group_id in group_ids:
            error = group_status_error(group_id, loaded=self._loaded, allow_empty_group_id=True)
            if error is None:
                error = self._classic.validate_delete_group(group_id)
                if error is ErrorCode.none:
                    self._offsets.delete_all_offsets(group_id, fx)
                    self._classic.delete_group(group_id, fx)
            results.append(DeletableGroupResult(group_id=group_id, error_code=error))
        self._replay_all(fx.records)
        return fx.result(tuple(results))
