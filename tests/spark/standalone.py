"""A Spark standalone cluster on this machine: one master and one worker, started from
the pyspark installation's own ``bin/spark-class`` (the Master and Worker main classes
that Spark's sbin scripts run), on free loopback ports, with their logs and the
worker's directory under ``work_dir``.

    with standalone_cluster(tmp_path) as cluster:
        ... --master cluster.master_url ...

Each JVM gets SIGTERM if the thread that started it dies (setpriv --pdeathsig, as
reference/kafka.py does for Kafka), so an interrupted run leaves none behind; leaving
the block stops the worker (and the executors under it), then the master.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from spark.session import pyspark_home
from tests.broker_process import free_port

HOST = "127.0.0.1"
STARTUP_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
MASTER_MAIN = "org.apache.spark.deploy.master.Master"
WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str  # spark://127.0.0.1:<port>
    cores: int  # the worker's
    memory: str
    work_dir: Path

    def driver_conf(self) -> dict[str, str]:
        """What a driver on this machine sets to use the cluster: executors small enough
        for the worker, and the driver reachable on loopback as the worker is."""
        return {"spark.executor.memory": "512m", "spark.executor.cores": str(self.cores),
                "spark.cores.max": str(self.cores), "spark.driver.host": HOST,
                "spark.driver.bindAddress": HOST}


def _spawn(main: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    home = pyspark_home()
    setpriv = shutil.which("setpriv")
    # spark-class execs java, which keeps the death signal setpriv asked for.
    command = [*([setpriv, "--pdeathsig", "TERM"] if setpriv else []),
               str(home / "bin" / "spark-class"), main, *args]
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST,
           "SPARK_DAEMON_MEMORY": "256m"}
    with log.open("ab") as out:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env)


def _wait_for(log: Path, line: str, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while line not in (log.read_text(errors="replace") if log.exists() else ""):
        if process.poll() is not None:
            raise RuntimeError(f"the Spark {what} exited with {process.returncode}:\n"
                               + log.read_text(errors="replace")[-3000:])
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Spark {what} did not start in {STARTUP_TIMEOUT} s:\n"
                               + log.read_text(errors="replace")[-3000:])
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def standalone_cluster(work_dir: Path, *, cores: int = 1,
                       memory: str = "1g") -> Iterator[StandaloneCluster]:
    work_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    master_log, worker_log = work_dir / "master.log", work_dir / "worker.log"
    master = _spawn(MASTER_MAIN, ["--host", HOST, "--port", str(port),
                                  "--webui-port", "0"], master_log)
    worker: subprocess.Popen[bytes] | None = None
    try:
        _wait_for(master_log, "I have been elected leader", master, "master")
        worker = _spawn(WORKER_MAIN, [
            "--host", HOST, "--port", "0", "--webui-port", "0", "--cores", str(cores),
            "--memory", memory, "--work-dir", str(work_dir / "worker"),
            f"spark://{HOST}:{port}"], worker_log)
        _wait_for(worker_log, "Successfully registered with master", worker, "worker")
        yield StandaloneCluster(f"spark://{HOST}:{port}", cores, memory, work_dir)
    finally:
        # The worker first: it kills its executors as it stops.
        if worker is not None:
            _stop(worker)
        _stop(master)
