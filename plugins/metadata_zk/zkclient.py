"""The broker's ZooKeeper session, kept off the event loop.

kazoo is thread-based: its calls block and its watches fire on its own threads. Here
every blocking call runs on one worker thread of this client (so a broker's ZooKeeper
operations keep their order and never block the loop), and every watch or session-state
callback is handed to the event loop with ``call_soon_threadsafe``: the backend's state
is only ever touched on the loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

T = TypeVar("T")
# kazoo's stop joins its callback thread first; a watch callback blocked on a reply the
# connection will never bring (it is reconnecting) would hold the broker's stop for ever.
CLOSE_TIMEOUT_S = 10.0

__all__ = ["KazooState", "WatchHandle", "ZkClient", "ZkUnreachable", "ZnodeStat"]


class ZkUnreachable(Exception):
    """No ZooKeeper session could be established within the connection timeout."""


class WatchHandle:
    """A watch the loop can stop: kazoo's recipe ends at its next event once stopped."""

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def split_connect(connect: str) -> tuple[str, str]:
    """``host:port,host:port/chroot`` -> (hosts, chroot or "")."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/") if chroot else ""


class ZkClient:
    """One ZooKeeper session (kazoo re-establishes it after an expiry) and the thread
    its blocking calls run on. ``on_state`` gets kazoo's LOST, SUSPENDED and CONNECTED
    on the loop."""

    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int,
                 *, on_state: Callable[[str], None], logger: Any) -> None:
        self.connect = connect
        self._session_timeout_s = session_timeout_ms / 1000
        self._connection_timeout_s = connection_timeout_ms / 1000
        self._on_state = on_state
        self._log = logger
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="metadata-zk")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kazoo: KazooClient | None = None
        self._closing = False

    @property
    def kazoo(self) -> KazooClient:
        assert self._kazoo is not None, "ZooKeeper client not started"
        return self._kazoo

    @property
    def session_id(self) -> int:
        return self.kazoo.client_id[0] if self.kazoo.client_id else 0

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Connect (creating the chroot path first, as Kafka does); ZkUnreachable when
        no session is established within the connection timeout."""
        self._loop = asyncio.get_running_loop()
        await self.call(self._connect)

    def _connect(self) -> None:
        hosts, chroot = split_connect(self.connect)
        if chroot:
            bare = self._new_client(hosts)
            try:
                self._start_client(bare, hosts)
                bare.ensure_path(chroot)
            finally:
                bare.stop()
                bare.close()
        client = self._new_client(hosts + chroot)
        self._start_client(client, hosts)
        client.add_listener(self._state_listener)
        self._kazoo = client

    def _new_client(self, hosts: str) -> KazooClient:
        return KazooClient(hosts=hosts, timeout=self._session_timeout_s,
                           logger=_quiet_kazoo_logger())

    def _start_client(self, client: KazooClient, hosts: str) -> None:
        try:
            client.start(timeout=self._connection_timeout_s)
        except KazooTimeoutError:
            client.stop()
            client.close()
            raise ZkUnreachable(
                f"no ZooKeeper session with {hosts} within "
                f"{int(self._connection_timeout_s * 1000)} ms") from None

    async def stop(self) -> None:
        """Close the session (its ephemeral znodes go at once) and the worker thread."""
        self._closing = True
        if self._kazoo is not None:
            client, self._kazoo = self._kazoo, None
            closing = asyncio.get_running_loop().run_in_executor(
                self._executor, functools.partial(_close, client))
            try:
                await asyncio.wait_for(asyncio.shield(closing), CLOSE_TIMEOUT_S)
            except TimeoutError:
                # Its threads are daemons: left blocked, they end with the process, which
                # must not wait for them at exit either (kazoo registers that wait).
                atexit.unregister(client.handler.stop)
                self._log.warning("ZooKeeper client did not close in time; left behind",
                                  seconds=CLOSE_TIMEOUT_S)
        self._executor.shutdown(wait=False)

    # -- calls --------------------------------------------------------------------

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking kazoo call on this client's thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or self._closing:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the broker is gone
            loop.call_soon_threadsafe(fn, *args)

    def _state_listener(self, state: str) -> None:
        self._to_loop(self._on_state, state)

    # -- watches ------------------------------------------------------------------

    async def watch_data(self, path: str,
                         callback: Callable[[bytes | None, ZnodeStat | None], None],
                         handle: WatchHandle | None = None) -> WatchHandle:
        """Call ``callback(data, stat)`` on the loop now and at every change of ``path``
        (None, None while it does not exist), until the handle is stopped."""
        handle = handle or WatchHandle()

        def fire(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            if handle.stopped or self._closing:
                return False
            self._to_loop(_unless_stopped, handle, callback, data, stat)
            return None

        await self.call(DataWatch, self.kazoo, path, fire)
        return handle

    async def watch_children(self, path: str, callback: Callable[[list[str]], None],
                             handle: WatchHandle | None = None) -> WatchHandle:
        """Call ``callback(children)`` on the loop now and at every change of the
        children of ``path`` (which must exist), until the handle is stopped."""
        handle = handle or WatchHandle()

        def fire(children: list[str]) -> bool | None:
            if handle.stopped or self._closing:
                return False
            self._to_loop(_unless_stopped, handle, callback, list(children))
            return None

        await self.call(ChildrenWatch, self.kazoo, path, fire)
        return handle

    # -- blocking helpers (run through call) -----------------------------------------

    def create_if_absent(self, path: str, data: bytes = b"") -> bool:
        try:
            self.kazoo.create(path, data, makepath=True)
            return True
        except NodeExistsError:
            return False


def _unless_stopped(handle: WatchHandle, callback: Callable[..., None], *args: Any) -> None:
    if not handle.stopped:
        callback(*args)


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


def _quiet_kazoo_logger() -> logging.Logger:
    """kazoo logs a dropped connection at WARNING with a traceback: the backend logs
    the session's state itself, in one line."""
    logger = logging.getLogger("kafkernel.metadata_zk.kazoo")
    logger.setLevel(logging.CRITICAL)
    return logger

