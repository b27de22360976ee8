"""Clients that ask for records and never read the answers (issue 30, item 1), Kafkernel
against Apache Kafka in one run.

    .venv/bin/python -m bench.unread_answers [--connections 1000] [--runs 3]

Each broker in turn: a topic of one partition gets 30 MB (30,000 records of 1 KB). A
confluent-kafka consumer reads it all from offset 0, ``--runs`` times (the idle rate).
Then ``--connections`` connections with a 4 KB receive buffer each send a Fetch v4 for
8 MB from offset 0 (the first 20 pipeline 50 of them) and read nothing; the consumer
reads the topic ``--runs`` times more while they wait (the rate under attack). Reported
per broker: the consumer's MB/s idle and under attack (median), their ratio (the issue
asks at least 0.8 of idle), and the broker's RSS idle and at its peak under attack
(the issue asks under 300 MB for Kafkernel), and the broker's CPU seconds per GB the
consumer read, idle and under attack.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import socket
import statistics
import time
from dataclasses import dataclass, field

from bench.brokers import AdminBroker, kafka_and_kafkernel
from bench.clients import consume_confluent, produce_batches
from kernel.protocol.build import make, request_module
from kernel.protocol.client import encode_request

TOPIC = "bench-unread-answers"
RECORDS = 30_000
VALUE = b"v" * 1024
MB = 1_000_000
PIPELINING = 20
PIPELINED = 50


@dataclass
class Figures:
    idle_mb_s: list[float] = field(default_factory=list)
    attack_mb_s: list[float] = field(default_factory=list)
    idle_cpu_s_per_gb: list[float] = field(default_factory=list)
    attack_cpu_s_per_gb: list[float] = field(default_factory=list)
    idle_rss_mb: float = 0.0
    peak_rss_mb: float = 0.0


def fetch_frame(correlation_id: int) -> bytes:
    m = request_module(1, 4)
    return encode_request(make(
        m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
        max_bytes=8 << 20, isolation_level=0, topics=(make(
            m.FetchTopic, topic=TOPIC, partitions=(make(
                m.FetchPartition, partition=0, fetch_offset=0,
                partition_max_bytes=8 << 20),)),)), correlation_id, "bench-unread")


def attacker(bootstrap: str, fetches: int) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect((host, int(port)))
    sock.sendall(b"".join(fetch_frame(c) for c in range(fetches)))
    return sock


def rss_mb(broker: AdminBroker) -> float:
    s = broker.sample()
    return s.rss_kb * 1024 / MB if s is not None else float("nan")


def consume_once(broker: AdminBroker, into_rate: list[float], into_cpu: list[float]) -> None:
    before = broker.sample()
    result = consume_confluent(broker.bootstrap, TOPIC, 1, RECORDS, {}, 120.0)
    after = broker.sample()
    if result.error or result.timed_out:
        raise RuntimeError(f"{broker.name}: consume failed: {result.error or 'timed out'}")
    into_rate.append(result.bytes / MB / result.seconds)
    if before is not None and after is not None:
        into_cpu.append((after.cpu_s - before.cpu_s) / (result.bytes / 1e9))


def measure(broker: AdminBroker, connections: int, runs: int) -> Figures:
    figures = Figures()
    broker.create_topics([TOPIC], 1)
    produced = produce_batches(broker.bootstrap, TOPIC, VALUE, RECORDS, 1, 500, 120.0)
    if produced.error:
        raise RuntimeError(f"produce failed on {broker.name}: {produced.error}")
    consume_once(broker, [], [])  # warm: page cache, JIT
    time.sleep(1.0)
    figures.idle_rss_mb = figures.peak_rss_mb = rss_mb(broker)
    for _ in range(runs):
        consume_once(broker, figures.idle_mb_s, figures.idle_cpu_s_per_gb)
    attackers: list[socket.socket] = []
    try:
        for i in range(connections):
            attackers.append(attacker(broker.bootstrap, PIPELINED if i < PIPELINING else 1))
            if i % 50 == 49:
                figures.peak_rss_mb = max(figures.peak_rss_mb, rss_mb(broker))
        time.sleep(2.0)
        figures.peak_rss_mb = max(figures.peak_rss_mb, rss_mb(broker))
        for _ in range(runs):
            consume_once(broker, figures.attack_mb_s, figures.attack_cpu_s_per_gb)
            figures.peak_rss_mb = max(figures.peak_rss_mb, rss_mb(broker))
    finally:
        for sock in attackers:
            sock.close()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--brokers", default="kafka,kafkernel")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    results: dict[str, Figures] = {}
    for broker in kafka_and_kafkernel(args.brokers, 1):
        with contextlib.ExitStack() as stack:
            stack.enter_context(broker)
            results[broker.name] = measure(broker, args.connections, args.runs)
            f = results[broker.name]
            print(f"{broker.name}: idle {f.idle_mb_s}, under attack {f.attack_mb_s} MB/s; "
                  f"RSS idle {f.idle_rss_mb:.0f} MB, peak {f.peak_rss_mb:.0f} MB", flush=True)
    load_after = os.getloadavg()
    print(f"{args.connections} connections never reading 8 MB fetch answers; 30 MB read "
          f"by one confluent-kafka consumer, median of {args.runs}; {os.cpu_count()} cores, "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print("| broker | consume idle, MB/s | under attack, MB/s | attack / idle | "
          "RSS idle, MB | RSS peak, MB | CPU s/GB idle | CPU s/GB attack |")
    print("|---|---|---|---|---|---|---|---|")
    for name, f in results.items():
        idle, attack = statistics.median(f.idle_mb_s), statistics.median(f.attack_mb_s)
        cpu_idle = statistics.median(f.idle_cpu_s_per_gb) if f.idle_cpu_s_per_gb else 0.0
        cpu_attack = (statistics.median(f.attack_cpu_s_per_gb) if f.attack_cpu_s_per_gb
                      else 0.0)
        print(f"| {name} | {idle:.1f} | {attack:.1f} | {attack / idle:.2f} | "
              f"{f.idle_rss_mb:.0f} | {f.peak_rss_mb:.0f} | {cpu_idle:.2f} | "
              f"{cpu_attack:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
