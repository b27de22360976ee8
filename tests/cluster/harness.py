"""A Kafkernel cluster for tests and scripts: a real ZooKeeper (tests/zookeeper.py) and N
``kafkernel serve`` processes on metadata_zk under one chroot, with the coordinator and
txn plugins, broker ids 1..N on free loopback ports, each data directory kept across
restarts. Faults: kill -9, SIGSTOP/SIGCONT, restart on the same port and data, and
ZooKeeper's own restart.

    with harness.start_cluster(3) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        old = cluster.leader("t", 0)
        cluster.broker(old).kill()
        new, seconds = cluster.wait_new_leader("t", 0, old)

Nothing here depends on pytest, so bench/ scripts use it too (bench/replication.py,
bench/fault_soak.py); tests/cluster/conftest.py wraps it in fixtures.

Before any broker starts, ``__consumer_offsets`` and ``__transaction_state`` are
written into ZooKeeper with their replicas on every broker (up to the replication
factor), as an operator would create them: Kafkernel's coordinators create them with the
replication factor capped at the brokers registered at that moment, which for the first
broker of a cluster is 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from kernel.config import BrokerConfig, schema_keys
from plugins.metadata_zk import znodes
from reference.kafka import answers_api_versions, die_with_parent, metadata_brokers
from tests import zookeeper as zookeeper_launcher

HOST = "127.0.0.1"
SESSION_TIMEOUT_MS = 6000  # short, so that a dead broker's registration goes quickly
REPLICA_LAG_TIME_MAX_MS = 4000
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
POLL = 0.1
OFFSETS_TOPIC = "__consumer_offsets"
TXN_STATE_TOPIC = "__transaction_state"
NO_LEADER = -1

T = TypeVar("T")


class ClusterError(RuntimeError):
    """A broker or ZooKeeper did not do what the harness waited for; the message says
    what and ends with the broker's log tail where one applies."""


def wait_until(condition: Callable[[], T | None], what: str, timeout: float = 30.0,
               interval: float = POLL) -> T:
    """Poll ``condition`` until it returns something truthy; ClusterError after
    ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass(frozen=True)
class PartitionState:
    """A partition's leader and ISR as the controller wrote them (the znode)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class PartitionMetadata:
    """A partition as a client's Metadata request sees it."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class ClusterBroker:
    """One ``kafkernel serve`` process; its port and data directory stay the same across
    restarts."""

    broker_id: int
    port: int
    work_dir: Path
    args: list[str]
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "broker.log"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def launch(self) -> None:
        """Start the process (it must not be running); ``wait_answering`` waits for it."""
        if self.alive:
            raise ClusterError(f"broker {self.broker_id} is running already")
        # SIGKILL on the parent's death: a paused broker would hold SIGTERM pending.
        guard = die_with_parent("KILL")
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts + 1} ---\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [*guard, *self.args], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.starts += 1
        self.paused = False

    def wait_answering(self, timeout: float = STARTUP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not answers_api_versions(self.bootstrap):
            if self.process is None or self.process.poll() is not None:
                code = self.process.returncode if self.process else None
                raise ClusterError(f"broker {self.broker_id} exited with {code}:\n"
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ClusterError(f"broker {self.broker_id} did not answer within "
                                   f"{timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(POLL)

    def kill(self) -> None:
        """kill -9: no shutdown, no deregistration (the ZooKeeper session times out)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT)
        self.paused = False

    def terminate(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, the broker's clean shutdown; SIGKILL after ``timeout``."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            if self.paused:
                self.resume()
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        return self.process.returncode

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets and its session but answers nothing."""
        if not self.alive or self.process is None:
            raise ClusterError(f"broker {self.broker_id} is not running")
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def events(self) -> list[dict[str, Any]]:
        """The broker's JSON log events over all its starts; other lines are
        {"level": "raw", "line": ...}."""
        out: list[dict[str, Any]] = []
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return out
        for line in text.splitlines():
            if line.startswith("--- start "):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            out.append(event if isinstance(event, dict) else {"level": "raw", "line": line})
        return out

    def errors(self) -> list[str]:
        """Error-level events and anything not a log event (tracebacks)."""
        return [json.dumps(e)[:1000] for e in self.events()
                if e.get("level") in ("error", "critical", "raw") or "exception" in e]


@dataclass
class Cluster:
    """ZooKeeper, the brokers, and a ZooKeeper client of the chroot to read Kafka's
    znodes. ``stop`` (or leaving the ``with`` block) ends everything it started."""

    zookeeper: zookeeper_launcher.ZooKeeper
    chroot: str
    work_dir: Path
    brokers: dict[int, ClusterBroker]
    own_zookeeper: bool
    remove_work_dir: bool
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    _kazoo: KazooClient | None = field(default=None, repr=False)
    _admin: AdminClient | None = field(default=None, repr=False)

    # -- where things are ----------------------------------------------------------

    @property
    def zk_connect(self) -> str:
        return self.zookeeper.connect + self.chroot

    @property
    def bootstrap(self) -> str:
        """Every broker, so a client bootstraps while any one of them is up."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def broker(self, broker_id: int) -> ClusterBroker:
        return self.brokers[broker_id]

    @property
    def kazoo(self) -> KazooClient:
        if self._kazoo is None:
            client = KazooClient(hosts=self.zk_connect, timeout=10.0)
            client.start(timeout=30)
            self._kazoo = client
        return self._kazoo

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    # -- life cycle ----------------------------------------------------------------

    def start_brokers(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Start every broker not running, all at once, then wait for each to answer and
        be registered."""
        starting = [b for b in self.brokers.values() if not b.alive]
        for b in starting:
            b.launch()
        for b in starting:
            b.wait_answering(timeout)
        self.wait_registered([b.broker_id for b in starting], timeout)
        self.wait_brokers_known(timeout)

    def restart(self, broker_id: int, timeout: float = STARTUP_TIMEOUT) -> float:
        """Start a killed broker again on its port and data; returns the seconds it took
        to answer and register. As in Kafka, a broker id still registered by the old
        session is refused, so this first waits for that session to expire."""
        b = self.brokers[broker_id]
        if b.alive:
            raise ClusterError(f"broker {broker_id} is still running")
        self.wait_unregistered(broker_id, self.session_timeout_ms / 1000 * 3 + 10)
        began = time.monotonic()
        b.launch()
        b.wait_answering(timeout)
        self.wait_registered([broker_id], timeout)
        self.wait_brokers_known(timeout)
        return time.monotonic() - began

    def stop(self) -> None:
        # The clients first, so that they do not log the brokers going away.
        self._admin = None
        if self._kazoo is not None:
            with contextlib.suppress(Exception):
                self._kazoo.stop()
                self._kazoo.close()
            self._kazoo = None
        for b in self.brokers.values():
            if b.paused:
                b.resume()
        for b in self.brokers.values():
            b.terminate()
        if self.own_zookeeper:
            self.zookeeper.stop()
        if self.remove_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- ZooKeeper's view --------------------------------------------------------------

    def _zk(self, read: Callable[[KazooClient], T], default: T) -> T:
        """A read that answers ``default`` while ZooKeeper is unreachable (restarting)."""
        try:
            return read(self.kazoo)
        except NoNodeError:
            return default
        except (KazooException, KazooTimeoutError):
            return default

    def registered(self) -> set[int]:
        return {int(c) for c in self._zk(lambda k: k.get_children(znodes.BROKER_IDS), [])}

    def wait_registered(self, broker_ids: Sequence[int], timeout: float = STARTUP_TIMEOUT,
                        ) -> None:
        want = set(broker_ids)
        wait_until(lambda: want <= self.registered(),
                   f"brokers {sorted(want)} registered in ZooKeeper", timeout)

    def wait_brokers_known(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Wait until every running broker's own Metadata names every running broker: a
        registration reaches the others through a ZooKeeper watch, and until it has, a
        CreateTopics they answer counts too few brokers (as Kafka's would)."""
        running = [b for b in self.brokers.values() if b.alive and not b.paused]
        wait_until(lambda: all(metadata_brokers(b.bootstrap) >= len(running)
                               for b in running) or None,
                   f"every broker's Metadata naming all {len(running)} brokers", timeout)

    def wait_unregistered(self, broker_id: int, timeout: float) -> float:
        """Seconds until the broker's ephemeral registration is gone."""
        began = time.monotonic()
        wait_until(lambda: broker_id not in self.registered(),
                   f"broker {broker_id}'s registration to expire", timeout)
        return time.monotonic() - began

    def controller(self) -> int:
        data = self._zk(lambda k: k.get(znodes.CONTROLLER)[0], None)
        return znodes.decode_controller(data) if data else NO_LEADER

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """The partition's state znode (leader, epoch, ISR) as the controller wrote it."""
        path = znodes.partition_state_path(topic, partition)
        got = self._zk(lambda k: k.get(path), None)
        if got is None:
            return None
        state = znodes.decode_partition_state(got[0], got[1].version)
        return PartitionState(state.leader, state.leader_epoch, state.isr)

    def replicas(self, topic: str) -> dict[int, tuple[int, ...]]:
        data = self._zk(lambda k: k.get(znodes.topic_path(topic))[0], None)
        return dict(znodes.decode_topic(data).partitions) if data else {}

    def leader(self, topic: str, partition: int) -> int:
        state = self.partition_state(topic, partition)
        return state.leader if state is not None else NO_LEADER

    def wait_leader(self, topic: str, partition: int, timeout: float = 30.0) -> int:
        return wait_until(
            lambda: (s := self.partition_state(topic, partition)) is not None
            and s.leader != NO_LEADER and s.leader,
            f"a leader of {topic}-{partition}", timeout)

    def wait_new_leader(self, topic: str, partition: int, old: int, timeout: float = 30.0,
                        via: str = "znode") -> tuple[int, float]:
        """The first leader other than ``old`` (and not none), and the seconds it took
        to appear: in the partition's state znode (``via="znode"``) or in a client's
        Metadata answer (``via="metadata"``)."""
        began = time.monotonic()

        def found() -> int | None:
            if via == "metadata":
                m = self.metadata(topic, timeout=2.0).get(partition)
                leader = m.leader if m is not None else NO_LEADER
            else:
                leader = self.leader(topic, partition)
            return leader if leader not in (old, NO_LEADER) else None

        leader = wait_until(found, f"a leader of {topic}-{partition} other than {old}",
                            timeout, interval=0.05)
        return leader, time.monotonic() - began

    def wait_isr(self, topic: str, partition: int, members: Sequence[int],
                 timeout: float = 30.0) -> PartitionState:
        """Until the ISR holds all of ``members``."""
        want = set(members)

        def done() -> PartitionState | None:
            s = self.partition_state(topic, partition)
            return s if s is not None and want <= set(s.isr) else None

        try:
            return wait_until(done, f"{sorted(want)} in the ISR of {topic}-{partition}",
                              timeout)
        except ClusterError as e:
            raise ClusterError(f"{e}; it is {self.partition_state(topic, partition)}") \
                from None

    # -- a client's view ---------------------------------------------------------------

    def metadata(self, topic: str, timeout: float = 10.0) -> dict[int, PartitionMetadata]:
        """The topic's partitions as a Metadata answer names them ({} when none came)."""
        try:
            md = self.admin().list_topics(topic, timeout=timeout)
        except KafkaException:  # no answer within the timeout
            return {}
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return {}
        return {p: PartitionMetadata(m.leader, tuple(m.replicas), tuple(m.isrs))
                for p, m in t.partitions.items()}

    def metadata_brokers(self, timeout: float = 10.0) -> set[int]:
        return set(self.admin().list_topics(timeout=timeout).brokers)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3,
                     config: Mapping[str, str] | None = None, timeout: float = 30.0) -> None:
        """Create the topic and wait until every partition has a leader that answers."""
        futures = self.admin().create_topics(
            [NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
            operation_timeout=timeout)
        futures[name].result(timeout=timeout)
        for p in range(partitions):
            self.wait_leader(name, p, timeout)
        wait_until(lambda: len([m for m in self.metadata(name, 2.0).values()
                                if m.leader != NO_LEADER]) == partitions,
                   f"Metadata naming leaders of {name}'s {partitions} partitions", timeout)


def broker_settings() -> set[str]:
    """The kernel's broker keys: a setting another branch adds is passed only once the
    kernel knows it (an unknown key stops start-up)."""
    return set(schema_keys(BrokerConfig))


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))  # a JSON string is a TOML basic string


def broker_config(broker_id: int, port: int, data_dir: Path, zk_connect: str, *,
                  brokers: int, session_timeout_ms: int, offsets_partitions: int,
                  settings: Mapping[str, object], plugin_settings:
                  Mapping[str, Mapping[str, object]]) -> str:
    """The broker's TOML: replication settings as Kafka names them."""
    rf = min(3, brokers)
    top: dict[str, object] = {
        "broker.id": broker_id,
        "listeners": f"PLAINTEXT://{HOST}:{port}",
        "log.dirs": str(data_dir),
        "logging.format": "json",
        "metrics.port": -1,
        "default.replication.factor": rf,
        "num.partitions": 1,
    }
    known = broker_settings()
    if "replica.lag.time.max.ms" in known:
        top["replica.lag.time.max.ms"] = REPLICA_LAG_TIME_MAX_MS
    top.update(settings)
    tables: dict[str, dict[str, object]] = {
        "metadata_zk": {"zookeeper.connect": zk_connect,
                        "zookeeper.session.timeout.ms": session_timeout_ms},
        "coordinator": {"offsets.topic.num.partitions": offsets_partitions,
                        "offsets.topic.replication.factor": rf,
                        "group.initial.rebalance.delay.ms": 0},
        "txn": {"transaction.state.log.num.partitions": offsets_partitions,
                "transaction.state.log.replication.factor": rf,
                "transaction.state.log.min.isr": min(2, rf)},
    }
    for plugin, values in plugin_settings.items():
        tables.setdefault(plugin, {}).update(values)
    lines = [f"{json.dumps(k)} = {_toml(v)}" for k, v in top.items()]
    lines += ["[plugins]", 'enabled = ["metadata_zk", "coordinator", "txn"]']
    for plugin, values in tables.items():
        lines.append(f"[plugins.{plugin}]")
        lines += [f"{json.dumps(k)} = {_toml(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def _precreate_internal_topics(zk_connect: str, broker_ids: Sequence[int],
                               partitions: int, replication_factor: int) -> None:
    """__consumer_offsets and __transaction_state in Kafka's znodes (assignment and
    config, the configs Kafka gives them; the controller writes each partition's state
    once a replica is live), replicas spread as Kafka spreads them."""
    from kernel.replication_control import assign_replicas

    segment_bytes = "104857600"
    configs = {
        OFFSETS_TOPIC: {"cleanup.policy": "compact", "compression.type": "producer",
                        "segment.bytes": segment_bytes},
        TXN_STATE_TOPIC: {"cleanup.policy": "compact", "compression.type": "uncompressed",
                          "unclean.leader.election.enable": "false",
                          "min.insync.replicas": str(min(2, replication_factor)),
                          "segment.bytes": segment_bytes},
    }
    client = KazooClient(hosts=zk_connect, timeout=10.0)
    client.start(timeout=30)
    try:
        ids = sorted(broker_ids)
        placement = assign_replicas(ids, partitions, replication_factor, start_index=0,
                                    replica_shift=0)
        client.ensure_path(znodes.TOPICS)
        client.ensure_path("/config/topics")
        for topic, config in configs.items():
            client.create(znodes.config_path("topics", topic), znodes.encode_config(config))
            client.create(znodes.topic_path(topic), znodes.encode_topic(
                uuid.uuid4(), dict(enumerate(placement))))
    finally:
        client.stop()
        client.close()


def start_cluster(
    brokers: int = 3,
    *,
    zookeeper: zookeeper_launcher.ZooKeeper | None = None,
    work_dir: str | Path | None = None,
    session_timeout_ms: int = SESSION_TIMEOUT_MS,
    offsets_partitions: int = 3,
    settings: Mapping[str, object] | None = None,
    plugin_settings: Mapping[str, Mapping[str, object]] | None = None,
    timeout: float = STARTUP_TIMEOUT,
) -> Cluster:
    """Start ZooKeeper (unless one is given: the cluster then has a chroot of its own
    there) and ``brokers`` brokers, ids 1..N; returns once all are registered.
    ``settings`` are broker keys, ``plugin_settings`` plugin tables, over the
    harness's."""
    own_zk = zookeeper is None
    zk = zookeeper or zookeeper_launcher.start()
    own_dir = work_dir is None
    work = Path(work_dir or tempfile.mkdtemp(prefix="kafkernel-cluster-"))
    chroot = f"/kafkernel-{uuid.uuid4().hex[:12]}"
    cluster = Cluster(zk, chroot, work, {}, own_zookeeper=own_zk, remove_work_dir=own_dir,
                      session_timeout_ms=session_timeout_ms)
    try:
        root = KazooClient(hosts=zk.connect, timeout=10.0)
        root.start(timeout=30)
        root.ensure_path(chroot)
        root.stop()
        root.close()
        ids = list(range(1, brokers + 1))
        _precreate_internal_topics(cluster.zk_connect, ids, offsets_partitions,
                                   min(3, brokers))
        ports = [zookeeper_launcher.free_port() for _ in ids]
        for broker_id, port in zip(ids, ports, strict=True):
            bdir = work / f"broker-{broker_id}"
            bdir.mkdir(parents=True, exist_ok=True)
            config = bdir / "kafkernel.toml"
            config.write_text(broker_config(
                broker_id, port, bdir / "data", cluster.zk_connect, brokers=brokers,
                session_timeout_ms=session_timeout_ms,
                offsets_partitions=offsets_partitions, settings=settings or {},
                plugin_settings=plugin_settings or {}))
            cluster.brokers[broker_id] = ClusterBroker(
                broker_id, port, bdir,
                [sys.executable, "-m", "kernel", "serve", "--config", str(config)])
        cluster.start_brokers(timeout)
    except BaseException:
        cluster.remove_work_dir = False  # keep the logs to read
        cluster.stop()
        raise
    return cluster


__all__ = ["Cluster", "ClusterBroker", "ClusterError", "PartitionMetadata",
           "PartitionState", "start_cluster", "wait_until"]
