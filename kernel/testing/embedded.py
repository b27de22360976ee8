"""A broker on its own event loop in a background thread, on a free port, with a
temporary data directory: what the project's tests and users' tests talk to with real
clients (which block, so the broker cannot share their thread)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from kernel.config import load_config
from kernel.server import Broker

DEFAULT_PLUGINS = ("metadata_kraft", "coordinator", "txn")


class EmbeddedBroker:
    def __init__(
        self,
        settings: Mapping[str, Any] | None = None,
        *,
        plugins: tuple[str, ...] | list[str] = DEFAULT_PLUGINS,
        data_dir: str | Path | None = None,
        config_file: str | Path | None = None,
        plugin_settings: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="kafkernel-"))
        extra: dict[str, Any] = {
            "listeners": ["PLAINTEXT://127.0.0.1:0"],
            "log.dirs": [str(self.data_dir)],
            "logging.level": "warning",
        }
        if config_file is None:
            extra["plugins.enabled"] = list(plugins)
        extra.update(settings or {})
        self._extra = extra
        self._plugin_tables = {k: dict(v) for k, v in (plugin_settings or {}).items()}
        self._config_file = config_file
        self.broker: Broker | None = None
        # Error-level events of every run of this broker (restarts included).
        self.logged_errors: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None, "broker not started"
        return self.broker.bootstrap

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        started: Future[None] = Future()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                self.broker = Broker(load_config(
                    self._config_file, extra=self._extra, plugin_tables=self._plugin_tables
                ))
                loop.set_exception_handler(self.broker.report_loop_error)
                loop.run_until_complete(self.broker.start())
            except BaseException as e:
                started.set_exception(e)
                if self.broker is not None:
                    loop.run_until_complete(self.broker.stop())
                loop.close()
                return
            started.set_result(None)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="kafkernel-broker", daemon=True)
        self._thread.start()
        started.result(timeout)
        return self

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        """Run a coroutine on the broker's loop and wait for its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self, timeout: float = 30.0, *, remove_data: bool | None = None) -> None:
        if self._loop is not None and self.broker is not None and self._loop.is_running():
            self.call(self.broker.stop(), timeout)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
        if self.broker is not None:
            self.logged_errors.extend(self.broker.recent_errors)
            self.broker.recent_errors.clear()
        self._loop = None
        self._thread = None
        if remove_data if remove_data is not None else self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def restart(self) -> EmbeddedBroker:
        """Stop and start again on the same data directory (the port changes)."""
        self.stop(remove_data=False)
        return self.start()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
