"""The ZooKeeper connection as the broker shows and uses it (issue 32: a lost metadata
connection is visible): each change of the session's state is one log line and moves
the metadata_health() counts; a change a client asked for is written only while the
connection is up, so it is never queued behind a lost one and sent after its client was
answered; a CreateTopics answered with an error while its write may still land is
undone if it lands."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    SessionExpiredError,
)

from kernel.api.cluster import ClusterImage, MetadataHealth
from kernel.api.errors import ErrorCode, KafkaError

from .watcher import CHANGE_TIMEOUT_S
from .zkclient import KazooState, ZkClient

T = TypeVar("T")
# How long a change waits for a lost connection to come back before it is answered
# REQUEST_TIMED_OUT: a blip (a ZooKeeper leader election) is ridden out, a stopped
# ZooKeeper is told to the client while it still waits for the answer.
RECONNECT_WAIT_S = 5.0


class ZkConnection:
    """The session's state as kazoo last told it, Kafka's SessionExpireListener counts
    (ZooKeeperDisconnectsPerSec, ZooKeeperExpiresPerSec) and the guarded write."""

    def __init__(self, zk: ZkClient, logger: Any) -> None:
        self._zk = zk
        self._log = logger
        self.state: str = KazooState.CONNECTED
        self.disconnects = 0
        self.expirations = 0
        self._up = asyncio.Event()
        # Topics whose CreateTopics was answered with an error while its write may
        # still reach ZooKeeper (sent to a frozen server): name -> topic id.
        self._abandoned: dict[str, uuid.UUID] = {}

    def started(self) -> None:
        self._up.set()

    def health(self, *, started: bool, active_controller: bool) -> MetadataHealth:
        return MetadataHealth(
            connected=started and self.state == KazooState.CONNECTED,
            active_controller=active_controller, fenced_brokers=0,
            disconnects=self.disconnects, session_expirations=self.expirations)

    def changed(self, state: str, broker_id: int) -> str:
        """kazoo's SUSPENDED (the connection is lost, the session may live on), LOST (the
        session expired) or CONNECTED: one log line; the previous state."""
        previous, self.state = self.state, state
        if state == KazooState.CONNECTED:
            self._up.set()
            self._log.info("ZooKeeper connection re-established",
                           session="new" if previous == KazooState.LOST else "kept")
            return previous
        self._up.clear()
        if state == KazooState.SUSPENDED:
            self.disconnects += 1
            self._log.warning("ZooKeeper connection lost; metadata changes wait for it "
                              "(admin requests answer REQUEST_TIMED_OUT)",
                              zookeeper=self._zk.connect)
        elif state == KazooState.LOST:
            self.expirations += 1
            self._log.warning("ZooKeeper session expired; registering again once "
                              "reconnected", broker_id=broker_id)
        return previous

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A change a client asked for, on the ZooKeeper thread: ZooKeeper out of reach
        answers REQUEST_TIMED_OUT (as Kafka's requests do then), not a server error.

        It waits RECONNECT_WAIT_S for a lost connection, and one whose turn on the
        ZooKeeper thread comes after its deadline, or while the connection is down, is
        dropped unsent (kazoo would queue it and send it once the connection is back)."""
        try:
            await asyncio.wait_for(self._up.wait(), RECONNECT_WAIT_S)
        except TimeoutError:
            raise KafkaError(ErrorCode.request_timed_out,
                             "ZooKeeper is not connected.") from None
        deadline = time.monotonic() + CHANGE_TIMEOUT_S
        try:
            return await asyncio.wait_for(
                self._zk.call(self._unless_late, deadline, fn, *args, **kwargs),
                CHANGE_TIMEOUT_S)
        except TimeoutError:
            raise KafkaError(ErrorCode.request_timed_out,
                             "ZooKeeper did not answer in time.") from None
        except (ConnectionLoss, SessionExpiredError, ConnectionClosedError) as e:
            raise KafkaError(ErrorCode.request_timed_out,
                             f"ZooKeeper is not reachable: {type(e).__name__}.") from None
        except KazooException as e:
            raise KafkaError(ErrorCode.unknown_server_error,
                             f"ZooKeeper refused the change: {type(e).__name__}.") from None

    def _unless_late(self, deadline: float, fn: Callable[..., T], *args: Any,
                     **kwargs: Any) -> T:
        """``fn`` on the ZooKeeper thread, unless its caller gave up or the connection
        is down (blocking)."""
        if time.monotonic() >= deadline or not self._zk.kazoo.connected:
            raise ConnectionLoss()
        return fn(*args, **kwargs)

    # -- CreateTopics answered REQUEST_TIMED_OUT ------------------------------------------

    async def create(self, write: Callable[[], Any], topics: Sequence[tuple[str, uuid.UUID]],
                     ) -> None:
        """``write`` the topics; answered with REQUEST_TIMED_OUT, they are remembered:
        the write may still land (sent to a ZooKeeper that froze)."""
        try:
            await self.write(write)
        except KafkaError as e:
            if e.error_code == ErrorCode.request_timed_out:
                self._abandoned.update(topics)
            raise

    def adopt(self, name: str, image: ClusterImage) -> bool:
        """A retry of a create answered REQUEST_TIMED_OUT whose topic landed after all
        takes it over (it is not deleted then)."""
        existing = image.topics.get(name)
        if existing is None or self._abandoned.get(name) != existing.topic_id:
            return False
        del self._abandoned[name]
        self._log.info("topic created by an earlier timed-out CreateTopics kept for its "
                       "retry", topic=name)
        return True

    def landed(self, image: ClusterImage) -> list[str]:
        """Abandoned topics the image shows (ZooKeeper ran their write once it came
        back): the caller deletes them."""
        if not self._abandoned:
            return []
        ghosts = [name for name, tid in self._abandoned.items()
                  if (t := image.topics.get(name)) is not None and t.topic_id == tid]
        for name in ghosts:
            del self._abandoned[name]
            self._log.warning("deleting a topic created after its CreateTopics was "
                              "answered REQUEST_TIMED_OUT", topic=name)
        return ghosts
