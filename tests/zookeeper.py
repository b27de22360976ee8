"""A real ZooKeeper for the tests: Debian's ``zookeeper`` package (``./dev test``
installs it) run as a standalone server on a free loopback port, with a temporary data
directory and the admin server off; it dies with the process that started it.

    with tests.zookeeper.start() as zk:
        print(zk.connect)

Nothing here depends on pytest, so cluster scripts in bench/ can use it too.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from reference.kafka import die_with_parent

HOST = "127.0.0.1"
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # its manifest names its classpath
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
STARTUP_TIMEOUT = 60.0


class ZooKeeperNotInstalled(RuntimeError):
    pass


@dataclass
class ZooKeeper:
    host: str
    port: int
    data_dir: Path
    process: subprocess.Popen[bytes]
    _stopped: bool = field(default=False, repr=False)

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """End the server (SIGTERM, then SIGKILL), keeping its data for restart()."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def restart(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Start it again on the same port and data (its sessions survive if they have
        not timed out meanwhile)."""
        self.kill()
        self.process = _launch(self.data_dir)
        _wait_answering(self, timeout)

    def __enter__(self) -> ZooKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def installed() -> bool:
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def start(timeout: float = STARTUP_TIMEOUT) -> ZooKeeper:
    """Start ZooKeeper; returns once it answers ``ruok`` with ``imok``."""
    if not installed():
        raise ZooKeeperNotInstalled(
            f"{ZOOKEEPER_JAR} or java is missing: run ./dev test (it installs Debian's "
            "zookeeper and a JDK)")
    data_dir = Path(tempfile.mkdtemp(prefix="zookeeper-"))
    port = free_port()
    config = data_dir / "zoo.cfg"
    config.write_text(
        f"dataDir={data_dir / 'data'}\nclientPort={port}\nclientPortAddress={HOST}\n"
        "tickTime=500\nmaxSessionTimeout=60000\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,stat\n")
    zk = ZooKeeper(HOST, port, data_dir, _launch(data_dir))
    _wait_answering(zk, timeout)
    return zk


def _launch(data_dir: Path) -> subprocess.Popen[bytes]:
    with open(data_dir / "zookeeper.out", "ab") as out:
        return subprocess.Popen(
            [*die_with_parent(), "java", "-Xmx128m",
             "-cp", str(ZOOKEEPER_JAR), MAIN, str(data_dir / "zoo.cfg")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=data_dir)


def _wait_answering(zk: ZooKeeper, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _answers(zk):
        if zk.process.poll() is not None or time.monotonic() > deadline:
            log = (zk.data_dir / "zookeeper.out").read_text(errors="replace")[-3000:]
            zk.stop()
            raise RuntimeError(f"ZooKeeper did not start on {zk.connect}:\n{log}")
        time.sleep(0.1)


def _answers(zk: ZooKeeper) -> bool:
    try:
        with socket.create_connection((zk.host, zk.port), timeout=1) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False
