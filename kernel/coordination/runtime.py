"""Kafka's ``CoordinatorRuntime`` for one internal compacted topic (``__consumer_offsets``,
later ``__transaction_state``): one shard per partition this broker leads.

A shard is a sans-io state machine (see :class:`CoordinatorShard`). Its state changes
only by replaying records, so the same code rebuilds it at load and a compacted log is
all that survives a restart. A request runs against the shard at once and yields a
:class:`ShardResult`: records to append, the response (None while the request is
parked), completions of requests parked earlier, and keyed timers. The runtime

* appends the records as one batch to the partition's leader replica (acks=all
  semantics: the partition's min.insync.replicas must hold),
* delivers the response and the completions only once the high watermark has passed
  everything the shard wrote so far, even for results without records: a response must
  never reveal state that a leader change could still lose; the commit timeout bounds
  the wait,
* arms and cancels the shard's timers on the broker's timer and feeds expiries back as
  ``on_timer(key)`` operations, never inline,
* loads a shard when this broker becomes leader of a partition (replaying the log from
  its start to its end: every record of a data batch with its offset and the batch's
  producer id and epoch, and every transaction marker of a control batch) and unloads
  it when leadership moves, as leadership events say; requests meanwhile fail with
  COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR.

All of that goes through a :class:`~kernel.coordination.partition_writer.PartitionWriter`
(the kernel's is backed by the replica manager) and a timer: the runtime never sees
the broker.

Everything runs on the broker's event loop, one operation at a time, so the shard needs
no locking and operations on one partition are totally ordered. Failures reach callers
as :class:`CoordinatorError` with the Kafka error code of the cause; mapping that to
what a given API answers is the caller's business (Kafka's coordinator services do the
same), which keeps this module free of any one coordinator's protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import struct
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from kernel.protocol.errors import KafkaError
from kernel.protocol.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    ControlRecordType,
    SimpleRecord,
    build_batch,
    build_control_batch,
    iter_batches,
    iter_records,
)
from kernel.purgatory import TimerTask
from kernel.replica.leadership import LeadershipChange, Role
from kernel.services import TransactionResult

if TYPE_CHECKING:
    from kernel.coordination.partition_writer import CommitWait, PartitionWriter

__all__ = [
    "CoordinatorError",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "ShardResult",
    "TransactionResult",
    "replay_batches",
]

# Kafka's offsets.commit.timeout.ms / transaction's equivalent: how long a response may
# wait for its records to be committed before the caller hears REQUEST_TIMED_OUT.
DEFAULT_COMMIT_TIMEOUT_MS = 5_000
# Bytes read per step while loading; the loop yields between steps.
LOAD_CHUNK_BYTES = 1 << 20


class CoordinatorError(KafkaError):
    """Why an operation got no response from its shard: NOT_COORDINATOR (this broker
    does not lead the partition), COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
    (the load failed), REQUEST_TIMED_OUT (the records were not committed in time), or
    the error of a failed append (NOT_ENOUGH_REPLICAS, MESSAGE_TOO_LARGE, ...)."""


# ------------------------------------------------------------------- shard contract


class TimerOperation(Protocol):
    """ScheduleTimer (has ``delay_ms``) or CancelTimer (has only ``key``)."""

    @property
    def key(self) -> Hashable: ...


class Completion(Protocol):
    @property
    def reply_to(self) -> Hashable: ...

    @property
    def response(self) -> Any: ...


class ShardResult(Protocol):
    """What every shard operation returns (Kafka's ``CoordinatorResult``).

    A result may also carry ``producer_id`` and ``producer_epoch`` (and the
    ``transactional_id`` they belong to): its records are then written as a
    transactional batch of that producer (Kafka's ``scheduleTransactionalWriteOperation``,
    e.g. TxnOffsetCommit), which the log tracks as an open transaction on the partition
    until a marker ends it (:meth:`CoordinatorRuntime.complete_transaction`). Without
    them (or with -1) the records are written without a producer id."""

    @property
    def records(self) -> Sequence[tuple[bytes, bytes | None]]: ...

    @property
    def response(self) -> Any: ...

    @property
    def completions(self) -> Sequence[Completion]: ...

    @property
    def timers(self) -> Sequence[TimerOperation]: ...


class CoordinatorShard(Protocol):
    """The state of one partition of the internal topic, without I/O (Kafka's
    ``CoordinatorShard``). At load the runtime replays the log in order: each record of
    a data batch through :meth:`replay` and each transaction marker through
    :meth:`replay_end_transaction` (a shard that keeps transactional state applies a
    producer's transactional records when its commit marker comes, as Kafka's
    coordinators do with transactional offset commits). An operation's own records are
    not replayed to the shard: its state already includes them."""

    def replay(self, offset: int, producer_id: int, producer_epoch: int,
               key: bytes, value: bytes | None) -> None:
        """Apply the record at ``offset`` (value None: a tombstone). ``producer_id`` and
        ``producer_epoch`` are its batch's (-1 when written without a producer id)."""

    def replay_end_transaction(self, offset: int, producer_id: int, producer_epoch: int,
                               result: TransactionResult) -> None:
        """The transaction of ``producer_id`` ended with the marker at ``offset``."""

    def on_loaded(self) -> ShardResult:
        """Every record was replayed: start serving (arm timers)."""

    def on_unloaded(self) -> ShardResult:
        """Leadership moved: answer parked requests (their completions go out at once)."""

    def on_timer(self, key: Any) -> ShardResult:
        """A timer armed by an earlier result fired."""


S = TypeVar("S", bound=CoordinatorShard)
T = TypeVar("T")

ShardOperation = Callable[[S, Hashable], ShardResult]
"""An operation gets the shard and the reply handle to park the request under."""


# ------------------------------------------------------------------------ loading

# A control record's key: version, then type (0 abort, 1 commit; others are not
# transaction markers: Kafka's leader-change and snapshot records).
_CONTROL_KEY = struct.Struct(">hh")


def replay_batches(shard: CoordinatorShard, data: bytes | memoryview,
                   offset: int) -> tuple[int, int]:
    """Replay the whole batches of ``data`` (read from the log at ``offset``) into
    ``shard``, skipping records below ``offset``; returns the offset after the last batch
    (``offset`` when none was whole) and how many records and markers were replayed."""
    replayed = 0
    for header, batch in iter_batches(data):
        if header.next_offset <= offset:
            continue
        producer_id, producer_epoch = header.producer_id, header.producer_epoch
        for record in iter_records(batch):
            if record.offset < offset or record.key is None:
                continue
            if header.is_control:
                result = _end_transaction_result(record.key)
                if result is not None:
                    shard.replay_end_transaction(record.offset, producer_id, producer_epoch,
                                                 result)
                    replayed += 1
            else:
                shard.replay(record.offset, producer_id, producer_epoch, record.key,
                             record.value)
                replayed += 1
        offset = header.next_offset
    return offset, replayed


def _end_transaction_result(key: bytes) -> TransactionResult | None:
    if len(key) < _CONTROL_KEY.size:
        raise KafkaError(ErrorCode.corrupt_message,
                         f"control record key of {len(key)} bytes, expected at least 4")
    _version, kind = _CONTROL_KEY.unpack_from(key)
    if kind == TransactionResult.COMMIT.value:
        return TransactionResult.COMMIT
    if kind == TransactionResult.ABORT.value:
        return TransactionResult.ABORT
    return None


# ---------------------------------------------------------------- per-partition state


class _State(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"


class _Callback(TimerTask):
    """A timer task that runs its callback on the next loop iteration, never inside
    ``Timer.add`` (a due task runs there), so a shard is never re-entered."""

    __slots__ = ("_callback", "_loop")

    def __init__(self, delay_ms: int, loop: asyncio.AbstractEventLoop,
                 callback: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self._loop = loop
        self._callback = callback

    def run(self) -> None:
        self._loop.call_soon(self._callback)


class Timer(Protocol):
    """Where the shards' timers run (the broker's timing wheel)."""

    def add(self, task: TimerTask) -> None: ...


class _CoordinatorPartition(Generic[S]):
    """One partition this broker leads (or is loading): its shard and what waits on it."""

    __slots__ = (
        "closed", "commit_waits", "index", "leader_epoch", "load_task", "shard", "state",
        "timers", "tp", "waiting", "written_offset",
    )

    def __init__(self, topic: str, index: int, leader_epoch: int) -> None:
        self.index = index
        self.tp = (topic, index)
        self.leader_epoch = leader_epoch
        self.state = _State.LOADING
        self.shard: S | None = None
        # End (exclusive) of everything replayed or appended: what responses wait for.
        self.written_offset = 0
        # The writer's waits for the high watermark, in offset order.
        self.commit_waits: dict[int, CommitWait] = {}
        # Reply handle -> the future its caller awaits (responded, deferred or parked).
        self.waiting: dict[Hashable, asyncio.Future[Any]] = {}
        self.timers: dict[Hashable, TimerTask] = {}
        self.load_task: asyncio.Task[None] | None = None
        self.closed = False


# ----------------------------------------------------------------------------- runtime


class CoordinatorRuntime(Generic[S]):
    """Shards of ``topic``'s partitions led by this broker, built by ``shard_factory``
    (called with the partition index), written through ``writer``, their timers on
    ``timer``. Call :meth:`start` once the topic may exist and :meth:`stop` at
    shutdown."""

    def __init__(
        self,
        writer: PartitionWriter,
        timer: Timer,
        topic: str,
        shard_factory: Callable[[int], S],
        *,
        logger: Any,
        commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS,
        load_chunk_bytes: int = LOAD_CHUNK_BYTES,
    ) -> None:
        self.topic = topic
        self._writer = writer
        self._timer = timer
        self._factory = shard_factory
        self._commit_timeout_ms = commit_timeout_ms
        self._load_chunk_bytes = load_chunk_bytes
        self._log: Any = logger.bind(component="coordinator", topic=topic)
        self._partitions: dict[int, _CoordinatorPartition[S]] = {}
        # Partition -> leader epoch, of the partitions the leadership events say we lead.
        self._led: dict[int, int] = {}
        self._handles = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Follow leadership from now on: load the partitions this broker leads."""
        self._loop = asyncio.get_running_loop()
        self._started = True
        self._writer.add_leadership_listener(self._on_leadership_change)

    async def stop(self) -> None:
        """Unload every shard: parked and waiting requests get NOT_COORDINATOR."""
        if self._started:
            self._writer.remove_leadership_listener(self._on_leadership_change)
        self._started = False
        self._led.clear()
        tasks = [ctx.load_task for ctx in self._partitions.values()
                 if ctx.load_task is not None and not ctx.load_task.done()]
        for ctx in list(self._partitions.values()):
            self._unload(ctx, "broker shutting down")
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- queries -----------------------------------------------------------------------

    def loaded_shards(self) -> dict[int, S]:
        """Active shards by partition, for metrics and admin listings. Read only."""
        return {i: ctx.shard for i, ctx in self._partitions.items()
                if ctx.state is _State.ACTIVE and ctx.shard is not None}

    def partition_states(self) -> dict[int, str]:
        """Partitions this broker leads: "loading", "active" or "failed"."""
        return {i: ctx.state.value for i, ctx in self._partitions.items()}

    # -- operations --------------------------------------------------------------------

    def write(self, partition: int, op: ShardOperation[S]) -> asyncio.Future[Any]:
        """Run ``op`` on the partition's shard now; the future resolves to its response
        once the shard's writes so far are committed (a parked request resolves when a
        later operation completes it). Raises :class:`CoordinatorError` at once when
        the shard is not active."""
        ctx = self._active(partition)
        assert self._loop is not None and ctx.shard is not None
        handle = next(self._handles)
        future: asyncio.Future[Any] = self._loop.create_future()
        ctx.waiting[handle] = future
        try:
            result = op(ctx.shard, handle)
        except BaseException:
            ctx.waiting.pop(handle, None)
            raise
        self._apply(ctx, result, handle)
        return future

    def read(self, partition: int, fn: Callable[[S], T]) -> asyncio.Future[T]:
        """``fn(shard)`` now; its value is delivered once the shard's writes so far are
        committed, like a response."""
        ctx = self._active(partition)
        assert self._loop is not None and ctx.shard is not None
        value = fn(ctx.shard)
        handle = next(self._handles)
        future: asyncio.Future[T] = self._loop.create_future()
        ctx.waiting[handle] = future
        self._deliver_when_committed(ctx, [(handle, value)])
        return future

    def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                             coordinator_epoch: int, result: TransactionResult,
                             timeout_ms: int | None = None) -> asyncio.Future[None]:
        """Write the marker ending ``producer_id``'s transaction into the partition and
        replay it to the shard (Kafka's ``scheduleTransactionCompletion``); the future
        resolves once the marker is committed (within ``timeout_ms``, default the commit
        timeout). Raises :class:`CoordinatorError` at once when the shard is not active,
        or the append's error (the log refuses a fenced coordinator epoch, a stale
        producer epoch, ...); the shard then saw nothing."""
        ctx = self._active(partition)
        assert self._loop is not None and ctx.shard is not None
        kind = (ControlRecordType.COMMIT if result is TransactionResult.COMMIT
                else ControlRecordType.ABORT)
        batch = build_control_batch(kind, producer_id=producer_id,
                                    producer_epoch=producer_epoch,
                                    coordinator_epoch=coordinator_epoch,
                                    timestamp=time.time_ns() // 1_000_000)
        try:
            end = self._writer.append(ctx.tp, batch)
        except KafkaError as e:
            raise CoordinatorError(e.error_code, e.message) from None
        ctx.written_offset = end
        handle = next(self._handles)
        future: asyncio.Future[None] = self._loop.create_future()
        ctx.waiting[handle] = future
        try:
            ctx.shard.replay_end_transaction(end - 1, producer_id, producer_epoch, result)
        except Exception:
            # The log has the marker, the shard does not: rebuild it from the log.
            self._log.exception("replaying a transaction marker failed", partition=ctx.index,
                                producer_id=producer_id)
            self._unload(ctx, "replaying a transaction marker failed")
            if self._started and self._led.get(ctx.index) == ctx.leader_epoch:
                self._schedule_load(ctx.index, ctx.leader_epoch)
            return future
        self._deliver_when_committed(ctx, [(handle, None)], timeout_ms)
        return future

    def _active(self, partition: int) -> _CoordinatorPartition[S]:
        ctx = self._partitions.get(partition)
        if ctx is None:
            raise CoordinatorError(ErrorCode.not_coordinator,
                                   f"this broker does not lead {self.topic}-{partition}")
        if ctx.state is _State.LOADING:
            raise CoordinatorError(ErrorCode.coordinator_load_in_progress,
                                   f"{self.topic}-{partition} is loading")
        if ctx.state is _State.FAILED:
            raise CoordinatorError(ErrorCode.coordinator_not_available,
                                   f"loading {self.topic}-{partition} failed")
        return ctx

    # -- applying results --------------------------------------------------------------

    def _apply(self, ctx: _CoordinatorPartition[S], result: ShardResult,
               handle: Hashable | None) -> None:
        self._apply_timers(ctx, result.timers)
        if result.records:
            try:
                self._append(ctx, result.records,
                             getattr(result, "producer_id", NO_PRODUCER_ID),
                             getattr(result, "producer_epoch", NO_PRODUCER_EPOCH))
            except KafkaError as e:
                self._fail_write(ctx, result, handle, e)
                return
        deliveries = [(c.reply_to, c.response) for c in result.completions]
        if handle is not None and result.response is not None:
            deliveries.append((handle, result.response))
        if deliveries:
            self._deliver_when_committed(ctx, deliveries)

    def _append(self, ctx: _CoordinatorPartition[S],
                records: Sequence[tuple[bytes, bytes | None]],
                producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH) -> None:
        transactional = producer_id >= 0
        batch = build_batch((SimpleRecord(value=v, key=k) for k, v in records),
                            base_timestamp=time.time_ns() // 1_000_000,
                            producer_id=producer_id if transactional else NO_PRODUCER_ID,
                            producer_epoch=producer_epoch if transactional
                            else NO_PRODUCER_EPOCH,
                            # As Kafka's runtime: sequence 0 (the log checks sequences
                            # of client appends only).
                            base_sequence=0 if transactional else NO_SEQUENCE,
                            is_transactional=transactional)
        # The high watermark may move inside this call (ISR of one): the writer then
        # ends earlier waits before this result is considered.
        ctx.written_offset = self._writer.append(ctx.tp, batch)

    def _fail_write(self, ctx: _CoordinatorPartition[S], result: ShardResult,
                    handle: Hashable | None, cause: KafkaError) -> None:
        """The shard's state is now ahead of its log: answer what depended on the lost
        records with the append's error and rebuild the shard from the log."""
        self._log.warning("coordinator append failed; reloading the partition",
                          partition=ctx.index, error=cause.error_code.name,
                          detail=cause.message)
        error = CoordinatorError(cause.error_code, cause.message)
        for completion in result.completions:
            self._fail(ctx, completion.reply_to, error)
        if handle is not None:
            self._fail(ctx, handle, error)
        self._unload(ctx, "append failed")
        if self._started and self._led.get(ctx.index) == ctx.leader_epoch:
            self._schedule_load(ctx.index, ctx.leader_epoch)

    def _deliver_when_committed(self, ctx: _CoordinatorPartition[S],
                                deliveries: list[tuple[Hashable, Any]],
                                timeout_ms: int | None = None) -> None:
        try:
            high_watermark = self._writer.high_watermark(ctx.tp)
        except KafkaError:
            error = CoordinatorError(ErrorCode.not_coordinator,
                                     f"{self.topic}-{ctx.index} is not hosted here")
            for handle, _ in deliveries:
                self._fail(ctx, handle, error)
            return
        if high_watermark >= ctx.written_offset:
            self._deliver(ctx, deliveries)
            return
        # Earlier waits have lower offsets and started first: the writer ends them first,
        # so responses keep the order of their operations.
        offset = ctx.written_offset
        key = next(self._handles)
        timeout = self._commit_timeout_ms if timeout_ms is None else timeout_ms
        wait = self._writer.wait_until_committed(
            ctx.tp, offset, timeout,
            lambda committed: self._commit_wait_over(ctx, key, offset, deliveries, committed,
                                                     timeout),
        )
        if not wait.is_completed:
            ctx.commit_waits[key] = wait

    def _commit_wait_over(self, ctx: _CoordinatorPartition[S], key: int, offset: int,
                          deliveries: list[tuple[Hashable, Any]], committed: bool,
                          timeout_ms: int) -> None:
        ctx.commit_waits.pop(key, None)
        if ctx.closed:
            error = CoordinatorError(ErrorCode.not_coordinator,
                                     f"{self.topic}-{ctx.index} was unloaded")
        elif committed:
            self._deliver(ctx, deliveries)
            return
        else:
            error = CoordinatorError(
                ErrorCode.request_timed_out,
                f"records up to offset {offset - 1} of {self.topic}-{ctx.index} were "
                f"not committed within {timeout_ms} ms",
            )
        for handle, _ in deliveries:
            self._fail(ctx, handle, error)

    @staticmethod
    def _deliver(ctx: _CoordinatorPartition[S], deliveries: list[tuple[Hashable, Any]]) -> None:
        for handle, response in deliveries:
            future = ctx.waiting.pop(handle, None)
            if future is not None and not future.done():
                future.set_result(response)

    @staticmethod
    def _fail(ctx: _CoordinatorPartition[S], handle: Hashable, error: Exception) -> None:
        future = ctx.waiting.pop(handle, None)
        if future is not None and not future.done():
            future.set_exception(error)

    # -- timers ------------------------------------------------------------------------

    def _apply_timers(self, ctx: _CoordinatorPartition[S],
                      operations: Sequence[TimerOperation]) -> None:
        timers = ctx.timers
        loop = self._loop
        assert loop is not None
        for operation in operations:
            key = operation.key
            previous = timers.pop(key, None)
            if previous is not None:
                previous.cancel()
            delay_ms = getattr(operation, "delay_ms", None)
            if delay_ms is None:
                continue
            task = _Callback(max(0, delay_ms), loop, lambda: None)
            task._callback = (lambda k=key, t=task: self._on_timer(ctx, k, t))
            timers[key] = task
            self._timer.add(task)

    def _on_timer(self, ctx: _CoordinatorPartition[S], key: Hashable, task: TimerTask) -> None:
        # A timer replaced or cancelled after it was already due must not fire.
        if ctx.closed or ctx.timers.get(key) is not task:
            return
        del ctx.timers[key]
        shard = ctx.shard
        assert shard is not None
        try:
            result = shard.on_timer(key)
        except Exception:
            self._log.exception("coordinator timer failed", partition=ctx.index, key=repr(key))
            return
        self._apply(ctx, result, None)

    # -- loading and unloading ---------------------------------------------------------

    def _on_leadership_change(self, change: LeadershipChange) -> None:
        """The replica of one partition changed role (Kafka's onElection/onResignation):
        it already has its new role, so a load can start reading at once."""
        if not self._started or change.topic != self.topic:
            return
        index = change.partition
        ctx = self._partitions.get(index)
        if change.role is Role.LEADER:
            self._led[index] = change.leader_epoch
            if ctx is not None and ctx.leader_epoch == change.leader_epoch:
                return
            if ctx is not None:
                self._unload(ctx, "leader epoch changed")
            self._schedule_load(index, change.leader_epoch)
            return
        self._led.pop(index, None)
        if ctx is not None:
            self._unload(ctx, "leadership moved" if change.role is Role.FOLLOWER
                         else "partition deleted")

    def _schedule_load(self, index: int, leader_epoch: int) -> None:
        ctx: _CoordinatorPartition[S] = _CoordinatorPartition(self.topic, index, leader_epoch)
        self._partitions[index] = ctx
        assert self._loop is not None
        ctx.load_task = self._loop.create_task(self._load(ctx))

    async def _load(self, ctx: _CoordinatorPartition[S]) -> None:
        started = time.monotonic()
        try:
            shard = self._factory(ctx.index)
            end_offset, replayed = await self._replay(ctx, shard)
        except asyncio.CancelledError:
            raise
        except Exception:
            if not ctx.closed:
                self._log.exception("coordinator load failed", partition=ctx.index)
                ctx.state = _State.FAILED
            return
        if ctx.closed:
            return
        ctx.shard = shard
        ctx.written_offset = end_offset
        ctx.state = _State.ACTIVE
        self._log.debug("coordinator partition loaded", partition=ctx.index,
                        records=replayed, end_offset=end_offset,
                        ms=round((time.monotonic() - started) * 1000, 1))
        self._apply(ctx, shard.on_loaded(), None)

    async def _replay(self, ctx: _CoordinatorPartition[S], shard: S) -> tuple[int, int]:
        """Replay the whole log, including records above the high watermark (as Kafka's
        loader does); responses then wait for those too."""
        writer = self._writer
        offset = writer.log_start_offset(ctx.tp)
        replayed = 0
        while offset < writer.log_end_offset(ctx.tp) and not ctx.closed:
            data = writer.read(ctx.tp, offset, self._load_chunk_bytes)
            next_offset, count = replay_batches(shard, data, offset)
            if next_offset == offset:
                break  # nothing readable at or after offset (compacted away)
            offset = next_offset
            replayed += count
            # Other partitions and requests get the loop between chunks.
            await asyncio.sleep(0)
        return max(offset, writer.log_end_offset(ctx.tp)), replayed

    def _unload(self, ctx: _CoordinatorPartition[S], reason: str) -> None:
        if ctx.closed:
            return
        ctx.closed = True
        if self._partitions.get(ctx.index) is ctx:
            del self._partitions[ctx.index]
        if ctx.load_task is not None and not ctx.load_task.done():
            ctx.load_task.cancel()
        for task in ctx.timers.values():
            task.cancel()
        ctx.timers.clear()
        not_coordinator = CoordinatorError(
            ErrorCode.not_coordinator, f"{self.topic}-{ctx.index} unloaded: {reason}"
        )
        if ctx.state is _State.ACTIVE and ctx.shard is not None:
            try:
                result = ctx.shard.on_unloaded()
            except Exception:
                self._log.exception("coordinator unload failed", partition=ctx.index)
            else:
                # Errors for parked requests: nothing durable to wait for.
                self._deliver(ctx, [(c.reply_to, c.response) for c in result.completions])
        for wait in list(ctx.commit_waits.values()):
            wait.force_complete()
        for handle in list(ctx.waiting):
            self._fail(ctx, handle, not_coordinator)
        ctx.shard = None
        self._log.debug("coordinator partition unloaded", partition=ctx.index, reason=reason)
