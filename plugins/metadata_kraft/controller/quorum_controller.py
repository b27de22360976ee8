"""The active controller of a quorum (Kafka's ``QuorumController``): only the Raft leader
is active, once its state machine has replayed its own epoch's LeaderChange.

An operation runs a sans-io rule (``cluster_control``, ``producer_ids``,
``alter_partition``) on the **pending** state, committed plus appended-not-committed,
in the Raft node's turn, so the offset it is given is where its batch lands (a new
broker epoch is that offset). Its records are replayed into the pending state and
appended as one batch in the current epoch; the answer goes once the high watermark
passes the batch (an operation without records waits for the last batch appended, as
Kafka's purgatory does). Losing the leadership fails what waits with NOT_CONTROLLER and
drops the pending state: the next activation starts again from the committed image.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kernel.api.errors import ErrorCode, KafkaError

from ..image import MetadataDelta
from ..log import MetadataLogError
from ..records.schema import FeatureLevelRecord
from ..records.serde import encode_value
from .cluster_control import METADATA_VERSION, ClusterControl
from .state import ControllerResult, ControllerState, as_written

__all__ = ["BOOTSTRAP_METADATA_VERSION", "QuorumController"]

# metadata.version a new cluster starts at: 4.3-IV0, as Kafka 4.3.1's
# `kafka-storage format` finalizes it (backend.METADATA_VERSION of the single node).
BOOTSTRAP_METADATA_VERSION = 30

# A rule: (pending state, offset its batch lands at, now in ms) -> records + answer.
Operation = Callable[[ControllerState, int, int], ControllerResult[Any]]
Append = Callable[[Callable[[int], Sequence[bytes]]], Awaitable[int]]


def _now_ms() -> int:
    return int(time.monotonic() * 1000)  # sessions measure elapsed time only


class QuorumController:
    """Wired by the quorum node: ``on_leader`` and ``on_commit`` from its Raft driver,
    ``committed()`` its replayed state, ``append`` the driver's, ``leads(epoch)`` whether
    the Raft node is the leader of that epoch right now."""

    def __init__(self, *, node_id: int, cluster_id: str, append: Append,
                 committed: Callable[[], ControllerState],
                 applied_offset: Callable[[], int], leads: Callable[[int], bool],
                 session_timeout_ms: int, heartbeat_interval_ms: int, logger: Any) -> None:
        self.node_id = node_id
        self._append = append
        self._committed = committed
        self._applied_offset = applied_offset
        self._leads = leads
        self._log = logger
        self.cluster_control = ClusterControl(cluster_id, session_timeout_ms)
        self._fence_interval_s = max(heartbeat_interval_ms // 2, 1) / 1000
        self._claim: tuple[int, int] | None = None  # (epoch, its start offset) while leader
        self._pending: ControllerState | None = None  # set while active
        self._high_watermark = 0
        self._last_appended = -1  # the last offset this activation appended
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self._duties: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        return self._pending is not None

    @property
    def epoch(self) -> int | None:
        return None if self._claim is None else self._claim[0]

    # -- the Raft node's events -------------------------------------------------------

    def on_leader(self, epoch: int, leader_id: int | None, epoch_start: int) -> None:
        if leader_id == self.node_id:
            if self._claim is None or self._claim[0] != epoch:
                self._renounce()
                self._claim = (epoch, epoch_start)
                self._maybe_activate()
        elif self._claim is not None:
            self._renounce()

    def on_commit(self, high_watermark: int) -> None:
        self._high_watermark = high_watermark
        self._maybe_activate()
        still = []
        for last, future in self._waiting:
            if last < high_watermark:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((last, future))
        self._waiting = still

    async def stop(self) -> None:
        self._renounce()

    def _maybe_activate(self) -> None:
        """Active once the committed image holds the epoch's LeaderChange (and so every
        earlier record): sessions restart from now, nobody is fenced for the failover."""
        if self._claim is None or self._pending is not None or \
                self._applied_offset() <= self._claim[1]:
            return
        state = self._committed()
        self.cluster_control.activate(state, _now_ms())
        self._pending = state
        self._last_appended = -1
        self._log.info("active controller", node_id=self.node_id, epoch=self._claim[0],
                       brokers=sorted(state.registrations))
        self._duties = asyncio.get_running_loop().create_task(
            self._duties_while_active(bootstrap=METADATA_VERSION not in state.features),
            name="controller-duties")

    def _renounce(self) -> None:
        if self._claim is not None and self._pending is not None:
            self._log.info("no longer the active controller", node_id=self.node_id,
                           epoch=self._claim[0])
        self._claim = None
        self._pending = None
        if self._duties is not None:
            self._duties.cancel()
            self._duties = None
        waiting, self._waiting = self._waiting, []
        for _, future in waiting:
            if not future.done():
                future.set_exception(_not_controller())

    # -- operations -------------------------------------------------------------------

    async def run(self, operation: Operation) -> Any:
        """Run ``operation`` as the active controller; its answer once committed."""
        if self._claim is None or self._pending is None:
            raise _not_controller()
        epoch = self._claim[0]
        results: list[ControllerResult[Any]] = []

        def build(offset: int) -> list[bytes]:
            pending = self._pending
            if pending is None or self.epoch != epoch or not self._leads(epoch):
                raise _not_controller()
            result = operation(pending, offset, _now_ms())
            results.append(result)
            if not result.records:
                return []
            delta = MetadataDelta(pending.image, pending.next_producer_id,
                                  broker_registrations=pending.registrations)
            try:
                for i, record in enumerate(result.records):
                    delta.replay(record, offset + i)
            except MetadataLogError as e:
                # Records the image cannot hold (a listener's unknown security protocol):
                # nothing is appended, the pending state stays, the sender is refused.
                self._log.warning("a controller operation's records are refused",
                                  reason=str(e))
                raise KafkaError(ErrorCode.invalid_request, str(e)) from None
            encoded = [encode_value(as_written(r)) for r in result.records]
            self._pending = ControllerState.of(delta, pending.features)
            return encoded

        try:
            last = await self._append(build)
        except KafkaError:
            raise
        except Exception as e:
            if not results or self.epoch != epoch:  # the Raft node is no longer leader
                raise _not_controller() from None
            self._log.error("a controller operation failed", reason=str(e))
            self._renounce()  # the pending state may hold records never appended
            raise KafkaError(ErrorCode.unknown_server_error, str(e)) from None
        if last >= 0:
            self._last_appended = last
        await self._committed_past(self._last_appended, epoch)
        return results[0].response

    async def _committed_past(self, offset: int, epoch: int) -> None:
        if offset < self._high_watermark:
            return
        if self.epoch != epoch:
            raise _not_controller()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((offset, future))
        await future

    async def _duties_while_active(self, *, bootstrap: bool) -> None:
        """A new cluster's first records (Kafka's bootstrap metadata.version), then
        ReplicationControlManager.maybeFenceOneStaleBroker every half heartbeat
        interval, one broker an operation (each fencing's elections see the previous
        one's)."""
        try:
            if bootstrap:
                record = FeatureLevelRecord(name=METADATA_VERSION,
                                            feature_level=BOOTSTRAP_METADATA_VERSION)
                await self.run(lambda state, offset, now: ControllerResult((record,), None))
            while True:
                await asyncio.sleep(self._fence_interval_s)
                while await self.run(lambda state, offset, now:
                                     self.cluster_control.fence_one_stale_broker(state, now)
                                     ) is not None:
                    pass
        except KafkaError:
            return  # no longer active: the next activation starts its own


def _not_controller() -> KafkaError:
    return KafkaError(ErrorCode.not_controller, "this controller is not the active one")
