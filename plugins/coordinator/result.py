"""What a coordinator shard operation hands back to the code that drives it.

The shard does no I/O. Each operation returns a :class:`CoordinatorResult` (Kafka's
``CoordinatorResult``): records to append to the shard's ``__consumer_offsets``
partition, the response to the request (None while the request stays parked),
completions of requests parked earlier, and timer operations. Timers are keyed: a
:class:`ScheduleTimer` replaces any timer armed under the same key, so the caller's
purgatory never needs to know what a timer means; when one fires it calls
``shard.on_timer(key)``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.response import JoinGroupResponse
from kio.schema.sync_group.v5.response import SyncGroupResponse

from plugins.coordinator.records import Record

__all__ = [
    "CancelTimer",
    "Completion",
    "CoordinatorResult",
    "Effects",
    "HeartbeatDeadline",
    "JoinDeadline",
    "OffsetExpiration",
    "ScheduleTimer",
    "SyncDeadline",
    "TimerKey",
    "TimerOperation",
    "append_error_to_response_error",
]

T = TypeVar("T")


# ---------------------------------------------------------------------------- timer keys


@dataclass(frozen=True, slots=True)
class HeartbeatDeadline:
    """A member's session timeout; also a pending member's (KIP-394) timeout and a new
    member's join timeout, as in Kafka where all three share one heartbeat key."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class JoinDeadline:
    """End of a join phase: the rebalance timeout, or a step of the initial rebalance
    delay of a group that was Empty."""

    group_id: str


@dataclass(frozen=True, slots=True)
class SyncDeadline:
    """Members that got a JoinGroup response for this generation must send SyncGroup
    within the rebalance timeout, or are removed."""

    group_id: str
    generation_id: int


@dataclass(frozen=True, slots=True)
class OffsetExpiration:
    """Periodic expiry of offsets past retention, for the whole shard."""


TimerKey = HeartbeatDeadline | JoinDeadline | SyncDeadline | OffsetExpiration


@dataclass(frozen=True, slots=True)
class ScheduleTimer:
    """Arm ``key`` to fire after ``delay_ms``, replacing a timer armed under the same key.
    A delay of 0 still fires from the timer, not inline (Kafka behaves the same)."""

    key: TimerKey
    delay_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Disarm ``key``; cancelling a key that is not armed does nothing."""

    key: TimerKey


TimerOperation = ScheduleTimer | CancelTimer


# ------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Completion:
    """The response to a JoinGroup or SyncGroup parked earlier under ``reply_to``."""

    reply_to: Hashable
    response: JoinGroupResponse | SyncGroupResponse


@dataclass(frozen=True, slots=True)
class CoordinatorResult(Generic[T]):
    records: tuple[Record, ...] = ()
    """Append these, in order, in one batch to the shard's __consumer_offsets partition.
    The shard's state already reflects them."""
    response: T | None = None
    """This request's response; None when the request stays parked under its reply
    handle and will come back later as a :class:`Completion`."""
    completions: tuple[Completion, ...] = ()
    """Responses to requests parked earlier."""
    timers: tuple[TimerOperation, ...] = ()
    """Apply now, in order."""
    producer_id: int = -1
    """A transactional write (TxnOffsetCommit): the records are appended as a
    transactional batch of this producer; -1 for any other write."""
    producer_epoch: int = -1
    transactional_id: str | None = None


@dataclass(slots=True)
class Effects:
    """Collects what one operation produces, across the managers it runs through;
    becomes its CoordinatorResult."""

    records: list[Record] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    # Keyed so a later operation on the same timer supersedes an earlier one.
    timers: dict[TimerKey, TimerOperation] = field(default_factory=dict)

    def complete(self, reply_to: Hashable, response: JoinGroupResponse | SyncGroupResponse) -> None:
        self.completions.append(Completion(reply_to=reply_to, response=response))

    def schedule(self, key: TimerKey, delay_ms: int) -> None:
        self.timers[key] = ScheduleTimer(key=key, delay_ms=delay_ms)

    def cancel(self, key: TimerKey) -> None:
        self.timers[key] = CancelTimer(key=key)

    def result(self, response: T | None = None) -> CoordinatorResult[T]:
        return CoordinatorResult(
            records=tuple(self.records),
            response=response,
            completions=tuple(self.completions),
            timers=tuple(self.timers.values()),
        )

    def result_for(self, reply_to: Hashable) -> CoordinatorResult[Any]:
        """The result of a parkable request: its own completion, if any, becomes the
        response rather than a completion."""
        own = [c for c in self.completions if c.reply_to == reply_to]
        others = [c for c in self.completions if c.reply_to != reply_to]
        return CoordinatorResult(
            records=tuple(self.records),
            response=own[-1].response if own else None,
            completions=tuple(others),
            timers=tuple(self.timers.values()),
        )


def append_error_to_response_error(error: ErrorCode, *, offset_commit: bool = False) -> ErrorCode:
    """The error a client should see when appending a shard's records failed (Kafka's
    ``appendGroupMetadataErrorToResponseError`` and its offset commit variant)."""
    match error:
        case (
            ErrorCode.unknown_topic_or_partition
            | ErrorCode.not_enough_replicas
            | ErrorCode.not_enough_replicas_after_append
            | ErrorCode.request_timed_out
        ):
            return ErrorCode.coordinator_not_available
        case ErrorCode.not_leader_or_follower | ErrorCode.kafka_storage_error:
            return ErrorCode.not_coordinator
        case (
            ErrorCode.message_too_large
            | ErrorCode.record_list_too_large
            | ErrorCode.invalid_fetch_size
        ):
            return (
                ErrorCode.invalid_commit_offset_size
                if offset_commit
                else ErrorCode.unknown_server_error
            )
        case _:
            return error
