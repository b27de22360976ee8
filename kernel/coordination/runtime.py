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
  never reveal state that a leader change could still lose. Waiting is a delayed
  operation in the broker's Produce purgatory, watched on the partition, as Kafka's
  coordinators waited through ``appendRecords(acks=-1)``: the replica manager's
  high-watermark wake-ups complete it, and its timeout is the commit timeout,
* arms and cancels the shard's timers on the broker's timer and feeds expiries back as
  ``on_timer(key)`` operations, never inline,
* loads a shard when this broker becomes leader of a partition (replaying the log from
  its start to its end) and unloads it when leadership moves, following the cluster
  image; requests meanwhile fail with COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR.

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
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from kernel.cluster import ClusterImage
from kernel.log.records import SimpleRecord, build_batch, iter_batches, iter_records
from kernel.protocol.errors import KafkaError
from kernel.purgatory import DelayedOperation, TimerTask

if TYPE_CHECKING:
    from kernel.replica.partition import Partition
    from kernel.server import Broker

__all__ = [
    "CoordinatorError",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "ShardResult",
]

# Kafka's offsets.commit.timeout.ms / transaction's equivalent: how long a response may
# wait for its records to be committed before the caller hears REQUEST_TIMED_OUT.
DEFAULT_COMMIT_TIMEOUT_MS = 5_000
# Bytes read per step while loading; the loop yields between steps.
LOAD_CHUNK_BYTES = 1 << 20
# A load waits this long for the replica manager to make the partition's replica leader
# in the same epoch as the image that scheduled the load.
LEADERSHIP_WAIT_MS = 5_000


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
    """What every shard operation returns (Kafka's ``CoordinatorResult``)."""

    @property
    def records(self) -> Sequence[tuple[bytes, bytes | None]]: ...

    @property
    def response(self) -> Any: ...

    @property
    def completions(self) -> Sequence[Completion]: ...

    @property
    def timers(self) -> Sequence[TimerOperation]: ...


class CoordinatorShard(Protocol):
    """The state of one partition of the internal topic, without I/O."""

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record (value None: a tombstone), at load in log order."""

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


class _DelayedCommit(DelayedOperation):
    """Responses held back until the partition's high watermark reaches ``offset``."""

    __slots__ = ("ctx", "deliveries", "offset", "partition", "runtime")

    def __init__(self, runtime: CoordinatorRuntime[Any], ctx: _CoordinatorPartition[Any],
                 partition: Partition, offset: int,
                 deliveries: list[tuple[Hashable, Any]], timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.runtime = runtime
        self.ctx = ctx
        self.partition = partition
        self.offset = offset
        self.deliveries = deliveries

    def try_complete(self) -> bool:
        if self.ctx.closed or self.partition.high_watermark >= self.offset:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.runtime._commit_wait_over(self)

    def on_expiration(self) -> None:
        pass


class _CoordinatorPartition(Generic[S]):
    """One partition this broker leads (or is loading): its shard and what waits on it."""

    __slots__ = (
        "closed", "commit_waits", "index", "leader_epoch", "load_task", "shard", "state",
        "timers", "topic_id", "waiting", "written_offset",
    )

    def __init__(self, index: int, leader_epoch: int, topic_id: uuid.UUID) -> None:
        self.index = index
        self.leader_epoch = leader_epoch
        self.topic_id = topic_id
        self.state = _State.LOADING
        self.shard: S | None = None
        # End (exclusive) of everything replayed or appended: what responses wait for.
        self.written_offset = 0
        # Delayed operations in the Produce purgatory, in offset order.
        self.commit_waits: dict[int, _DelayedCommit] = {}
        # Reply handle -> the future its caller awaits (responded, deferred or parked).
        self.waiting: dict[Hashable, asyncio.Future[Any]] = {}
        self.timers: dict[Hashable, TimerTask] = {}
        self.load_task: asyncio.Task[None] | None = None
        self.closed = False


# ----------------------------------------------------------------------------- runtime


class CoordinatorRuntime(Generic[S]):
    """Shards of ``topic``'s partitions led by this broker, built by ``shard_factory``
    (called with the partition index). Call :meth:`start` once the topic may exist and
    :meth:`stop` at shutdown."""

    def __init__(
        self,
        broker: Broker,
        topic: str,
        shard_factory: Callable[[int], S],
        *,
        commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS,
        load_chunk_bytes: int = LOAD_CHUNK_BYTES,
    ) -> None:
        self.topic = topic
        self._broker = broker
        self._broker_id = broker.config.broker_id
        self._factory = shard_factory
        self._commit_timeout_ms = commit_timeout_ms
        self._load_chunk_bytes = load_chunk_bytes
        self._log: Any = broker.log.bind(component="coordinator", topic=topic)
        self._partitions: dict[int, _CoordinatorPartition[S]] = {}
        self._handles = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Follow the cluster image from now on: load the partitions this broker leads."""
        self._loop = asyncio.get_running_loop()
        self._started = True
        metadata = self._broker.metadata
        metadata.add_listener(self._on_image)
        self._on_image(None, metadata.image)

    async def stop(self) -> None:
        """Unload every shard: parked and waiting requests get NOT_COORDINATOR."""
        self._started = False
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

    def _active(self, partition: int) -> _CoordinatorPartition[S]:
        ctx = self._partitions.get(partition)
        if ctx is None:
            raise CoordinatorError(
                ErrorCode.not_coordinator,
                f"broker {self._broker_id} does not lead {self.topic}-{partition}",
            )
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
                self._append(ctx, result.records)
            except KafkaError as e:
                self._fail_write(ctx, result, handle, e)
                return
        deliveries = [(c.reply_to, c.response) for c in result.completions]
        if handle is not None and result.response is not None:
            deliveries.append((handle, result.response))
        if deliveries:
            self._deliver_when_committed(ctx, deliveries)

    def _append(self, ctx: _CoordinatorPartition[S],
                records: Sequence[tuple[bytes, bytes | None]]) -> None:
        partition = self._leader_partition(ctx)
        now_ms = time.time_ns() // 1_000_000
        batch = build_batch((SimpleRecord(value=v, key=k) for k, v in records),
                            base_timestamp=now_ms)
        # The high watermark may move inside this call (ISR of one): the purgatory then
        # completes earlier waits before this result is considered.
        info = self._broker.replicas.append_records(partition, batch, -1, now_ms)
        ctx.written_offset = info.last_offset + 1

    def _leader_partition(self, ctx: _CoordinatorPartition[S]) -> Partition:
        partition = self._broker.replicas.get_partition(self.topic, ctx.index)
        if partition is None or not partition.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"broker {self._broker_id} no longer leads {self.topic}-{ctx.index}")
        return partition

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
        image = self._broker.metadata.image
        state = image.partition(self.topic, ctx.index)
        topic = image.topic(self.topic)
        if self._started and state is not None and topic is not None \
                and state.leader == self._broker_id:
            self._schedule_load(ctx.index, state.leader_epoch, topic.topic_id)

    def _deliver_when_committed(self, ctx: _CoordinatorPartition[S],
                                deliveries: list[tuple[Hashable, Any]]) -> None:
        partition = self._broker.replicas.get_partition(self.topic, ctx.index)
        if partition is None:
            error = CoordinatorError(ErrorCode.not_coordinator,
                                     f"{self.topic}-{ctx.index} is not hosted here")
            for handle, _ in deliveries:
                self._fail(ctx, handle, error)
            return
        if partition.high_watermark >= ctx.written_offset:
            self._deliver(ctx, deliveries)
            return
        # Earlier waits have lower offsets and were watched first: the purgatory completes
        # them first, so responses keep the order of their operations.
        wait = _DelayedCommit(self, ctx, partition, ctx.written_offset, deliveries,
                              self._commit_timeout_ms)
        if not self._broker.produce_purgatory.try_complete_else_watch(wait, [partition.key]):
            ctx.commit_waits[id(wait)] = wait

    def _commit_wait_over(self, wait: _DelayedCommit) -> None:
        ctx = wait.ctx
        ctx.commit_waits.pop(id(wait), None)
        if ctx.closed:
            error = CoordinatorError(ErrorCode.not_coordinator,
                                     f"{self.topic}-{ctx.index} was unloaded")
        elif wait.partition.high_watermark >= wait.offset:
            self._deliver(ctx, wait.deliveries)
            return
        else:
            error = CoordinatorError(
                ErrorCode.request_timed_out,
                f"records up to offset {wait.offset - 1} of {self.topic}-{ctx.index} were "
                f"not committed within {self._commit_timeout_ms} ms",
            )
        for handle, _ in wait.deliveries:
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
            self._broker.timer.add(task)

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

    def _on_image(self, old: ClusterImage | None, new: ClusterImage) -> None:
        if not self._started:
            return
        topic = new.topic(self.topic)
        led: dict[int, tuple[int, uuid.UUID]] = {}
        if topic is not None:
            for index, state in topic.partitions.items():
                if state.leader == self._broker_id:
                    led[index] = (state.leader_epoch, topic.topic_id)
        for index, ctx in list(self._partitions.items()):
            if led.get(index) != (ctx.leader_epoch, ctx.topic_id):
                self._unload(ctx, "leadership moved")
        for index, (epoch, topic_id) in led.items():
            if index not in self._partitions:
                self._schedule_load(index, epoch, topic_id)

    def _schedule_load(self, index: int, leader_epoch: int, topic_id: uuid.UUID) -> None:
        ctx: _CoordinatorPartition[S] = _CoordinatorPartition(index, leader_epoch, topic_id)
        self._partitions[index] = ctx
        assert self._loop is not None
        ctx.load_task = self._loop.create_task(self._load(ctx))

    async def _load(self, ctx: _CoordinatorPartition[S]) -> None:
        started = time.monotonic()
        try:
            partition = await self._wait_for_leadership(ctx)
            shard = self._factory(ctx.index)
            end_offset, replayed = await self._replay(ctx, partition, shard)
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

    async def _wait_for_leadership(self, ctx: _CoordinatorPartition[S]) -> Partition:
        """Loads run as tasks, so every listener of the image change that scheduled one
        (the replica manager's too) has run; still, do not trust ordering between
        listeners: wait until the local replica leads in the image's epoch."""
        deadline = time.monotonic() + LEADERSHIP_WAIT_MS / 1000
        while True:
            partition = self._broker.replicas.get_partition(self.topic, ctx.index)
            if (partition is not None and partition.is_leader
                    and partition.leader_epoch == ctx.leader_epoch):
                return partition
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.not_leader_or_follower,
                                 f"the replica of {self.topic}-{ctx.index} did not become "
                                 f"leader in epoch {ctx.leader_epoch}")
            await asyncio.sleep(0.01)

    async def _replay(self, ctx: _CoordinatorPartition[S], partition: Partition,
                      shard: S) -> tuple[int, int]:
        """Replay the whole log, including records above the high watermark (as Kafka's
        loader does); responses then wait for those too. Control batches (transaction
        markers) are skipped: no shard here keeps pending transactional state yet."""
        log = partition.log
        offset = log.log_start_offset
        replayed = 0
        while offset < log.log_end_offset and not ctx.closed:
            data = log.read(offset, self._load_chunk_bytes).records
            progressed = False
            for header, batch in iter_batches(data):
                if header.next_offset <= offset:
                    continue
                if not header.is_control:
                    for record in iter_records(batch):
                        if record.offset >= offset and record.key is not None:
                            shard.replay(record.key, record.value)
                            replayed += 1
                offset = header.next_offset
                progressed = True
            if not progressed:
                break  # nothing readable at or after offset (compacted away)
            # Other partitions and requests get the loop between chunks.
            await asyncio.sleep(0)
        return max(offset, log.log_end_offset), replayed

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
