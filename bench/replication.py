"""Replication (issue 16): acks=all produce throughput into a topic replicated three
ways, and the time to a new leader after kill -9 of the leader, on three local
Kafkernel brokers (metadata_zk, tests/cluster/harness.py) against a three-node Apache
Kafka cluster (reference.kafka.start_cluster) in the same run.

    .venv/bin/python -m bench.replication [--records N] [--runs N] [--failovers N]

Throughput: confluent-kafka sends ``records`` records of ``size`` bytes with acks=all
into a new topic of one partition (replication factor 3, min.insync.replicas 2, all
three replicas in sync first), bench.run's producer settings; the median of ``runs``.

Failover: an acks=all idempotent producer writes 200 records/s into a new such topic;
the leader is killed (SIGKILL); two times from the kill: until a client's Metadata
names another leader, and until the first record handed to the producer after the
kill is acknowledged (so no dead broker's answer counts). Then the broker is started
again on its port and data, and the run waits for it to be back in the ISR and checks
that every acknowledged record is there once. Both clusters detect a dead broker by a
session of 6 s: Kafkernel's ZooKeeper session (zookeeper.session.timeout.ms) and
Kafka's broker session with its controller quorum (broker.session.timeout.ms, 9 s by
default, set to 6 s here).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench.clients import produce_confluent
from bench.settings import ClientSettings
from reference import kafka as reference_kafka
from tests.cluster import harness
from tests.cluster.load import LoadProducer, read_all, verify

SESSION_MS = 6000
TOPIC_CONFIG = {"min.insync.replicas": "2"}
FAILOVER_RATE = 200.0
WAIT_S = 60.0


class Cluster(Protocol):
    """What the benchmark does to either cluster."""

    bootstrap: str

    def kill(self, broker_id: int) -> None: ...
    def restart(self, broker_id: int) -> None: ...


@dataclass
class KafkaCluster:
    cluster: reference_kafka.ReferenceCluster
    bootstrap: str = ""

    def __post_init__(self) -> None:
        self.bootstrap = self.cluster.bootstrap

    def kill(self, broker_id: int) -> None:
        self.cluster.node(broker_id).kill()

    def restart(self, broker_id: int) -> None:
        self.cluster.restart(broker_id)


@dataclass
class KafkernelCluster:
    cluster: harness.Cluster
    bootstrap: str = ""

    def __post_init__(self) -> None:
        self.bootstrap = self.cluster.bootstrap

    def kill(self, broker_id: int) -> None:
        self.cluster.broker(broker_id).kill()

    def restart(self, broker_id: int) -> None:
        self.cluster.restart(broker_id)


@contextlib.contextmanager
def kafka(heap: str) -> Iterator[Cluster]:
    c = reference_kafka.start_cluster(
        3, heap=heap, overrides={"broker.session.timeout.ms": str(SESSION_MS)})
    try:
        yield KafkaCluster(c)
    finally:
        c.stop()


@contextlib.contextmanager
def kafkernel(heap: str) -> Iterator[Cluster]:
    del heap  # the JVM's
    c = harness.start_cluster(3, session_timeout_ms=SESSION_MS)
    try:
        yield KafkernelCluster(c)
    finally:
        c.stop()


@dataclass
class Failover:
    leader_metadata_s: float | None = None
    first_ack_s: float | None = None
    rejoined_s: float | None = None
    acked: int = 0
    lost: int = 0
    duplicates: int = 0
    error: str | None = None


@dataclass
class Figures:
    produce: list[float] = field(default_factory=list)  # records/s
    produce_errors: list[str] = field(default_factory=list)
    failovers: list[Failover] = field(default_factory=list)


def partition_view(admin: AdminClient, topic: str) -> tuple[int, tuple[int, ...],
                                                              tuple[int, ...]] | None:
    """Partition 0's (leader, replicas, ISR) in a Metadata answer."""
    try:
        md = admin.list_topics(topic, timeout=2)
    except KafkaException:  # no answer within the timeout
        return None
    t = md.topics.get(topic)
    if t is None or t.error is not None or 0 not in t.partitions:
        return None
    p = t.partitions[0]
    return p.leader, tuple(p.replicas), tuple(p.isrs)


def create_in_sync(admin: AdminClient, topic: str) -> int:
    """A topic of one partition replicated three ways; waits for its three replicas in
    sync; returns its leader."""
    admin.create_topics([NewTopic(topic, 1, 3, config=TOPIC_CONFIG)])[topic].result(30)
    view = harness.wait_until(
        lambda: (v := partition_view(admin, topic)) is not None and v[0] >= 0
        and len(v[2]) == 3 and v, f"{topic} with three replicas in sync", WAIT_S)
    return view[0]


def measure_produce(cluster: Cluster, admin: AdminClient, topic: str, records: int,
                    size: int, timeout_s: float) -> float:
    create_in_sync(admin, topic)
    properties = ClientSettings().producer_properties("all")
    result = produce_confluent(cluster.bootstrap, topic, b"x" * size, records, properties,
                               timeout_s)
    if result.error or result.timed_out or result.records != records:
        raise RuntimeError(f"{result.records} of {records} acknowledged in "
                           f"{result.seconds:.0f} s: {result.error or 'timed out'}")
    return records / result.seconds


def measure_failover(cluster: Cluster, admin: AdminClient, topic: str) -> Failover:
    out = Failover()
    leader = create_in_sync(admin, topic)
    producer = LoadProducer(cluster.bootstrap, topic, rate=FAILOVER_RATE).start()
    failing = True
    try:
        if not producer.wait_acked(100, 30):
            raise RuntimeError(f"{producer.acks.count()} of 100 acks=all records "
                               f"acknowledged in 30 s before the kill "
                               f"(failures: {dict(producer.acks.failed) or 'none'})")
        leader = partition_view(admin, topic)[0]  # type: ignore[index]
        cluster.kill(leader)
        killed = time.monotonic()
        new = harness.wait_until(
            lambda: (v := partition_view(admin, topic)) is not None
            and v[0] not in (-1, leader) and v[0], "a new leader in Metadata", WAIT_S,
            interval=0.05)
        out.leader_metadata_s = time.monotonic() - killed
        harness.wait_until(lambda: producer.first_ack_of_sent_after(killed),
                           "an acknowledgement of a record sent after the kill", WAIT_S,
                           interval=0.05)
        first = producer.first_ack_of_sent_after(killed)
        assert first is not None
        out.first_ack_s = first - killed
        print(f"  killed broker {leader}; broker {new} leads in Metadata after "
              f"{out.leader_metadata_s:.2f} s, first acknowledgement after "
              f"{out.first_ack_s:.2f} s", file=sys.stderr)
        cluster.restart(leader)
        harness.wait_until(lambda: (v := partition_view(admin, topic)) is not None
                           and leader in v[2], f"broker {leader} back in the ISR", WAIT_S)
        out.rejoined_s = time.monotonic() - killed
        failing = False
    except (RuntimeError, harness.ClusterError) as e:
        out.error = str(e)
    finally:
        with contextlib.suppress(Exception):
            producer.stop(flush_timeout=2.0 if failing else 60.0)
    if not failing:
        verdict = verify(producer.acks, read_all(cluster.bootstrap, topic, 1))
        out.acked, out.lost, out.duplicates = (verdict.acked, len(verdict.lost),
                                               len(verdict.duplicates))
    return out


def run(name: str, start: Callable[[str], contextlib.AbstractContextManager[Cluster]],
        args: argparse.Namespace) -> Figures:
    figures = Figures()
    began = time.monotonic()
    with start(args.kafka_heap) as cluster:
        print(f"[{name}] three brokers up in {time.monotonic() - began:.1f} s",
              file=sys.stderr)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for i in range(args.runs):
            try:
                rate = measure_produce(cluster, admin, f"bench-rf3-{i}", args.records,
                                       args.size, args.timeout)
            except (RuntimeError, harness.ClusterError) as e:
                figures.produce_errors.append(str(e))
                print(f"[{name}] produce run {i + 1}: {e}; no more runs", file=sys.stderr)
                break
            figures.produce.append(rate)
            print(f"[{name}] produce run {i + 1}: {rate:,.0f} records/s", file=sys.stderr)
        for i in range(args.failovers):
            result = measure_failover(cluster, admin, f"bench-failover-{i}")
            figures.failovers.append(result)
            if result.error:
                print(f"[{name}] failover {i + 1}: {result.error}; no more failovers",
                      file=sys.stderr)
                break
            print(f"[{name}] failover {i + 1}: {result}", file=sys.stderr)
    return figures


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def _max(values: list[float]) -> str:
    return f"{max(values):.2f}" if values else "-"


def report(figures: dict[str, Figures], args: argparse.Namespace) -> None:
    print(f"replication factor 3, min.insync.replicas 2, acks=all, confluent-kafka, "
          f"{args.records:,} x {args.size} B, median of {args.runs}; "
          f"{args.failovers} kill -9 failovers, session {SESSION_MS} ms")
    print("| figure | " + " | ".join(figures) + " | kafkernel/kafka |")
    print("|---|" + "---|" * (len(figures) + 1))

    def row(label: str, values: dict[str, str], ratio: str = "") -> None:
        print(f"| {label} | " + " | ".join(values[n] for n in figures) + f" | {ratio} |")

    produce = {n: (f"{statistics.median(f.produce):,.0f}" if f.produce else
                   f"failed: {f.produce_errors[0][:80]}" if f.produce_errors else "-")
               for n, f in figures.items()}
    ratio = ""
    if all(figures.get(n) and figures[n].produce for n in ("kafka", "kafkernel")):
        ours = statistics.median(figures["kafkernel"].produce)
        ratio = f"{ours / statistics.median(figures['kafka'].produce):.2f}"
    row("produce records/s", produce, ratio)
    for label, attr in (("kill -9 to new leader in Metadata, s", "leader_metadata_s"),
                        ("kill -9 to first acks=all ack, s", "first_ack_s"),
                        ("kill -9 to back in the ISR, s", "rejoined_s")):
        med = {}
        for n, f in figures.items():
            values = [getattr(x, attr) for x in f.failovers if getattr(x, attr) is not None]
            errors = [x.error for x in f.failovers if x.error]
            med[n] = (f"{_median(values)} (max {_max(values)})" if values else
                      f"failed: {errors[0][:80]}" if errors else "-")
        row(label, med)
    lost = {n: f"{sum(x.lost for x in f.failovers)} lost, "
               f"{sum(x.duplicates for x in f.failovers)} duplicated of "
               f"{sum(x.acked for x in f.failovers)}" for n, f in figures.items()}
    row("acknowledged records after the failovers", lost)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--brokers", default="kafka,kafkernel",
                        help="kafka, kafkernel or both, in this order")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds a produce run may take")
    parser.add_argument("--kafka-heap", default=reference_kafka.HEAP,
                        help="each Kafka node's -Xms and -Xmx")
    parser.add_argument("--output", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    starts = {"kafka": kafka, "kafkernel": kafkernel}
    names = [n.strip() for n in args.brokers.split(",") if n.strip()]
    unknown = set(names) - set(starts)
    if unknown:
        parser.error(f"unknown brokers {sorted(unknown)}")
    began = time.monotonic()
    figures = {name: run(name, starts[name], args) for name in names}
    print(f"command: python -m bench.replication {' '.join(argv or sys.argv[1:])}")
    report(figures, args)
    print(f"finished in {time.monotonic() - began:.0f} s")
    if args.output:
        args.output.write_text(json.dumps(
            {n: asdict(f) for n, f in figures.items()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

