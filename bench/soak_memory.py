"""Memory under hostile input: what a broker keeps for length prefixes whose bodies
never come, for thousands of connections, and whether it gives idle memory back.

    .venv/bin/python -m bench.soak_memory [--claims 8] [--connections 2000]

Starts ``kafkernel serve`` (as bench.run does) and prints the RSS of the broker process
after each step:

1. started, after one ApiVersions request;
2. ``--claims`` connections each send a 4-byte length prefix claiming 100 MB and a few
   bytes of body (Kafka's socket.request.max.bytes allows 104857600);
3. the same connections each send ``--body-mib`` MiB more of the body (bytes that did
   arrive; queued.max.request.bytes mutes them once the broker holds that much);
4. those connections closed;
5. ``--connections`` connections opened at once, each answered one ApiVersions request;
6. all of them closed, after ``--settle`` seconds.

Figures are in MiB (VmRSS of /proc/PID/status); the last lines say how far each step
moved from the start.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time

from bench.brokers import KafkernelBroker
from bench.procfs import sample

CLAIM = 100_000_000
BODY_START = b"\x00\x00\x00\x00"  # Produce v0, bytes of a header that never completes
MIB = 1024 * 1024


def rss_mib(broker: KafkernelBroker) -> float:
    s = sample(broker.pid)
    return s.rss_kb / 1024 if s is not None else float("nan")


def settled_rss(broker: KafkernelBroker, seconds: float) -> float:
    """The RSS once the broker has had ``seconds`` to act on what it was sent."""
    time.sleep(seconds)
    return rss_mib(broker)


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def api_versions(sock: socket.socket, correlation_id: int) -> None:
    """ApiVersions v0 (header v1: key, version, correlation id, null client id; no body),
    and its answer read whole."""
    payload = struct.pack(">hhih", 18, 0, correlation_id, -1)
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    recv_exactly(sock, size)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise RuntimeError("the broker closed a connection that sent ApiVersions")
        data += chunk
    return data


def send_body(sock: socket.socket, size: int) -> int:
    """Bytes of ``size`` the broker took within a second of its last read: it stops
    reading once queued.max.request.bytes of requests are held."""
    chunk = memoryview(b"\x00" * MIB)
    sock.settimeout(1.0)
    sent = 0
    try:
        while sent < size:
            sent += sock.send(chunk[:min(MIB, size - sent)])
    except TimeoutError:
        pass
    sock.settimeout(30)
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=8)
    parser.add_argument("--claim", type=int, default=CLAIM,
                        help=f"bytes each length prefix claims (default {CLAIM:,})")
    parser.add_argument("--body-mib", type=int, default=1,
                        help="MiB of body each claim then sends (default 1)")
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds to wait before each reading")
    parser.add_argument("--override", action="append", default=[],
                        help="a broker setting, key=value (repeatable)")
    args = parser.parse_args(argv)
    print("command: python -m bench.soak_memory", *(argv if argv is not None else sys.argv[1:]))
    rows: list[tuple[str, float]] = []

    def step(name: str, value: float) -> None:
        rows.append((name, value))
        print(f"{name:<52} {value:8.1f} MiB", flush=True)

    with KafkernelBroker(1, args.override, keep_data=False) as broker:
        with connect(broker.bootstrap) as sock:
            api_versions(sock, 1)
        step("started", settled_rss(broker, args.settle))

        hostile = [connect(broker.bootstrap) for _ in range(args.claims)]
        for sock in hostile:
            sock.sendall(struct.pack(">i", args.claim) + BODY_START)
        step(f"{args.claims} claims of {args.claim:,} bytes, 4 bytes of body each",
             settled_rss(broker, args.settle))
        sent = sum(send_body(sock, args.body_mib * MIB) for sock in hostile)
        step(f"{args.claims} claims, {sent / MIB:.0f} MiB of body sent in all",
             settled_rss(broker, args.settle))
        for sock in hostile:
            sock.close()
        step("claims closed", settled_rss(broker, args.settle))

        opened: list[socket.socket] = []
        for i in range(args.connections):
            sock = connect(broker.bootstrap)
            api_versions(sock, i)
            opened.append(sock)
        step(f"{args.connections} connections open", settled_rss(broker, args.settle))
        for sock in opened:
            sock.close()
        step(f"{args.connections} connections closed", settled_rss(broker, args.settle))
        with connect(broker.bootstrap) as sock:
            api_versions(sock, 2)  # the broker still serves

    start = rows[0][1]
    print(f"largest rise over the start: {max(v for _, v in rows) - start:.1f} MiB; "
          f"after the last step: {rows[-1][1] - start:+.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
