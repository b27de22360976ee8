"""One export's Spark job as a child process of the broker: started, restarted with
backoff whenever it exits, stopped on shutdown.

The child is ``python -m spark.export`` in a session of its own, so that stopping it
reaches the JVM pyspark starts under it. It is told to exit with its parent
(``--exit-with-parent``): a broker killed without a shutdown leaves no export running.
Its output (Ivy, Spark's warnings) is logged at debug; the line it prints when it fails
is the reason logged with its exit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from plugins.spark_sink.settings import SparkSinkSettings
from spark.export import STARTED_PREFIX
from spark.options import ExportOptions

__all__ = ["ExportState", "ExportSupervisor"]


class ExportState(enum.Enum):
    STARTING = "starting"  # the child is starting (its JVM, the connector's resolution)
    RUNNING = "running"    # the child's streaming query has done its first trigger
    BACKOFF = "backoff"    # the child exited; waiting to start it again
    STOPPED = "stopped"


class ExportSupervisor:
    def __init__(self, options: ExportOptions, settings: SparkSinkSettings, log: Any, *,
                 on_restart: Callable[[], None]) -> None:
        self.options = options
        self._on_restart = on_restart
        self.settings = settings
        self.log = log.bind(export=options.name)
        self.state = ExportState.STOPPED
        self.restarts = 0
        self.last_exit: str | None = None
        self.pid: int | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._output: collections.deque[str] = collections.deque(maxlen=20)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "spark.export", *self.options.to_args(),
                "--exit-with-parent"]

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"spark-export-{self.options.name}")


    async def _supervise(self) -> None:
        backoff_ms = self.settings.restart_backoff_ms
        while not self._stopping.is_set():
            started = time.monotonic()
            code = await self._run_once()
            if self._stopping.is_set():
                break
            ran_ms = (time.monotonic() - started) * 1000
            backoff_ms = (self.settings.restart_backoff_ms
                          if ran_ms >= self.settings.healthy_after_ms or self.restarts == 0
                          else min(backoff_ms * 2, self.settings.restart_backoff_max_ms))
            self.restarts += 1
            self._on_restart()
            self.state = ExportState.BACKOFF
            self.last_exit = self._reason(code)
            self.log.warning("spark export exited; restarting", exit_code=code,
                             reason=self.last_exit, restart_in_ms=backoff_ms,
                             restarts=self.restarts)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff_ms / 1000):
                    await self._stopping.wait()
        self.state = ExportState.STOPPED

    async def _run_once(self) -> int:
        self.state = ExportState.STARTING
        self._output.clear()
        self._proc = await asyncio.create_subprocess_exec(
            *self.command(), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
        self.pid = self._proc.pid
        if self._stopping.is_set():  # stop() came while the child was being spawned
            self._proc.send_signal(signal.SIGTERM)
        self.log.info("spark export started", pid=self.pid, path=self.options.path,
                      master=self.options.master)
        assert self._proc.stdout is not None
        async for raw in self._proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line == f"{STARTED_PREFIX} {self.options.name}":
                self.state = ExportState.RUNNING
                self.log.info("spark export running", pid=self.pid)
            elif line:
                self._output.append(line)
                self.log.debug("spark export output", line=line)
        code = await self._proc.wait()
        self._kill_group()  # whatever the child left behind (its JVM)
        self.pid = None
        return code

    def _reason(self, code: int) -> str:
        """The signal that killed the child, its own one-line reason (``export <name>:
        ...``), else its last line."""
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        prefix = f"export {self.options.name}: "
        for line in reversed(self._output):
            if line.startswith(prefix):
                return line[len(prefix):]
        return self._output[-1] if self._output else f"exit code {code}"

    def _kill_group(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    async def stop(self) -> None:
        """SIGTERM (the job stops its query between micro-batches), SIGKILL to its
        process group after ``stop.timeout.ms``."""
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(self.settings.stop_timeout_ms / 1000):
                    await proc.wait()
            except TimeoutError:
                self.log.warning("spark export did not stop in time; killed",
                                 timeout_ms=self.settings.stop_timeout_ms)
                self._kill_group()
        if self._task is not None:
            await self._task
        self.log.info("spark export stopped")
