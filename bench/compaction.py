"""Log compaction, Kafkernel against Apache Kafka in one run (issue 18's benchmark): the
cleaner's throughput, and produce latency while it cleans next to the same producer's
latency while nothing is cleaned.

    .venv/bin/python -m bench.compaction [--records N] [--keys N] [--size B] [--runs N]

Each broker in turn, each run (both brokers up throughout, the first of a run
alternating), with ``log.cleaner.backoff.ms=100`` on both (Kafka's default 15 s would
time its idle wait, not its cleaner):

1. A topic of one partition, ``cleanup.policy=delete`` and ``segment.bytes`` 16 MiB,
   receives ``records`` records of ``size`` bytes over ``keys`` keys (each key updated
   records/keys times), as the same batches of 1,000 records on both brokers (raw
   Produce, ``bench.clients.produce_batches``). A last record after ``segment.ms`` has
   passed rolls the log, so the active segment, which is never cleaned, holds only it.
2. A paced producer (confluent-kafka, acks=all, linger.ms=0, ``--rate`` records of
   1 KB per second to another topic) runs from here to the end, in its own process;
   each record's latency is from ``produce()`` to its delivery report.
3. After ``--idle`` seconds the topic's ``cleanup.policy`` is altered to ``compact``
   (IncrementalAlterConfigs). The partition's size (DescribeLogDirs) is polled every
   20 ms until it has not changed for ``--settle`` seconds: the clean is over at the
   first sample of the final size.

Cleaner MB/s is the size before less the active segment's, over the time from the
alteration to that sample: the broker noticing the change (up to one backoff), the
key map over the whole log, and every segment recopied. Latency is reported for the
records sent in the idle window and in the cleaning window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest

from bench.brokers import AdminBroker, kafka_and_kafkernel
from bench.clients import produce_batches
from kernel.protocol.client import BrokerConnection

TOPIC = "bench-compaction"
LATENCY_TOPIC = "bench-compaction-latency"
SEGMENT_BYTES = 16 * 1024 * 1024
ROLL_MS = 1000
POLL_S = 0.02
TIMEOUT_S = 900.0
CLEANER_BACKOFF = "log.cleaner.backoff.ms=100"


def partition_size(connection: BrokerConnection, runner: asyncio.Runner) -> int:
    """The bytes of the topic's partition 0 in the broker's log dirs."""
    response = runner.run(connection.request(DescribeLogDirsRequest(topics=(
        DescribableLogDirTopic(topic=TOPIC, partitions=(0,)),))))
    return sum(p.partition_size for result in response.results for t in result.topics
               for p in t.partitions if t.name == TOPIC and p.partition_index == 0)


def alter_topic(admin: AdminClient, configs: dict[str, str]) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


# ----------------------------------------------------------------- the paced producer

def paced_producer(conn: Connection, bootstrap: str, rate: float) -> None:
    """In a child process: send 1 KB records at ``rate`` per second until told to stop,
    then send back (send time, latency) pairs in CLOCK_MONOTONIC nanoseconds."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": False})
    samples: list[tuple[int, int]] = []
    value = b"x" * 1024

    def report(sent_ns: int) -> Any:
        def delivered(err: Any, _msg: Any) -> None:
            if err is None:
                samples.append((sent_ns, time.monotonic_ns() - sent_ns))
        return delivered

    conn.send("ready")
    start, sent = time.monotonic(), 0
    while not conn.poll():
        due = int((time.monotonic() - start) * rate) + 1
        while sent < due:
            producer.produce(LATENCY_TOPIC, value, on_delivery=report(time.monotonic_ns()))
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, min(0.001, start + sent / rate - time.monotonic())))
    producer.flush(30)
    conn.send(samples)


@dataclass
class Latency:
    samples: list[tuple[int, int]] = field(default_factory=list)

    def window(self, begin_ns: int, end_ns: int) -> dict[str, float]:
        got = sorted(lat for sent, lat in self.samples if begin_ns <= sent < end_ns)
        if not got:
            return {"records": 0}
        return {"records": len(got), "p50_ms": got[len(got) // 2] / 1e6,
                "p99_ms": got[min(len(got) - 1, len(got) * 99 // 100)] / 1e6,
                "max_ms": got[-1] / 1e6}


# ----------------------------------------------------------------------- one run

@dataclass
class Run:
    size_before: int = 0
    size_after: int = 0
    active_bytes: int = 0
    clean_s: float = 0.0
    idle: dict[str, float] = field(default_factory=dict)
    cleaning: dict[str, float] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        return (self.size_before - self.active_bytes) / self.clean_s / 1e6


def prepare(broker: AdminBroker, args: argparse.Namespace, connection: BrokerConnection,
            runner: asyncio.Runner) -> tuple[AdminClient, int]:
    """The topic re-created and filled; returns the active segment's size (the roll
    record's batch)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 4})
    with contextlib.suppress(Exception):
        admin.delete_topics([TOPIC], operation_timeout=30)[TOPIC].result(30)
        time.sleep(1.0)
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={
        "cleanup.policy": "delete", "segment.bytes": str(SEGMENT_BYTES),
        "min.cleanable.dirty.ratio": "0.01"})])[TOPIC].result(30)
    produced = produce_batches(broker.bootstrap, TOPIC, b"v" * args.size, args.records, 1,
                               1000, TIMEOUT_S, keys=args.keys)
    if produced.error or produced.records != args.records:
        raise RuntimeError(f"produce failed on {broker.name}: {produced.error}")
    # the roll: segment.ms past the active segment's first batch, then one more record
    alter_topic(admin, {"segment.ms": str(ROLL_MS)})
    time.sleep(ROLL_MS / 1000 + 0.2)
    before_roll = partition_size(connection, runner)
    # key-0: outside the key map (the active segment), it supersedes nothing cleaned
    rolled = produce_batches(broker.bootstrap, TOPIC, b"r", 1, 1, 1, 60.0, keys=1)
    if rolled.error:
        raise RuntimeError(f"roll failed on {broker.name}: {rolled.error}")
    alter_topic(admin, {"segment.ms": str(7 * 24 * 3600 * 1000)})
    return admin, partition_size(connection, runner) - before_roll


def measure_once(broker: AdminBroker, args: argparse.Namespace) -> Run:
    host, port = broker.bootstrap.rsplit(":", 1)
    connection = BrokerConnection(host, int(port), client_id="bench-compaction",
                                  timeout_s=30.0)
    run = Run()
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=paced_producer, args=(theirs, broker.bootstrap, args.rate), daemon=True)
    with asyncio.Runner() as runner:
        try:
            admin, run.active_bytes = prepare(broker, args, connection, runner)
            run.size_before = partition_size(connection, runner)
            child.start()
            if not ours.poll(60) or ours.recv() != "ready":
                raise RuntimeError("the paced producer did not start")
            time.sleep(1.0)  # its connections and first Metadata
            idle_begin = time.monotonic_ns()
            time.sleep(args.idle)
            altered = time.monotonic_ns()
            alter_topic(admin, {"cleanup.policy": "compact"})
            trace = [(altered, run.size_before)]
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                size = partition_size(connection, runner)
                now = time.monotonic_ns()
                if size != trace[-1][1]:
                    trace.append((now, size))
                elif size < run.size_before and now - trace[-1][0] > args.settle * 1e9:
                    break
                time.sleep(POLL_S)
            else:
                raise RuntimeError(f"{broker.name} did not finish cleaning within "
                                   f"{TIMEOUT_S:.0f} s")
            done, run.size_after = trace[-1]
            run.clean_s = (done - altered) / 1e9
            ours.send("stop")
            latency = Latency(ours.recv() if ours.poll(60) else [])
            run.idle = latency.window(idle_begin, altered)
            run.cleaning = latency.window(altered, done)
        finally:
            connection.close()
            if child.is_alive():
                child.terminate()
            child.join(10)
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=2,
                        help="an even number: each broker goes first as often")
    parser.add_argument("--rate", type=float, default=500.0,
                        help="the latency producer's records per second")
    parser.add_argument("--idle", type=float, default=5.0,
                        help="seconds of latency measured before the clean")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds the size must stay unchanged to end the clean")
    parser.add_argument("--brokers", default="kafka,kafkernel")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    brokers = kafka_and_kafkernel(args.brokers, 1, [CLEANER_BACKOFF])
    runs: dict[str, list[Run]] = {b.name: [] for b in brokers}
    with contextlib.ExitStack() as stack:
        for broker in brokers:
            stack.enter_context(broker)
            broker.create_topics([LATENCY_TOPIC], 1)
        for i in range(args.runs):
            for broker in brokers if i % 2 == 0 else brokers[::-1]:
                run = measure_once(broker, args)
                runs[broker.name].append(run)
                print(f"run {i + 1} {broker.name}: {run.size_before / 1e6:.1f} MB -> "
                      f"{run.size_after / 1e6:.2f} MB in {run.clean_s:.2f} s "
                      f"({run.mb_per_s:.1f} MB/s); produce p99 idle "
                      f"{run.idle.get('p99_ms', 0):.1f} ms, cleaning "
                      f"{run.cleaning.get('p99_ms', 0):.1f} ms "
                      f"({run.cleaning.get('records', 0)} records)", file=sys.stderr)
    load_after = os.getloadavg()
    print(f"{args.records:,} records x {args.size} B over {args.keys:,} keys, one "
          f"partition, segment.bytes {SEGMENT_BYTES // 2**20} MiB; latency producer "
          f"{args.rate:.0f} x 1 KB/s acks=all; median of {args.runs}; this machine "
          f"{os.cpu_count()} cores, load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after")
    print("| figure | Kafka | Kafkernel | Kafkernel / Kafka |")
    print("|---|---|---|---|")
    rows = [("cleaner MB/s", lambda r: r.mb_per_s),
            ("clean seconds", lambda r: r.clean_s),
            ("size after, MB", lambda r: r.size_after / 1e6),
            ("produce p50 idle, ms", lambda r: r.idle.get("p50_ms", 0.0)),
            ("produce p99 idle, ms", lambda r: r.idle.get("p99_ms", 0.0)),
            ("produce p50 cleaning, ms", lambda r: r.cleaning.get("p50_ms", 0.0)),
            ("produce p99 cleaning, ms", lambda r: r.cleaning.get("p99_ms", 0.0)),
            ("produce max cleaning, ms", lambda r: r.cleaning.get("max_ms", 0.0))]
    for label, figure in rows:
        values = [statistics.median(figure(r) for r in runs[name]) if runs.get(name)
                  else 0.0 for name in ("kafka", "kafkernel")]
        ratio = f"{values[1] / values[0]:.2f}" if values[0] else "-"
        print(f"| {label} | {values[0]:,.2f} | {values[1]:,.2f} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
