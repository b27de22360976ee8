"""The asyncio driver of the sans-io :class:`~.core.RaftNode` (the I/O half of Kafka's
``KafkaRaftClient``: its poll loop, ``NetworkChannel`` and ``QuorumStateStore``).

One task owns the node: it takes one event at a time (a request, a response, a failed
send, an append, a flush done, a timer at ``next_deadline``), feeds it to the node and
executes the actions it returns **in order**:

- ``PersistQuorumState``: quorum-state written (tmp, fsync, rename) in a worker thread,
  and awaited, before any later action runs (a granted vote leaves only once durable);
- ``Flush``: the log fsynced in a worker thread, then ``on_flushed``. The task waits, so
  no other call touches the log meanwhile; the event loop keeps serving;
- ``Send``: one connection per voter (``controller.quorum.voters``' endpoint), one request
  in flight each; the answer or the failure comes back as an event;
- ``Respond``: the future of the request's handler is resolved (a parked Fetch later);
- ``Commit`` / ``LeaderChanged`` / ``Fatal``: the callbacks the plugin gave.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from kernel.api.errors import BrokerConnectionError
from kernel.api.protocol import BrokerConnection

from . import messages as m
from . import quorum_store
from .actions import (
    Action,
    Commit,
    Fatal,
    Flush,
    LeaderChanged,
    PersistQuorumState,
    Respond,
    Send,
)
from .core import RaftNode
from .kafka_log import KafkaRaftLog

__all__ = ["RaftDriver"]

Event = Callable[[int], list[Action]]


def _now_ms() -> int:
    return int(time.time() * 1000)  # wall clock, as Kafka's (DescribeQuorum shows it)


class RaftDriver:
    """Runs one node: ``start``, ``handle`` (inbound RPCs), ``append`` (leader), ``stop``."""

    def __init__(self, node: RaftNode, log: KafkaRaftLog, *, quorum_dir: Path,
                 voters: dict[int, tuple[str, int]], logger: Any,
                 on_commit: Callable[[int], None],
                 on_leader: Callable[[int, int | None], None],
                 request_timeout_ms: int, client_id: str) -> None:
        self.node = node
        self.log = log
        self._quorum_dir = quorum_dir
        self._log = logger
        self._on_commit = on_commit
        self._on_leader = on_leader
        self._connections = {
            voter: BrokerConnection(host, port, client_id=client_id,
                                    timeout_s=request_timeout_ms / 1000)
            for voter, (host, port) in voters.items() if voter != node.node_id}
        self._sends: dict[int, asyncio.Task[None]] = {}
        self._events: deque[Event] = deque()
        self._wake = asyncio.Event()
        self._pending: dict[int, asyncio.Future[m.RaftResponse]] = {}
        self._request_ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self.fatal: str | None = None

    # -- the plugin's side ----------------------------------------------------------------

    def start(self) -> None:
        self._post(self.node.start)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="raft-driver")

    async def stop(self) -> None:
        """Resign if leading (EndQuorumEpoch to the voters, best effort), then stop."""
        if self._task is not None and not self._task.done() and self.fatal is None:
            self._post(self.node.resign)
            await asyncio.sleep(0.1)  # let EndQuorumEpoch go out
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in self._sends.values():
            task.cancel()
        await asyncio.gather(*self._sends.values(), return_exceptions=True)
        for connection in self._connections.values():
            connection.close()
        for future in self._pending.values():
            if not future.done():
                future.cancel()
        await asyncio.get_running_loop().run_in_executor(None, self.log.close)

    def handle(self, request: m.RaftRequest) -> Awaitable[m.RaftResponse]:
        """An inbound Raft RPC; the answer comes when the node responds (a Fetch with
        nothing new waits up to its MaxWaitMs)."""
        request_id = next(self._request_ids)
        future: asyncio.Future[m.RaftResponse] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._post(lambda now: self.node.on_request(request_id, request, now))
        return future

    async def append(self, records: Sequence[bytes] | Callable[[int], Sequence[bytes]]
                     ) -> int:
        """Append as leader (raises NotLeaderError); the offset of the last record.
        ``records`` may be a function of the offset the batch will land at, called in
        the node's turn (no other append between: the controller's broker epochs are
        that offset); what it raises is raised here, and nothing is appended when it
        returns no records (-1)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def event(now: int) -> list[Action]:
            try:
                batch = records(self.log.end_offset) if callable(records) else records
                if not batch:
                    future.set_result(-1)
                    return []
                actions, last = self.node.append(batch, now)
            except Exception as e:  # NotLeaderError, or the builder's own refusal
                future.set_exception(e)
                return []
            future.set_result(last)
            return actions

        self._post(event)
        return await future

    # -- the loop -------------------------------------------------------------------------

    def _post(self, event: Event) -> None:
        self._events.append(event)
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.fatal is None:
            if not self._events:
                delay = max(self.node.next_deadline() - _now_ms(), 0) / 1000
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(delay, 60.0)):
                        await self._wake.wait()
            event = self._events.popleft() if self._events else self.node.on_tick
            actions = deque(event(_now_ms()))
            while actions:
                action = actions.popleft()
                if isinstance(action, PersistQuorumState):
                    text = quorum_store.encode(action.record, 0, self.node.quorum.voters.ids)
                    await loop.run_in_executor(
                        None, quorum_store.write_atomic, self._quorum_dir, text)
                elif isinstance(action, Flush):
                    await loop.run_in_executor(None, self.log.flush, action.offset)
                    actions.extend(self.node.on_flushed(_now_ms()))
                elif isinstance(action, Send):
                    self._send(action)
                elif isinstance(action, Respond):
                    future = self._pending.pop(action.request_id, None)
                    if future is not None and not future.done():
                        future.set_result(action.response)
                elif isinstance(action, Commit):
                    self._on_commit(action.high_watermark)
                elif isinstance(action, LeaderChanged):
                    self._on_leader(action.epoch, action.leader_id)
                elif isinstance(action, Fatal):
                    self.fatal = action.reason
                    self._log.error("the metadata quorum stopped on this node",
                                    reason=action.reason)

    def _send(self, action: Send) -> None:
        old = self._sends.pop(action.destination, None)
        if old is not None and not old.done():
            old.cancel()  # the node gave up on it (timed out): its answer is not wanted
        connection = self._connections.get(action.destination)
        if connection is None:
            self._post(lambda now: self.node.on_send_failed(
                action.destination, action.correlation_id, now))
            return
        self._sends[action.destination] = asyncio.get_running_loop().create_task(
            self._exchange(connection, action))

    async def _exchange(self, connection: BrokerConnection, action: Send) -> None:
        destination, correlation_id = action.destination, action.correlation_id
        try:
            response = await connection.request(action.request)
        except BrokerConnectionError as e:
            self._log.debug("raft request failed", destination=destination, reason=str(e))
            self._post(lambda now: self.node.on_send_failed(destination, correlation_id, now))
            return
        self._post(lambda now: self.node.on_response(destination, correlation_id,
                                                     response, now))
