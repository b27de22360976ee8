"""A broker in a process of its own (``kafkernel serve``), for tests whose input could
kill a broker, and for measuring what one process holds (RSS, open files): an
in-process broker would take the test runner down with it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest

from reference.kafka import die_with_parent
from tests.integration.wire import connect, decode_response, encode_request, recv_frame


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SET_OPEN_FILES_AND_EXEC = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])"
)


class BrokerProcess:
    """``kafkernel serve`` on a free port; its log (JSON lines) goes to a file."""

    def __init__(self, workdir: Path, *overrides: str, coordinator_partitions: int = 1,
                 plugins: tuple[str, ...] = ("metadata_kraft", "coordinator", "txn"),
                 data: Path | None = None, port: int | None = None,
                 open_files: int | None = None) -> None:
        """``data`` (default ``workdir/data``) and ``port`` (default: a free one) may be
        given to start a broker again on what an earlier one left; ``open_files`` is
        the broker's RLIMIT_NOFILE, soft and hard (so serve cannot raise it)."""
        self.workdir = workdir
        self.port = port or free_port()
        self.log_path = workdir / "broker.log"
        config = workdir / "kafkernel.toml"
        data = data or workdir / "data"
        enabled = ", ".join(f'"{p}"' for p in plugins)
        config.write_text(textwrap.dedent(f"""
            listeners = "PLAINTEXT://127.0.0.1:{self.port}"
            log.dirs = "{data}"
            logging.format = "json"
            [plugins]
            enabled = [{enabled}]
            [plugins.coordinator]
            "offsets.topic.num.partitions" = {coordinator_partitions}
        """))
        self.args = [sys.executable, "-m", "kernel", "serve", "--config", str(config)]
        if open_files is not None:
            # Set in a process of its own that then becomes the broker: a preexec_fn is
            # unsafe once the test runner has threads.
            self.args = [sys.executable, "-c", SET_OPEN_FILES_AND_EXEC, str(open_files),
                         *self.args]
        for o in overrides:
            self.args += ["--override", o]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        with self.log_path.open("ab") as log:
            # Unbuffered: a test reads each event as soon as the broker logs it.
            self.proc = subprocess.Popen([*die_with_parent(), *self.args], stdout=log,
                                         stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            if self.answers():
                return self
            time.sleep(0.1)
        raise RuntimeError(f"broker did not answer within {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        return self.proc.returncode

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a test checks ------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def answers(self, timeout: float = 5.0) -> bool:
        """A new connection gets an ApiVersions answer."""
        try:
            with connect(self.bootstrap, timeout=timeout) as sock:
                sock.sendall(encode_request(ApiVersionsRequest(), correlation_id=4242))
                frame = recv_frame(sock)
        except OSError:
            return False
        if frame is None:
            return False
        correlation_id, _ = decode_response(frame, 18, 0)
        return correlation_id == 4242

    def rss_bytes(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def open_files(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def events(self) -> list[dict[str, Any]]:
        """The log's JSON events; a line that is not JSON (a traceback printed by the
        interpreter, a native abort) comes back as {"level": "raw", "line": ...}."""
        out: list[dict[str, Any]] = []
        for line in self.log().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                event = {"level": "raw", "line": line}
            out.append(event if isinstance(event, dict) else {"level": "raw", "line": line})
        return out

    def problems(self) -> list[str]:
        """Error-level events, tracebacks and anything that is not a log event."""
        bad = []
        for e in self.events():
            if e.get("level") in ("error", "critical", "raw") or "exception" in e:
                bad.append(json.dumps(e)[:2000])
        return bad


@contextmanager
def served(data: Path, port: int, *overrides: str) -> Iterator[subprocess.Popen[bytes]]:
    """A broker process on ``data`` and ``port``, killed at the end if still running
    (tests that kill it themselves see the process)."""
    broker = BrokerProcess(data.parent, *overrides, data=data, port=port).start()
    assert broker.proc is not None
    try:
        yield broker.proc
    finally:
        if broker.proc.poll() is None:
            broker.proc.kill()
            broker.proc.wait(30)
