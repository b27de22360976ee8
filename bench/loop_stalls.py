"""How long one big, legal request holds the event loop (issue 30, item 4).

    .venv/bin/python -m bench.loop_stalls [--entries 100000] [--repeat 3] [--only metadata]
    .venv/bin/python -m bench.loop_stalls --bootstrap 127.0.0.1:9092   # a running broker
    .venv/bin/python -m bench.loop_stalls --baseline ../main   # that checkout's, then this

A Kafkernel broker is started (unless ``--bootstrap`` names one). A prober connection
sends ApiVersions every 10 ms from a thread of its own and keeps each answer's wait. On
another connection each kind of big request is sent ``--repeat`` times, one at a time:

- metadata: Metadata v12 naming ``--entries`` topics (that do not exist, no creation);
- delete_topics: DeleteTopics v6 naming ``--entries`` topics that do not exist;
- describe_configs: DescribeConfigs v4 of ``--entries`` topic resources;
- offset_fetch: OffsetFetch v8 of one group, one topic with ``--entries`` partitions.

Printed per kind: the request's frame size, its round trip, and the worst and p99
ApiVersions wait among the probes sent while it was in flight. A wait near the round
trip means the request held the loop for all of it; the issue asks about 100 ms at most.
Frames are encoded before the clock starts, so the client's own encoding is not counted.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel.protocol.build import make, request_module
from kernel.protocol.client import encode_request

PROBE_EVERY_S = 0.01
GROUP = "bench-loop-stalls"


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def recv_frame(sock: socket.socket) -> bytes:
    return _recv_exactly(sock, int.from_bytes(_recv_exactly(sock, 4), "big", signed=True))


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=120)


class Prober:
    """ApiVersions every 10 ms on a connection of its own: (sent at, wait) per probe."""

    def __init__(self, bootstrap: str) -> None:
        self._sock = connect(bootstrap)
        self._stop = threading.Event()
        self.probes: list[tuple[float, float]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._frame = encode_request(make(request_module(18, 0).ApiVersionsRequest), 1,
                                     "bench-probe")

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            self._sock.sendall(self._frame)
            recv_frame(self._sock)
            self.probes.append((sent, time.monotonic() - sent))
            time.sleep(PROBE_EVERY_S)

    def waits_between(self, start: float, end: float) -> list[float]:
        return [w for sent, w in self.probes if start <= sent + w and sent <= end]

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self._sock.close()


def _names(n: int) -> list[str]:
    return [f"loop-stall-{i:06d}" for i in range(n)]


def metadata(n: int) -> Any:
    m = request_module(3, 12)
    return make(m.MetadataRequest, topics=tuple(
        make(m.MetadataRequestTopic, topic_id=None, name=name) for name in _names(n)),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def delete_topics(n: int) -> Any:
    import datetime
    m = request_module(20, 6)
    return make(m.DeleteTopicsRequest, topics=tuple(
        make(m.DeleteTopicState, name=name, topic_id=None) for name in _names(n)),
        timeout=datetime.timedelta(seconds=30))


def describe_configs(n: int) -> Any:
    m = request_module(32, 4)
    return make(m.DescribeConfigsRequest, resources=tuple(
        make(m.DescribeConfigsResource, resource_type=2, resource_name=name,
             configuration_keys=None) for name in _names(n)),
        include_synonyms=False, include_documentation=False)


def offset_fetch(n: int) -> Any:
    m = request_module(9, 8)
    return make(m.OffsetFetchRequest, require_stable=False, groups=(make(
        m.OffsetFetchRequestGroup, group_id=GROUP, topics=(make(
            m.OffsetFetchRequestTopics, name="loop-stall-topic",
            partition_indexes=tuple(range(n))),)),))


KINDS: dict[str, Callable[[int], Any]] = {
    "metadata": metadata, "delete_topics": delete_topics,
    "describe_configs": describe_configs, "offset_fetch": offset_fetch,
}


def wait_for_coordinator(bootstrap: str, timeout_s: float = 60.0) -> None:
    """FindCoordinator until the group's coordinator is hosted (it creates
    __consumer_offsets on first use)."""
    m = request_module(10, 4)
    body = make(m.FindCoordinatorRequest, key_type=0, coordinator_keys=(GROUP,))
    deadline = time.monotonic() + timeout_s
    with connect(bootstrap) as sock:
        while time.monotonic() < deadline:
            sock.sendall(encode_request(body, 1, "bench-loop-stalls"))
            frame = recv_frame(sock)
            from kernel.protocol.client import decode_response
            _, answer = decode_response(frame, 10, 4)
            if all(c.error_code == 0 for c in answer.coordinators):
                return
            time.sleep(0.2)
    raise RuntimeError("no coordinator for the bench group")


@dataclass
class Row:
    kind: str
    frame_bytes: int
    round_trips: list[float]
    worst: list[float]
    p99: list[float]


def measure(bootstrap: str, kinds: list[str], entries: int, repeat: int) -> list[Row]:
    rows = []
    wait_for_coordinator(bootstrap)
    with Prober(bootstrap) as prober, connect(bootstrap) as sock:
        time.sleep(0.3)
        for kind in kinds:
            body = KINDS[kind](entries)
            frame = encode_request(body, 7, "bench-loop-stalls")
            row = Row(kind, len(frame), [], [], [])
            for _ in range(repeat):
                start = time.monotonic()
                sock.sendall(frame)
                recv_frame(sock)
                end = time.monotonic()
                time.sleep(0.2)  # a probe in flight at the end comes back
                waits = sorted(prober.waits_between(start, end))
                row.round_trips.append(end - start)
                row.worst.append(waits[-1] if waits else float("nan"))
                row.p99.append(waits[int(len(waits) * 0.99)] if waits else float("nan"))
            rows.append(row)
    return rows


def print_rows(rows: list[Row], entries: int) -> None:
    print(f"{entries:,} entries per request; ms, median of the runs (worst run in [])")
    print(f"{'request':<18}{'frame KB':>10}{'round trip':>14}{'worst ApiVersions':>22}"
          f"{'p99':>10}")
    for r in rows:
        print(f"{r.kind:<18}{r.frame_bytes / 1000:>10,.0f}"
              f"{statistics.median(r.round_trips) * 1000:>14,.0f}"
              f"{statistics.median(r.worst) * 1000:>12,.0f} [{max(r.worst) * 1000:>6,.0f}]"
              f"{statistics.median(r.p99) * 1000:>10,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", action="append", choices=sorted(KINDS))
    parser.add_argument("--bootstrap", help="a running broker, instead of starting one")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="measure that checkout's kafkernel too, first")
    args = parser.parse_args()
    kinds = args.only or list(KINDS)
    if args.bootstrap:
        print_rows(measure(args.bootstrap, kinds, args.entries, args.repeat), args.entries)
        return
    from bench.brokers import KafkernelBroker
    for checkout in ([args.baseline] if args.baseline else []) + [None]:
        with KafkernelBroker(1, [], False, checkout=checkout) as broker:
            print(f"{broker.name} (pid {broker.pid})")
            print_rows(measure(broker.bootstrap, kinds, args.entries, args.repeat),
                       args.entries)


if __name__ == "__main__":
    main()
