"""A small request's cost, Kafkernel against Apache Kafka in one run: the ListOffsets
round trip Spark's Kafka connector makes twice per poll of 500 records (issue 17's
batch read sends about 4,000 per million records), and the broker's CPU per request.

    .venv/bin/python -m bench.list_offsets [--requests N] [--runs N]

Both brokers up throughout, each with one partition holding 10,000 records. Each run,
each broker in turn (the first alternating): one connection sends ``requests``
ListOffsets v9, one at a time, alternating the earliest and the latest offset (the
connector's pair), after 2,000 not counted. Reported per request: the round trip from
a blocking Python socket, and the broker process's CPU (user and system, /proc) over
the same requests. Medians over the runs; Kafka's JIT keeps compiling, so later runs
favour it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import struct
import time
from dataclasses import dataclass

from bench.brokers import AdminBroker, kafka_and_kafkernel
from bench.clients import produce_batches
from kernel.protocol.build import make, request_module
from kernel.protocol.client import encode_request

TOPIC = "bench-list-offsets"
EARLIEST, LATEST = -2, -1
WARM_UP_REQUESTS = 2_000
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Run:
    round_trip_us: float
    cpu_us: float


def list_offsets_frame(timestamp: int) -> bytes:
    m = request_module(2, 9)
    return encode_request(make(
        m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(make(
            m.ListOffsetsTopic, name=TOPIC, partitions=(make(
                m.ListOffsetsPartition, partition_index=0, timestamp=timestamp,
                current_leader_epoch=-1),)),)), 1, "bench-list-offsets")


def _recv(sock: socket.socket, n: int) -> bytes:
    data = sock.recv(n, socket.MSG_WAITALL)
    if len(data) < n:
        raise ConnectionError("the broker closed the connection")
    return data


def _exchange(sock: socket.socket, frames: tuple[bytes, bytes], n: int) -> None:
    for i in range(n):
        sock.sendall(frames[i & 1])
        _recv(sock, _SIZE.unpack(_recv(sock, 4))[0])


def measure_once(broker: AdminBroker, requests: int) -> Run:
    frames = (list_offsets_frame(EARLIEST), list_offsets_frame(LATEST))
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _exchange(sock, frames, WARM_UP_REQUESTS)
        before = broker.sample()
        began = time.perf_counter()
        _exchange(sock, frames, requests)
        seconds = time.perf_counter() - began
        after = broker.sample()
    assert before is not None and after is not None
    return Run(1e6 * seconds / requests, 1e6 * (after.cpu_s - before.cpu_s) / requests)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=4,
                        help="an even number: each broker goes first as often")
    parser.add_argument("--brokers", default="kafka,kafkernel")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    brokers = kafka_and_kafkernel(args.brokers, 1)
    runs: dict[str, list[Run]] = {b.name: [] for b in brokers}
    with contextlib.ExitStack() as stack:
        for broker in brokers:
            stack.enter_context(broker)
            broker.create_topics([TOPIC], 1)
            produced = produce_batches(broker.bootstrap, TOPIC, b"x" * 100, 10_000, 1,
                                       1_000, 60.0)
            if produced.error:
                raise RuntimeError(f"produce failed on {broker.name}: {produced.error}")
        for i in range(args.runs):
            for broker in brokers if i % 2 == 0 else brokers[::-1]:
                run = measure_once(broker, args.requests)
                runs[broker.name].append(run)
                print(f"run {i + 1} {broker.name}: round trip {run.round_trip_us:.1f} us, "
                      f"broker CPU {run.cpu_us:.1f} us", flush=True)
    load_after = os.getloadavg()
    print(f"{args.requests:,} ListOffsets v9 per run, median of {args.runs}; this machine "
          f"{os.cpu_count()} cores, load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after")
    print("| per request | Kafka | Kafkernel | Kafkernel / Kafka |")
    print("|---|---|---|---|")
    for label, field in (("round trip, us", "round_trip_us"), ("broker CPU, us", "cpu_us")):
        k, n = (statistics.median(getattr(r, field) for r in runs[name]) if runs.get(name)
                else None for name in ("kafka", "kafkernel"))
        ratio = f"{n / k:.2f}" if k and n else "-"
        print(f"| {label} | {k or 0:.1f} | {n or 0:.1f} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
