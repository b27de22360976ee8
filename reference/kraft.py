"""Run Apache Kafka as Kafka 4 runs in production: a quorum of **controller-only** nodes
(``process.roles=controller``) and, beside it, **broker-only** nodes
(``process.roles=broker``), each its own JVM on free loopback ports.

    with reference.kraft.start_quorum(controllers=3, brokers=3) as quorum:
        print(quorum.bootstrap, quorum.controller_bootstrap, quorum.active_controller())
        quorum.node(quorum.active_controller()).kill()

The quorum is formatted one of three ways (``voters=``):

- ``"static"``: ``controller.quorum.voters`` (kraft.version 0);
- ``"dynamic"``: ``controller.quorum.bootstrap.servers``, the controllers formatted with
  ``--initial-controllers id@host:port:dirid,...``, the brokers with
  ``--no-initial-controllers`` (kraft.version 1, KIP-853);
- ``"standalone"``: dynamic too, but only the first controller is a voter
  (``--standalone``); the others are formatted ``--no-initial-controllers`` and stay
  observers until ``kafka-metadata-quorum add-controller``.

``brokers=0`` starts the controllers alone: Kafkernel brokers join them later through
:attr:`KraftQuorum.controller_bootstrap` (or :attr:`KraftQuorum.voters` for a static
quorum) and :attr:`KraftQuorum.cluster_id`. Node ids follow Kafka's system tests:
controllers 3001.., brokers 1... Nothing here depends on pytest.
"""

from __future__ import annotations

import base64
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.describe_quorum.v2.request import PartitionData as DescribeQuorumPartition
from kio.schema.describe_quorum.v2.request import TopicData as DescribeQuorumTopic
from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse
from kio.static.primitive import i32

from kernel.protocol.client import decode_response, encode_request
from reference import tools
from reference.fetch import is_fetched, kafka_version, libs_dir
from reference.kafka import (
    BROKER_MAIN,
    HOST,
    JVM_OPTIONS,
    LOG4J2_PROPERTIES,
    STARTUP_TIMEOUT,
    STOP_TIMEOUT,
    STORAGE_TOOL_MAIN,
    KafkaNotFetched,
    KafkaStartError,
    _free_ports,
    _random_cluster_id,
    _recv_exactly,
    _rss_bytes,
    _tail,
    _terminate,
    die_with_parent,
    metadata_brokers,
)

Voters = Literal["static", "dynamic", "standalone"]
Role = Literal["controller", "broker"]

# Controllers need little heap; brokers get the single node's default less half.
CONTROLLER_HEAP = "384m"
BROKER_HEAP = "512m"
CONTROLLER_ID_BASE = 3000  # kafkatest's isolated controllers: 3001, 3002, ...
METADATA_TOPIC = "__cluster_metadata"
# Kafka's reserved topic id of __cluster_metadata (Uuid.METADATA_TOPIC_ID: 0...01).
METADATA_TOPIC_ID = uuid.UUID(int=1)
POLL_INTERVAL = 0.1
# Six JVMs starting at once on two loaded cores take minutes; one node alone, seconds.
QUORUM_STARTUP_TIMEOUT = 300.0
RPC_TIMEOUT = 3.0


def _uuid_text(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def random_directory_id() -> uuid.UUID:
    """A directory id as Kafka's Uuid.randomUuid makes one: never one of the reserved
    ids (the first 100) and never text starting with '-'."""
    while True:
        value = uuid.uuid4()
        if value.int >= 100 and not _uuid_text(value).startswith("-"):
            return value


def send(address: str, body: Any, timeout: float = RPC_TIMEOUT,
         correlation_id: int = 7) -> Any:
    """One kio request on a new connection to ``address`` (host:port); the decoded
    response body. Raises OSError/EOFError when nothing answers."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(encode_request(body, correlation_id, "reference-kraft"))
        head = _recv_exactly(sock, 4)
        frame = _recv_exactly(sock, struct.unpack(">i", head)[0])
    answered, response = decode_response(frame, body.__api_key__, body.__version__)
    if answered != correlation_id:
        raise EOFError(f"correlation id {answered}, sent {correlation_id}")
    return response


def describe_quorum(address: str, timeout: float = RPC_TIMEOUT) -> DescribeQuorumResponse:
    """DescribeQuorum v2 of ``__cluster_metadata-0``, sent to a controller listener."""
    body = DescribeQuorumRequest(topics=(DescribeQuorumTopic(
        topic_name=METADATA_TOPIC,
        partitions=(DescribeQuorumPartition(partition_index=i32(0)),)),))
    response: DescribeQuorumResponse = send(address, body, timeout)
    return response


@dataclass
class KraftNode:
    """One controller-only or broker-only Kafka; its ports, log dir and directory id stay
    the same across :meth:`KraftQuorum.restart`."""

    node_id: int
    role: Role
    port: int  # the controller listener of a controller, PLAINTEXT of a broker
    work_dir: Path
    log_dir: Path
    directory_id: uuid.UUID  # meta.properties' directory.id (the metadata dir's)
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def controller_endpoint(self) -> str | None:
        """host:port of the controller listener (None on a broker)."""
        return self.address if self.role == "controller" else None

    @property
    def bootstrap(self) -> str | None:
        """host:port of the broker's client listener (None on a controller)."""
        return self.address if self.role == "broker" else None

    @property
    def directory_id_text(self) -> str:
        return _uuid_text(self.directory_id)

    @property
    def metadata_dir(self) -> Path:
        return self.log_dir / f"{METADATA_TOPIC}-0"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def launch(self) -> None:
        self.paused = False
        with open(self.work_dir / "kafka.out", "ab") as out:
            self.process = subprocess.Popen(
                [*die_with_parent(), *self.command], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, cwd=self.work_dir)

    def kill(self) -> None:
        """kill -9: sockets close at once, nothing is flushed or resigned."""
        if self.alive and self.process is not None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT)
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open and silent."""
        if self.alive and self.process is not None:
            self.process.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def rss_bytes(self) -> int:
        return 0 if self.process is None else _rss_bytes(self.process.pid)

    def logs_tail(self) -> str:
        return _tail(self.work_dir / "kafka.out") + _tail(self.work_dir / "server.log")


@dataclass
class KraftQuorum:
    """Controllers and brokers of one cluster; :meth:`stop` ends them all."""

    nodes: dict[int, KraftNode]
    work_dir: Path
    cluster_id: str
    voters_mode: Voters
    format_seconds: float = 0.0
    startup_seconds: float = 0.0
    remove_work_dir: bool = True
    _stopped: bool = field(default=False, repr=False)

    @property
    def controllers(self) -> list[KraftNode]:
        return [n for n in self.nodes.values() if n.role == "controller"]

    @property
    def brokers(self) -> list[KraftNode]:
        return [n for n in self.nodes.values() if n.role == "broker"]

    @property
    def controller_bootstrap(self) -> str:
        """``controller.quorum.bootstrap.servers`` (and ``--bootstrap-controller``):
        every controller's listener."""
        return ",".join(n.address for n in self.controllers)

    @property
    def voters(self) -> str:
        """``controller.quorum.voters`` of a static quorum: ``id@host:port,...``."""
        return ",".join(f"{n.node_id}@{n.address}" for n in self.controllers)

    @property
    def initial_controllers(self) -> str:
        """``--initial-controllers`` of a dynamic quorum: ``id@host:port:dirid,...``."""
        return ",".join(f"{n.node_id}@{n.address}:{n.directory_id_text}"
                        for n in self.controllers)

    @property
    def bootstrap(self) -> str:
        """Every broker's client listener."""
        return ",".join(n.address for n in self.brokers)

    def node(self, node_id: int) -> KraftNode:
        return self.nodes[node_id]

    def quorum_settings(self) -> dict[str, str]:
        """What a node joining this quorum puts in its server.properties to find the
        controllers (a Kafkernel broker, increment 7)."""
        return {
            **({"controller.quorum.voters": self.voters} if self.voters_mode == "static"
               else {"controller.quorum.bootstrap.servers": self.controller_bootstrap}),
            "controller.listener.names": "CONTROLLER",
        }

    def describe_quorum(self) -> DescribeQuorumResponse | None:
        """The active controller's DescribeQuorum v2 answer (None while there is none):
        asks each running controller; of those answering as leader (a resumed old leader
        may still think it is one) the one with the highest epoch."""
        best: DescribeQuorumResponse | None = None
        for node in self.controllers:
            if not node.alive or node.paused:
                continue
            try:
                response = describe_quorum(node.address)
            except (OSError, EOFError, struct.error):
                continue
            if response.error_code != 0 or not response.topics or \
                    response.topics[0].partitions[0].error_code != 0:
                continue
            epoch = response.topics[0].partitions[0].leader_epoch
            if best is None or epoch > best.topics[0].partitions[0].leader_epoch:
                best = response
        return best

    def active_controller(self) -> int | None:
        """The node id of the Raft leader, None while there is none."""
        response = self.describe_quorum()
        if response is None:
            return None
        leader = int(response.topics[0].partitions[0].leader_id)
        return leader if leader >= 0 else None

    def wait_for_leader(self, timeout: float = STARTUP_TIMEOUT,
                        excluding: int | None = None) -> int:
        """Polls until some controller other than ``excluding`` leads; its id."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.active_controller()
            if leader is not None and leader != excluding:
                return leader
            if time.monotonic() > deadline:
                raise KafkaStartError(f"no active controller within {timeout:.0f} s")
            time.sleep(POLL_INTERVAL)

    def restart(self, node_id: int, timeout: float = STARTUP_TIMEOUT) -> float:
        """Start a killed (or stopped) node again on its ports and dirs; seconds until it
        is ready (a controller: a leader is known; a broker: Metadata names every
        running broker)."""
        node = self.nodes[node_id]
        if node.alive:
            raise KafkaStartError(f"node {node_id} is still running")
        began = time.monotonic()
        node.launch()
        self._wait_ready([node], timeout)
        return time.monotonic() - began

    def _wait_ready(self, nodes: list[KraftNode], timeout: float) -> None:
        deadline = time.monotonic() + timeout

        def ready(node: KraftNode) -> bool:
            if node.role == "controller":
                return self._controller_ready(node)
            wanted = sum(1 for b in self.brokers if b.alive)
            return metadata_brokers(node.address) >= wanted

        for node in nodes:
            while not ready(node):
                if not node.alive or time.monotonic() > deadline:
                    why = "exited" if not node.alive else f"was not ready in {timeout:.0f} s"
                    raise KafkaStartError(f"Kafka {node.role} {node.node_id} {why}; logs "
                                          f"in {node.work_dir}:\n{node.logs_tail()}")
                time.sleep(POLL_INTERVAL)

    def _controller_ready(self, node: KraftNode) -> bool:
        """A leader exists and ``node`` is in its answer (voter or observer) with the
        leader's high watermark reached."""
        response = self.describe_quorum()
        if response is None:
            return False
        partition = response.topics[0].partitions[0]
        if partition.leader_id == node.node_id:
            return partition.high_watermark > 0
        replicas = (*partition.current_voters, *partition.observers)
        return any(r.replica_id == node.node_id and r.log_end_offset >= 0
                   and r.last_caught_up_timestamp > 0 for r in replicas)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM to brokers first (their controlled shutdown needs the controllers),
        then to the controllers; SIGKILL after ``timeout``."""
        if self._stopped:
            return
        self._stopped = True
        for group in (self.brokers, self.controllers):
            for node in group:
                if node.process is not None and node.process.poll() is None:
                    node.process.send_signal(signal.SIGCONT)
                    node.process.send_signal(signal.SIGTERM)
            for node in group:
                if node.process is not None:
                    _terminate(node.process, timeout)
        if self.remove_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> KraftQuorum:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def controller_properties(node_id: int, port: int, log_dir: Path) -> dict[str, str]:
    """A controller-only node; the quorum keys come from :meth:`KraftQuorum.quorum_settings`."""
    return {
        "process.roles": "controller",
        "node.id": str(node_id),
        "listeners": f"CONTROLLER://{HOST}:{port}",
        "advertised.listeners": f"CONTROLLER://{HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
    }


def broker_properties(node_id: int, port: int, log_dir: Path, brokers: int) -> dict[str, str]:
    """A broker-only node of ``brokers``, with internal topics replicated
    ``min(3, brokers)`` ways and min ISR 2 (as the combined cluster has them)."""
    rf = str(min(3, brokers))
    min_isr = str(min(2, brokers))
    return {
        "process.roles": "broker",
        "node.id": str(node_id),
        "listeners": f"PLAINTEXT://{HOST}:{port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": rf,
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
    }


def format_arguments(quorum: KraftQuorum, node: KraftNode) -> list[str]:
    """``kafka-storage format``'s quorum flags for ``node`` (after -t and -c)."""
    if quorum.voters_mode == "static":
        return []
    if node.role == "broker":
        return ["--no-initial-controllers"]
    if quorum.voters_mode == "dynamic":
        return ["--initial-controllers", quorum.initial_controllers]
    first = quorum.controllers[0]
    return ["--standalone"] if node is first else ["--no-initial-controllers"]


def start_quorum(
    controllers: int = 3,
    brokers: int = 0,
    *,
    voters: Voters = "static",
    controller_heap: str = CONTROLLER_HEAP,
    broker_heap: str = BROKER_HEAP,
    overrides: Mapping[str, str] | None = None,
    controller_overrides: Mapping[str, str] | None = None,
    broker_overrides: Mapping[str, str] | None = None,
    work_dir: str | Path | None = None,
    timeout: float = QUORUM_STARTUP_TIMEOUT,
    java: str = "java",
    features: Mapping[str, int] | None = None,
) -> KraftQuorum:
    """Format and start ``controllers`` controller-only and ``brokers`` broker-only Kafka
    nodes on free loopback ports: every node formats at once, the controllers start at
    once, then the brokers at once; returns once every controller is part of a quorum
    with a leader and every broker answers Metadata naming all brokers.
    ``overrides`` are server.properties keys for every node, the role ones for that
    role's nodes only; ``features`` are finalized levels given to ``kafka-storage
    format --feature`` (e.g. ``{"group.version": 0}`` for a broker that lacks KIP-848)."""
    if not is_fetched():
        raise KafkaNotFetched(
            f"Apache Kafka {kafka_version()} is not fetched into {libs_dir()}: run ./dev test"
        )
    if shutil.which(java) is None:
        raise KafkaNotFetched(f"{java} is not installed: run ./dev test")
    if controllers < 1:
        raise ValueError("a quorum needs at least one controller")
    own_dir = work_dir is None
    work = Path(work_dir or tempfile.mkdtemp(prefix="reference-kraft-"))
    ports = _free_ports(controllers + brokers)
    quorum = KraftQuorum({}, work, _random_cluster_id(), voters, remove_work_dir=own_dir)
    plan: list[tuple[Role, int, int]] = [
        *(("controller", CONTROLLER_ID_BASE + i, ports[i - 1])
          for i in range(1, controllers + 1)),
        *(("broker", i, ports[controllers + i - 1]) for i in range(1, brokers + 1))]
    for role, node_id, port in plan:
        node_dir = work / f"{role}-{node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        heap = controller_heap if role == "controller" else broker_heap
        config = node_dir / "server.properties"
        log4j = node_dir / "log4j2.properties"
        log4j.write_text(LOG4J2_PROPERTIES.format(log_file=node_dir / "server.log"))
        quorum.nodes[node_id] = KraftNode(
            node_id, role, port, node_dir, node_dir / "kraft-logs", random_directory_id(),
            [*_jvm(java, node_dir, log4j), f"-Xmx{heap}", f"-Xms{heap}", BROKER_MAIN,
             str(config)])
    for node in quorum.nodes.values():
        props = (controller_properties(node.node_id, node.port, node.log_dir)
                 if node.role == "controller"
                 else broker_properties(node.node_id, node.port, node.log_dir, brokers))
        props.update(quorum.quorum_settings())
        props.update(overrides or {})
        props.update((controller_overrides if node.role == "controller"
                      else broker_overrides) or {})
        (node.work_dir / "server.properties").write_text(
            "".join(f"{k}={v}\n" for k, v in props.items()))

    formats: list[tuple[KraftNode, subprocess.Popen[bytes]]] = []
    began = time.monotonic()
    try:
        for node in quorum.nodes.values():  # every node formats at once
            with open(node.work_dir / "format.out", "wb") as out:
                formats.append((node, subprocess.Popen(
                    tools.java_command(
                        STORAGE_TOOL_MAIN, "format", "--cluster-id", quorum.cluster_id,
                        "--config", str(node.work_dir / "server.properties"),
                        *format_arguments(quorum, node),
                        *(f"--feature={k}={v}" for k, v in (features or {}).items()),
                        java=java,
                        archive=_class_data_archive(java)),
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)))
        for node, proc in formats:
            if proc.wait(timeout) != 0:
                raise KafkaStartError(f"kafka-storage format of {node.role} {node.node_id} "
                                      f"failed ({proc.returncode}):\n"
                                      + _tail(node.work_dir / "format.out"))
        quorum.format_seconds = time.monotonic() - began
        for node in quorum.nodes.values():
            if voters == "dynamic" and node.role == "controller":
                _check_directory_id(node)  # --initial-controllers wrote the one we chose
            else:
                node.directory_id = _read_directory_id(node)
        # Controllers first, brokers once a controller is active: brokers launched with
        # the controllers sometimes never registered (Kafka 4.3.1, dynamic quorum: two
        # of three stuck for minutes with no error logged, or exiting after
        # initial.broker.registration.timeout.ms).
        began = time.monotonic()
        for node in quorum.controllers:
            node.launch()
        quorum._wait_ready(quorum.controllers, timeout)
        for node in quorum.brokers:
            node.launch()
        quorum._wait_ready(quorum.brokers, timeout)
        quorum.startup_seconds = time.monotonic() - began
        for node in quorum.nodes.values():
            if not node.alive:
                raise KafkaStartError(f"Kafka {node.role} {node.node_id} exited after it was "
                                      f"ready; logs in {node.work_dir}:\n{node.logs_tail()}")
    except BaseException:
        for _, proc in formats:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        quorum.remove_work_dir = False  # keep the logs to read
        quorum.stop()
        raise
    return quorum


def read_meta_properties(log_dir: Path) -> dict[str, str]:
    """A log dir's meta.properties as a dict."""
    props: dict[str, str] = {}
    for line in (log_dir / "meta.properties").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def _read_directory_id(node: KraftNode) -> uuid.UUID:
    text = read_meta_properties(node.log_dir)["directory.id"]
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def _check_directory_id(node: KraftNode) -> None:
    written = _read_directory_id(node)
    if written != node.directory_id:
        raise KafkaStartError(f"controller {node.node_id} was formatted with directory id "
                              f"{_uuid_text(written)}, not {node.directory_id_text}")


def _class_data_archive(java: str) -> list[str]:
    """The tools' class-data archive when one exists: a format JVM starts in half the
    time (reference/tools.py writes it on its first run)."""
    archive = tools.class_data_archive(java)
    return [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []


def _jvm(java: str, node_dir: Path, log4j: Path) -> list[str]:
    return [java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={node_dir}", "-cp", f"{libs_dir()}/*"]


def main() -> None:
    """Start 3 controllers and 3 brokers, print where, wait for Ctrl-C:
    ``python -m reference.kraft [static|dynamic|standalone] [controllers] [brokers]``."""
    import contextlib
    import sys

    mode = sys.argv[1] if len(sys.argv) > 1 else "static"
    assert mode in ("static", "dynamic", "standalone"), mode
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    brokers = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    # SIGTERM stops the nodes too (a background job ignores Ctrl-C's SIGINT).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with start_quorum(count, brokers, voters=mode) as quorum:  # type: ignore[arg-type]
        print(f"Apache Kafka {kafka_version()} cluster {quorum.cluster_id} ({mode}); "
              f"controllers {quorum.controller_bootstrap}; brokers {quorum.bootstrap}; "
              f"active controller {quorum.active_controller()}; format "
              f"{quorum.format_seconds:.1f} s, start {quorum.startup_seconds:.1f} s; "
              f"dirs in {quorum.work_dir}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
