"""The three brokers under test, each a subprocess on a loopback port, always stopped.

``MockBroker`` is librdkafka's in-memory mock cluster (``bench.mock_cluster``);
``KafkaBroker`` is Apache Kafka through ``reference.kafka`` (one KRaft node, its log on
disk in a temporary directory, default flush settings, a fixed heap);
``KafkernelBroker`` is ``kafkernel serve`` with its data in a temporary directory. All
are context managers: leaving the ``with`` block stops the process (SIGTERM, then
SIGKILL), whatever happened inside; ``bench.orphan_guard`` (Kafkernel, the mock) and
setpriv's parent-death signal (Kafka) stop it even if the benchmark itself is killed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from bench.procfs import ProcSample, reset_peak, sample
from bench.settings import MOCK_RETAINED_BYTES

REPO_ROOT = Path(__file__).resolve().parent.parent


class BrokerError(RuntimeError):
    pass


def check_loopback(bootstrap: str) -> str:
    """The benchmark only ever talks to this machine."""
    host = bootstrap.rsplit(":", 1)[0].strip("[]")
    if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
        raise BrokerError(f"refusing non-loopback bootstrap address {bootstrap}")
    return bootstrap


def _guarded(cmd: Sequence[str]) -> list[str]:
    # Run as a script, not ``-m``: kafkernel runs in its own directory, not the repo.
    return [sys.executable, str(Path(__file__).with_name("orphan_guard.py")), *cmd]


def _stop_process(proc: subprocess.Popen[Any], grace_s: float) -> int | None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5.0)
    return proc.returncode


class Broker(ABC):
    """A running broker process: its address, its /proc figures, topic creation."""

    name: str

    def __init__(self) -> None:
        self.proc: subprocess.Popen[Any] | None = None
        self._bootstrap: str | None = None
        self.returncode: int | None = None
        # Seconds from exec of the broker's command to its first Metadata answer.
        self.startup_s: float | None = None
        # Clients that cannot work with this broker, with the reason; their workloads
        # are reported as not run.
        self.unsupported_clients: dict[str, str] = {}

    @property
    def bootstrap(self) -> str:
        if self._bootstrap is None:
            raise BrokerError(f"{self.name} is not started")
        return self._bootstrap

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise BrokerError(f"{self.name} is not started")
        return self.proc.pid

    def sample(self) -> ProcSample | None:
        return sample(self.pid) if self.proc is not None else None

    def reset_peak(self) -> bool:
        return reset_peak(self.pid) if self.proc is not None else False

    @abstractmethod
    def start(self, timeout_s: float = 30.0) -> None: ...

    @abstractmethod
    def create_topics(self, names: Sequence[str], partitions: int) -> str:
        """Create topics with ``partitions`` partitions; returns how (for the record)."""

    @abstractmethod
    def recycle_topic(self, name: str, partitions: int) -> None:
        """Empty a produce workload's topic between runs."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What this broker is, for the report."""

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Broker:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class MockBroker(Broker):
    name = "mock"

    def __init__(self, bound_s: float) -> None:
        super().__init__()
        self._bound_s = bound_s
        self._buffer = b""
        # Seen with librdkafka 2.x's mock and Kafka 4.3.1's clients: the mock answers
        # ApiVersions v4 with UNSUPPORTED_VERSION, the client retries v0, gets the list,
        # and then never sends Metadata ("no node is available", rebootstrapping) until
        # its max.block.ms is over.
        self.unsupported_clients = {
            "java": "Kafka's Java clients never get past ApiVersions with the mock"}

    def _readline(self, timeout_s: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise BrokerError(f"mock cluster did not answer within {timeout_s:.0f} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise BrokerError(f"mock cluster exited (code {self.proc.poll()})")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode().strip()

    def start(self, timeout_s: float = 30.0) -> None:
        cmd = _guarded([sys.executable, "-m", "bench.mock_cluster",
                        "--seconds", str(int(self._bound_s))])
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     cwd=REPO_ROOT, bufsize=0)
        self._bootstrap = check_loopback(self._readline(timeout_s).split(",")[0])

    def create_topics(self, names: Sequence[str], partitions: int) -> str:
        assert self.proc is not None and self.proc.stdin is not None
        for name in names:
            self.proc.stdin.write(f"topic {name} {partitions}\n".encode())
            self.proc.stdin.flush()
            reply = self._readline(10.0)
            if reply != "ok":
                raise BrokerError(f"mock: creating topic {name}: {reply}")
        return "rd_kafka_mock_topic_create (the mock does not serve CreateTopics)"

    def recycle_topic(self, name: str, partitions: int) -> None:
        pass  # it keeps at most 5 MiB per partition anyway, and serves no DeleteTopics

    def describe(self) -> dict[str, Any]:
        import confluent_kafka

        return {
            "what": "librdkafka mock cluster, 1 broker, records in memory",
            "librdkafka": confluent_kafka.libversion()[0],
            "retention": f"keeps at most {MOCK_RETAINED_BYTES // 2**20} MiB or 100,000 "
                         "batches per partition, dropping the oldest",
            "rss_measured": "the mock_cluster process: Python interpreter + librdkafka "
                            "+ the records it holds",
        }

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # end of stdin: the mock exits by itself
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(3.0)
        self.returncode = _stop_process(self.proc, 5.0)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def create_topics(bootstrap: str, names: Sequence[str], partitions: int,
                  num_partitions: int) -> str:
    """CreateTopics through AdminClient; returns how (for the record). ``num_partitions``
    is the broker's default, used when CreateTopics fails and Metadata auto-creates."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names],
        operation_timeout=30, request_timeout=45)
    concurrent.futures.wait(list(futures.values()), timeout=60)
    failures: list[str] = []
    for name, future in futures.items():
        if not future.done():
            failures.append(f"{name}: no answer within 60 s")
            continue
        e = future.exception()
        if isinstance(e, KafkaException) and e.args[0].name() == "TOPIC_ALREADY_EXISTS":
            continue
        if e is not None:
            failures.append(f"{name}: {e}")
    if not failures:
        return "AdminClient.create_topics"
    # Should CreateTopics fail: a producer's Metadata request auto-creates, with the
    # broker's num.partitions, which the bench sets to the same count.
    producer = Producer({"bootstrap.servers": bootstrap})
    for name in names:
        producer.list_topics(topic=name, timeout=10)
    return (f"auto-creation through Metadata (num.partitions={num_partitions}); "
            f"CreateTopics failed: {failures[0]}")


def recycle_topic(bootstrap: str, name: str, partitions: int, num_partitions: int) -> None:
    """Delete and re-create the topic, so that its files leave the page cache and every
    run writes the same amount of new log (the mock keeps at most 5 MiB per partition;
    without this, the log and its page cache grow by every run)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_topics([name], operation_timeout=30, request_timeout=45)
    futures[name].result(timeout=60)
    deadline = time.monotonic() + 30
    while name in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise BrokerError(f"topic {name} still listed 30 s after DeleteTopics")
        time.sleep(0.05)
    create_topics(bootstrap, [name], partitions, num_partitions)


class AdminBroker(Broker):
    """A broker that serves the admin APIs: topics are made with the AdminClient, and
    ``partitions`` is its default partition count (num.partitions)."""

    partitions: int

    def create_topics(self, names: Sequence[str], partitions: int) -> str:
        return create_topics(self.bootstrap, names, partitions, self.partitions)

    def recycle_topic(self, name: str, partitions: int) -> None:
        recycle_topic(self.bootstrap, name, partitions, self.partitions)


class KafkaBroker(AdminBroker):
    """Apache Kafka (``reference.kafka``): one KRaft node, broker and controller, its log
    on disk in a temporary directory, Kafka's default flush settings (none: the page
    cache and the OS write back), heap fixed at ``heap``."""

    name = "kafka"

    def __init__(self, partitions: int, overrides: Sequence[str], keep_data: bool,
                 heap: str | None = None) -> None:
        super().__init__()
        self.partitions = partitions
        self.overrides = dict(item.split("=", 1) for item in overrides)
        self.keep_data = keep_data
        self.heap = heap
        self.kafka: Any = None  # reference.kafka.ReferenceKafka once started
        self.format_s: float | None = None

    def start(self, timeout_s: float = 120.0) -> None:
        from reference import kafka as ref

        self.heap = self.heap or ref.HEAP
        overrides = {"num.partitions": str(self.partitions), **self.overrides}
        work_dir = tempfile.mkdtemp(prefix="kafka-bench-") if self.keep_data else None
        try:
            self.kafka = ref.start(heap=self.heap, overrides=overrides, work_dir=work_dir,
                                   timeout=timeout_s)
        except (ref.KafkaNotFetched, ref.KafkaStartError,
                subprocess.TimeoutExpired) as e:
            raise BrokerError(f"Apache Kafka did not start: {e}") from e
        self.proc = self.kafka.process
        self._bootstrap = check_loopback(self.kafka.bootstrap)
        self.startup_s = self.kafka.startup_seconds
        self.format_s = self.kafka.format_seconds

    @property
    def workdir(self) -> Path | None:
        return self.kafka.work_dir if self.kafka is not None else None

    def log_tail(self, lines: int = 8) -> str:
        if self.kafka is None:
            return "(not started)"
        text = ""
        for path in (self.kafka.work_dir / "kafka.out", self.kafka.server_log):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def describe(self) -> dict[str, Any]:
        from reference.fetch import kafka_version
        from reference.kafka import JVM_OPTIONS

        return {
            "what": f"Apache Kafka {kafka_version()}, 1 KRaft node (broker and controller), "
                    "log on disk in a temporary directory, default flush settings",
            "heap": f"-Xms{self.heap} -Xmx{self.heap}",
            "jvm_options": list(JVM_OPTIONS),
            "command": self.proc.args if self.proc is not None else None,
            "overrides": {"num.partitions": str(self.partitions), **self.overrides},
            "format_seconds": self.format_s,
            "startup": "exec of the JVM to the first Metadata answer naming a broker "
                       "(kafka-storage format, a separate JVM before it, not counted)",
            "rss_measured": "the Kafka JVM (heap as touched, metaspace, code cache, "
                            "mapped index files; page cache not counted)",
        }

    def stop(self) -> None:
        if self.kafka is not None:
            self.returncode = self.kafka.stop()


def kafkernel_executable() -> str:
    beside = Path(sys.executable).with_name("kafkernel")
    if beside.exists():
        return str(beside)
    found = shutil.which("kafkernel")
    if found is None:
        raise BrokerError("kafkernel executable not found (pip install -e . in the venv)")
    return found


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


class KafkernelBroker(AdminBroker):
    """``kafkernel serve`` as the README runs it, on a free loopback port."""

    name = "kafkernel"

    def __init__(self, partitions: int, overrides: Sequence[str], keep_data: bool,
                 checkout: Path | None = None) -> None:
        """``checkout``: run the ``kafkernel`` of that checkout's ``.venv`` instead, under
        the name "baseline" (the figures before a change, in the same run)."""
        super().__init__()
        self.checkout = checkout
        if checkout is not None:
            self.name = "baseline"
        self.partitions = partitions
        self.overrides = list(overrides)
        self.keep_data = keep_data
        self.workdir: Path | None = None
        self.command: list[str] = []
        self._log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "broker.log"

    def _plugins(self) -> list[str]:
        """Kafkernel's own plugins; a baseline checkout older than one runs without it
        (the workloads that need it then fail on the baseline alone)."""
        wanted = ["metadata_kraft", "coordinator", "txn"]
        if self.checkout is None:
            return wanted
        return [p for p in wanted if (self.checkout / "plugins" / p).is_dir()]

    def _config(self, data_dir: Path) -> str:
        # Logging at info in JSON: the "broker started" line carries the bound port.
        return "\n".join([
            "broker.id = 1",
            'listeners = ["PLAINTEXT://127.0.0.1:0"]',
            f"log.dirs = [{_toml_string(str(data_dir))}]",
            f"num.partitions = {self.partitions}",
            "default.replication.factor = 1",
            "auto.create.topics.enable = true",
            "metrics.port = -1",
            'logging.format = "json"',
            'logging.level = "info"',
            "",
            "[plugins]",
            f"enabled = {json.dumps(self._plugins())}",
            "",
            # As the reference Kafka is configured (reference/kafka.py): a group's
            # first join is not held back 3 s for more members.
            "[plugins.coordinator]",
            '"group.initial.rebalance.delay.ms" = 0',
            "",
        ])

    def start(self, timeout_s: float = 30.0) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="kafkernel-bench-"))
        config = self.workdir / "kafkernel.toml"
        config.write_text(self._config(self.workdir / "data"))
        executable = (kafkernel_executable() if self.checkout is None
                      else str(self.checkout / ".venv" / "bin" / "kafkernel"))
        self.command = [executable, "serve", "--config", str(config)]
        for item in self.overrides:
            self.command += ["--override", item]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        from reference.kafka import PROBE_INTERVAL

        began = time.monotonic()
        self.proc = subprocess.Popen(_guarded(self.command), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir)
        deadline = began + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"kafkernel exited with code {self.proc.returncode}: "
                                  f"{self.log_tail()}")
            if self._bootstrap is None:
                listeners = self._started_listeners()
                if listeners:
                    self._bootstrap = check_loopback(listeners[0].split("://", 1)[1])
            # Timed as Kafka's start-up is: exec to the first Metadata answer (the port
            # is known from the log line first, since the broker binds port 0).
            if self._bootstrap is not None and self._ready(self._bootstrap):
                self.startup_s = time.monotonic() - began
                return
            time.sleep(PROBE_INTERVAL)
        raise BrokerError(f"kafkernel did not start within {timeout_s:.0f} s: "
                          f"{self.log_tail()}")

    def _ready(self, bootstrap: str) -> bool:
        from reference.kafka import answers_metadata

        return answers_metadata(bootstrap)

    def _started_listeners(self) -> list[str]:
        for line in self.log_path.read_text(errors="replace").splitlines():
            if '"broker started"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            return [str(x) for x in event.get("listeners", [])]
        return []

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def describe(self) -> dict[str, Any]:
        return {
            "what": "kafkernel serve, 1 broker, embedded KRaft-style metadata, "
                    "log on disk in a temporary directory",
            "command": self.command,
            "startup": "exec of bench/orphan_guard.py (which execs kafkernel serve) to the "
                       "first Metadata answer naming a broker",
            "rss_measured": "the kafkernel serve process (page cache not counted)",
        }

    def stop(self) -> None:
        if self.proc is not None:
            self.returncode = _stop_process(self.proc, 15.0)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.workdir is not None and not self.keep_data:
            shutil.rmtree(self.workdir, ignore_errors=True)


def kafka_and_kafkernel(names: str, partitions: int,
                        overrides: Sequence[str] = ()) -> list[AdminBroker]:
    """The brokers of a ``--brokers`` option ("kafka,kafkernel", in that order), each
    with ``partitions`` as its default partition count and the same ``overrides``."""
    made: list[AdminBroker] = []
    for name in names.split(","):
        if name == "kafka":
            made.append(KafkaBroker(partitions, list(overrides), False))
        elif name == "kafkernel":
            made.append(KafkernelBroker(partitions, list(overrides), False))
        else:
            raise SystemExit(f"--brokers: unknown broker {name!r} (kafka, kafkernel)")
    return made
