"""Run the real Apache Kafka broker on this machine, without Docker: one KRaft node that is
broker and controller at once, listening only on 127.0.0.1, with a temporary log dir.

    with reference.kafka.start() as kafka:
        print(kafka.bootstrap, kafka.startup_seconds, kafka.rss_bytes())

``start_cluster(3)`` runs three such nodes as one cluster (one KRaft quorum of the three,
internal topics replicated three ways), for replicated workloads and failover.

The jars come from ``python -m reference.fetch`` (``./dev test`` runs it). Used by the
differential tests (tests/reference) and meant for the benchmarks too, so nothing here
depends on pytest.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse

from kernel.protocol.client import decode_response, encode_request
from reference.fetch import is_fetched, kafka_version, libs_dir

# Kafka's heap, fixed (-Xms = -Xmx) so startup time and memory are comparable run to run.
HEAP = "1g"
NODE_ID = 1
HOST = "127.0.0.1"
STARTUP_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
# How often start-up probes Metadata: the resolution of ``startup_seconds``.
PROBE_INTERVAL = 0.02

# kafka-server-start.sh's JVM options (KAFKA_JVM_PERFORMANCE_OPTS), heap aside.
JVM_OPTIONS = (
    "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"

# Warnings and worse go to <work dir>/server.log; the rest of Kafka's chatter nowhere.
LOG4J2_PROPERTIES = """\
status = warn
shutdownHook = disable
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


class KafkaNotFetched(RuntimeError):
    """The jars are not in the cache yet."""


class KafkaStartError(RuntimeError):
    """Kafka exited or did not answer Metadata in time; the message ends with its log."""


def server_properties(port: int, controller_port: int, log_dir: Path) -> dict[str, str]:
    """A single combined broker+controller node, as small and quick as Kafka allows."""
    return {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }


def sasl_properties(port: int, controller_port: int, users: Mapping[str, str],
                    super_user: str, tls: tuple[str, str] | None = None) -> dict[str, str]:
    """Clients on a SASL_PLAINTEXT listener with PLAIN (``users``, as the listener's JAAS
    users) and SCRAM-SHA-256/512 (created with AlterUserScramCredentials), the
    StandardAuthorizer with ``super_user`` (who is also the brokers' own login), and the
    controller on PLAINTEXT as ANONYMOUS, which must be a super user too. With ``tls``
    (PEM keystore, PEM truststore) the listener is SASL_SSL instead."""
    password = users[super_user]
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    name = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    tls_settings = {} if tls is None else {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": tls[0],
        "ssl.truststore.type": "PEM", "ssl.truststore.location": tls[1]}
    lower = name.lower()
    return {
        **tls_settings,
        "listeners": f"{name}://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"{name}://{HOST}:{port}",
        "inter.broker.listener.name": name,
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{name}:{name}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        f"listener.name.{lower}.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{super_user}" password="{password}" {plain_users};',
        f"listener.name.{lower}.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"listener.name.{lower}.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{super_user};User:ANONYMOUS",
        "connection.failed.authentication.delay.ms": "0",
    }


@dataclass
class ReferenceKafka:
    """A running Kafka; :meth:`stop` (or leaving the ``with`` block) ends it."""

    bootstrap: str
    process: subprocess.Popen[bytes]
    work_dir: Path
    log_dir: Path
    cluster_id: str
    node_id: int
    format_seconds: float
    startup_seconds: float  # from starting the JVM to the first Metadata answer
    remove_work_dir: bool = True
    _stopped: bool = field(default=False, repr=False)

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    @property
    def server_log(self) -> Path:
        return self.work_dir / "server.log"

    def rss_bytes(self) -> int:
        """Resident memory of the JVM now (VmRSS), 0 once it has exited."""
        return _rss_bytes(self.process.pid)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM (Kafka's clean shutdown), SIGKILL after ``timeout``; the exit code."""
        if not self._stopped:
            self._stopped = True
            _terminate(self.process, timeout)
            if self.remove_work_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)
        return self.process.returncode

    def __enter__(self) -> ReferenceKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(
    *,
    heap: str = HEAP,
    overrides: Mapping[str, str] | None = None,
    work_dir: str | Path | None = None,
    timeout: float = STARTUP_TIMEOUT,
    java: str = "java",
    sasl_users: Mapping[str, str] | None = None,
    super_user: str = "admin",
    tls: tuple[str, str] | None = None,
) -> ReferenceKafka:
    """Format a fresh log dir and start Kafka on free loopback ports; returns once it
    answers Metadata with itself as a broker. ``overrides`` are server.properties keys.
    With ``sasl_users`` (user -> password) clients must log in over SASL_PLAINTEXT, and
    ACLs are enforced (``sasl_properties``; over TLS with ``tls``); readiness is then
    ApiVersions answered."""
    if not is_fetched():
        raise KafkaNotFetched(
            f"Apache Kafka {kafka_version()} is not fetched into {libs_dir()}: run ./dev test"
        )
    if shutil.which(java) is None:
        raise KafkaNotFetched(f"{java} is not installed: run ./dev test")
    own_dir = work_dir is None
    work = Path(work_dir or tempfile.mkdtemp(prefix="reference-kafka-"))
    work.mkdir(parents=True, exist_ok=True)
    log_dir = work / "kraft-logs"
    port, controller_port = _free_ports(2)
    props = server_properties(port, controller_port, log_dir)
    if sasl_users is not None:
        props.update(sasl_properties(port, controller_port, sasl_users, super_user, tls))
    props.update(overrides or {})
    config = work / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    log4j = work / "log4j2.properties"
    log4j.write_text(LOG4J2_PROPERTIES.format(log_file=work / "server.log"))
    cluster_id = _random_cluster_id()
    base = [java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={work}", "-cp", f"{libs_dir()}/*"]

    began = time.monotonic()
    formatted = subprocess.run(
        [*base, "-Xmx256m", STORAGE_TOOL_MAIN, "format", "--cluster-id", cluster_id,
         "--config", str(config)],
        capture_output=True, text=True, timeout=timeout,
    )
    format_seconds = time.monotonic() - began
    if formatted.returncode != 0:
        if own_dir:
            shutil.rmtree(work, ignore_errors=True)
        raise KafkaStartError(f"kafka-storage format failed ({formatted.returncode}):\n"
                              f"{formatted.stdout}{formatted.stderr}")

    began = time.monotonic()
    with open(work / "kafka.out", "wb") as out:
        process = subprocess.Popen(
            [*die_with_parent(), *base, f"-Xmx{heap}", f"-Xms{heap}", BROKER_MAIN,
             str(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=work,
        )
    kafka = ReferenceKafka(
        bootstrap=f"{HOST}:{port}", process=process, work_dir=work, log_dir=log_dir,
        cluster_id=cluster_id, node_id=NODE_ID, format_seconds=format_seconds,
        startup_seconds=0.0, remove_work_dir=own_dir,
    )
    deadline = began + timeout
    def ready(bootstrap: str) -> bool:
        if sasl_users is None:
            return answers_metadata(bootstrap)
        return answers_api_versions(bootstrap, tls=tls is not None)

    while not ready(kafka.bootstrap):
        if process.poll() is not None or time.monotonic() > deadline:
            why = (f"exited with {process.returncode}" if process.returncode is not None
                   else f"did not answer Metadata within {timeout:.0f} s")
            tail = _tail(work / "kafka.out") + _tail(work / "server.log")
            kafka.remove_work_dir = False  # keep the logs to read
            kafka.stop()
            raise KafkaStartError(f"Kafka {why}; logs in {work}:\n{tail}")
        time.sleep(PROBE_INTERVAL)
    kafka.startup_seconds = time.monotonic() - began
    return kafka


def answers_metadata(bootstrap: str) -> bool:
    """Metadata (v12, all topics) answered with at least one broker: the broker has
    registered with its controller and serves clients."""
    return metadata_brokers(bootstrap) > 0


def metadata_brokers(bootstrap: str) -> int:
    """How many brokers a Metadata (v12) answer of ``bootstrap`` names; 0 without one."""
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2.0) as sock:
            sock.settimeout(5.0)
            sock.sendall(_metadata_request())
            head = _recv_exactly(sock, 4)
            frame = _recv_exactly(sock, struct.unpack(">i", head)[0])
    except (OSError, struct.error, EOFError):
        return 0
    _, response = decode_response(frame, MetadataResponse.__api_key__,
                                  MetadataResponse.__version__)
    return len(response.brokers)


# -- a cluster of three ------------------------------------------------------------


def cluster_properties(node_id: int, port: int, controller_port: int, voters: str,
                       log_dir: Path, nodes: int) -> dict[str, str]:
    """One of ``nodes`` combined broker+controller nodes of a KRaft quorum (``voters``:
    Kafka's controller.quorum.voters), with Kafka's replication defaults for a cluster
    of three: internal topics replicated ``min(3, nodes)`` ways, min ISR 2."""
    rf = str(min(3, nodes))
    min_isr = str(min(2, nodes))
    return {
        **server_properties(port, controller_port, log_dir),
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "default.replication.factor": rf,
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
    }


@dataclass
class ReferenceNode:
    """One node of a :class:`ReferenceCluster`; its ports and log dir stay the same
    across :meth:`ReferenceCluster.restart`."""

    node_id: int
    port: int
    controller_port: int
    work_dir: Path
    command: list[str]
    process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def launch(self) -> None:
        with open(self.work_dir / "kafka.out", "ab") as out:
            self.process = subprocess.Popen(
                [*die_with_parent(), *self.command], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, cwd=self.work_dir)

    def kill(self) -> None:
        """kill -9: no controlled shutdown; the controller fences it once its broker
        session (broker.session.timeout.ms) lapses."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT)

    def rss_bytes(self) -> int:
        return 0 if self.process is None else _rss_bytes(self.process.pid)


@dataclass
class ReferenceCluster:
    """Kafka nodes 1..N, each broker and controller; :meth:`stop` ends them all."""

    nodes: dict[int, ReferenceNode]
    work_dir: Path
    cluster_id: str
    format_seconds: float
    startup_seconds: float
    remove_work_dir: bool = True
    _stopped: bool = field(default=False, repr=False)

    @property
    def bootstrap(self) -> str:
        """Every node, so a client bootstraps while any one of them is up."""
        return ",".join(n.bootstrap for n in self.nodes.values())

    def node(self, node_id: int) -> ReferenceNode:
        return self.nodes[node_id]

    def restart(self, node_id: int, timeout: float = STARTUP_TIMEOUT) -> float:
        """Start a killed node again on its ports and log dir; seconds until it answers
        Metadata naming every node."""
        node = self.nodes[node_id]
        if node.alive:
            raise KafkaStartError(f"node {node_id} is still running")
        began = time.monotonic()
        node.launch()
        self._wait_ready([node], timeout)
        return time.monotonic() - began

    def _wait_ready(self, nodes: list[ReferenceNode], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for node in nodes:
            while metadata_brokers(node.bootstrap) < len(self.nodes):
                if not node.alive or time.monotonic() > deadline:
                    why = ("exited" if not node.alive else
                           f"did not answer Metadata naming {len(self.nodes)} brokers "
                           f"within {timeout:.0f} s")
                    tail = _tail(node.work_dir / "kafka.out") + _tail(
                        node.work_dir / "server.log")
                    raise KafkaStartError(f"Kafka node {node.node_id} {why}; logs in "
                                          f"{node.work_dir}:\n{tail}")
                time.sleep(PROBE_INTERVAL * 5)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        if self._stopped:
            return
        self._stopped = True
        for node in self.nodes.values():
            if node.alive and node.process is not None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            if node.process is not None:
                _terminate(node.process, timeout)
        if self.remove_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> ReferenceCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_cluster(
    nodes: int = 3,
    *,
    heap: str = HEAP,
    overrides: Mapping[str, str] | None = None,
    work_dir: str | Path | None = None,
    timeout: float = STARTUP_TIMEOUT,
    java: str = "java",
) -> ReferenceCluster:
    """``nodes`` combined broker+controller nodes, one KRaft quorum of them all, on free
    loopback ports, each with its own log dir and the single node's JVM options and
    heap (so three nodes take three heaps); returns once every node answers Metadata
    naming all of them. ``overrides`` are server.properties keys for every node."""
    if not is_fetched():
        raise KafkaNotFetched(
            f"Apache Kafka {kafka_version()} is not fetched into {libs_dir()}: run ./dev test"
        )
    if shutil.which(java) is None:
        raise KafkaNotFetched(f"{java} is not installed: run ./dev test")
    own_dir = work_dir is None
    work = Path(work_dir or tempfile.mkdtemp(prefix="reference-kafka-cluster-"))
    ports = _free_ports(2 * nodes)
    ids = list(range(1, nodes + 1))
    voters = ",".join(f"{i}@{HOST}:{ports[nodes + i - 1]}" for i in ids)
    cluster_id = _random_cluster_id()
    cluster = ReferenceCluster({}, work, cluster_id, 0.0, 0.0, remove_work_dir=own_dir)
    formats: list[subprocess.Popen[bytes]] = []
    began = time.monotonic()
    for i in ids:
        node_dir = work / f"node-{i}"
        node_dir.mkdir(parents=True, exist_ok=True)
        props = cluster_properties(i, ports[i - 1], ports[nodes + i - 1], voters,
                                   node_dir / "kraft-logs", nodes)
        props.update(overrides or {})
        config = node_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = node_dir / "log4j2.properties"
        log4j.write_text(LOG4J2_PROPERTIES.format(log_file=node_dir / "server.log"))
        base = [java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j}",
                f"-Dkafka.logs.dir={node_dir}", "-cp", f"{libs_dir()}/*"]
        cluster.nodes[i] = ReferenceNode(
            i, ports[i - 1], ports[nodes + i - 1], node_dir,
            [*base, f"-Xmx{heap}", f"-Xms{heap}", BROKER_MAIN, str(config)])
        # The nodes format at once: three short JVMs, not one after another.
        with open(node_dir / "format.out", "wb") as out:
            formats.append(subprocess.Popen(
                [*base, "-Xmx256m", STORAGE_TOOL_MAIN, "format", "--cluster-id", cluster_id,
                 "--config", str(config)], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT))
    try:
        for i, proc in zip(ids, formats, strict=True):
            if proc.wait(timeout) != 0:
                raise KafkaStartError(f"kafka-storage format of node {i} failed "
                                      f"({proc.returncode}):\n"
                                      + _tail(work / f"node-{i}" / "format.out"))
        cluster.format_seconds = time.monotonic() - began
        began = time.monotonic()
        for node in cluster.nodes.values():
            node.launch()
        cluster._wait_ready(list(cluster.nodes.values()), timeout)
        cluster.startup_seconds = time.monotonic() - began
    except BaseException:
        for proc in formats:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        cluster.remove_work_dir = False  # keep the logs to read
        cluster.stop()
        raise
    return cluster


def answers_api_versions(bootstrap: str, *, tls: bool = False) -> bool:
    """ApiVersions (v0) answered: a SASL listener serves it before authentication, and
    Kafka opens its listeners once the broker has started. ``tls``: over TLS, the
    server's certificate not checked (a readiness probe of our own broker)."""
    host, port = bootstrap.rsplit(":", 1)
    request = struct.pack(">hhih", 18, 0, 1, len("probe")) + b"probe"
    try:
        with socket.create_connection((host, int(port)), timeout=2.0) as raw:
            sock = raw
            if tls:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                sock = context.wrap_socket(raw, server_hostname=host)
            sock.settimeout(5.0)
            sock.sendall(struct.pack(">i", len(request)) + request)
            head = _recv_exactly(sock, 4)
            frame = _recv_exactly(sock, struct.unpack(">i", head)[0])
    except (OSError, struct.error, EOFError):
        return False
    return len(frame) >= 6 and struct.unpack_from(">h", frame, 4)[0] == 0


def _rss_bytes(pid: int) -> int:
    """A process's resident memory now (VmRSS), 0 once it has exited."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _metadata_request() -> bytes:
    return encode_request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False),
                          1, "reference-probe")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _random_cluster_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16 bytes, no padding;
    Kafka refuses ids that start with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def die_with_parent(signal_name: str = "TERM") -> list[str]:
    """A command prefix that sends the process ``signal_name`` when the thread that
    started it dies (PR_SET_PDEATHSIG, through util-linux's setpriv rather than a
    preexec_fn, which is unsafe once the caller has threads), so an interrupted test
    run leaves no broker, Kafka or ZooKeeper behind."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", signal_name] if setpriv else []


def _terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
    except OSError:
        return ""


def main() -> None:
    """Start Kafka, print what it took, wait for Ctrl-C: ``python -m reference.kafka``."""
    with start() as kafka:
        print(f"Apache Kafka {kafka_version()} on {kafka.bootstrap} (cluster {kafka.cluster_id})"
              f"; format {kafka.format_seconds:.1f} s, start {kafka.startup_seconds:.1f} s, "
              f"RSS {kafka.rss_bytes() / 2**20:.0f} MiB, heap {HEAP}; logs in {kafka.work_dir}",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
        print(f"stopping; exit code {kafka.stop()}")


if __name__ == "__main__":
    main()
