"""End-to-end latency at a steady rate: a paced producer, a consumer in another process.

Each record starts with the producer's CLOCK_MONOTONIC time (shared by all processes on
one Linux host) and a sequence number; the consumer takes ``now - sent`` when a fetch
hands it the record. The producer runs in this process and the consumer in a spawned
one, so neither waits for the other's interpreter lock. The first records (warm-up:
connections, first fetches) are not counted.
"""

from __future__ import annotations

import multiprocessing
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

HEADER = struct.Struct("<qq")  # send time (ns, CLOCK_MONOTONIC), sequence number
DRAIN_S = 10.0


@dataclass
class LatencyResult:
    target_mb_per_s: float
    record_size: int
    seconds: float
    fetch_wait_ms: int
    sent: int = 0
    achieved_mb_per_s: float | None = None
    received: int = 0
    measured: int = 0
    percentiles_ms: dict[str, float] = field(default_factory=dict)
    mean_ms: float | None = None
    error: str | None = None

    def ms(self, name: str) -> float | None:
        return self.percentiles_ms.get(name)


def _percentiles(samples_us: list[int]) -> tuple[dict[str, float], float | None]:
    if not samples_us:
        return {}, None
    ordered = sorted(samples_us)
    n = len(ordered)

    def at(q: float) -> float:
        return ordered[min(n - 1, int(q * n))] / 1000.0

    found = {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "p99.9": at(0.999),
             "max": ordered[-1] / 1000.0}
    return found, sum(ordered) / n / 1000.0


def consume_latency(conn: Connection, bootstrap: str, topic: str, partitions: int,
                    properties: Mapping[str, str], total: int, warmup: int,
                    bound_s: float) -> None:
    """Consumer process: reports ready, then latencies of records with seq >= warmup."""
    deadline = time.monotonic() + bound_s
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkernel-bench-lat",
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         **properties})
    samples: list[int] = []
    seen = 0
    error: str | None = None
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        ready_at = time.monotonic() + 1.0  # connect, first fetches in flight
        while time.monotonic() < ready_at:
            consumer.consume(100, 0.1)
        conn.send("ready")
        # poll() hands over each record as soon as it is fetched; a consume() batch
        # would wait to fill up and add that wait to every record in it.
        poll = consumer.poll
        while seen < total and time.monotonic() < deadline:
            m = poll(0.1)
            if m is None:
                continue
            now = time.monotonic_ns()
            if m.error() is not None:
                raise KafkaException(m.error())
            sent_ns, seq = HEADER.unpack_from(m.value() or b"\0" * HEADER.size)
            seen += 1
            if seq >= warmup:
                samples.append((now - sent_ns) // 1000)
    except KafkaException as e:
        error = str(e)
    finally:
        consumer.close()
    percentiles, mean = _percentiles(samples)
    conn.send({"received": seen, "measured": len(samples), "percentiles_ms": percentiles,
               "mean_ms": mean, "error": error})
    conn.close()


def run_latency(bootstrap: str, topic: str, partitions: int,
                producer_properties: Mapping[str, str],
                consumer_properties: Mapping[str, str], record_size: int,
                target_bytes_per_s: int, seconds: float, warmup_s: float,
                fetch_wait_ms: int) -> LatencyResult:
    rate = target_bytes_per_s / record_size
    total = int(rate * (warmup_s + seconds))
    warmup = int(rate * warmup_s)
    result = LatencyResult(target_bytes_per_s / 1e6, record_size, seconds, fetch_wait_ms)
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    bound_s = 30.0 + warmup_s + seconds + DRAIN_S
    child = ctx.Process(target=consume_latency, name="bench-latency-consumer",
                        args=(theirs, bootstrap, topic, partitions, dict(consumer_properties),
                              total, warmup, bound_s), daemon=True)
    child.start()
    theirs.close()
    try:
        if not ours.poll(30.0) or ours.recv() != "ready":
            result.error = "latency consumer did not get ready within 30 s"
            return result
        _paced_produce(bootstrap, topic, producer_properties, record_size, rate, total,
                       result)
        if ours.poll(seconds + warmup_s + DRAIN_S + 10.0):
            report: dict[str, Any] = ours.recv()
            result.received = report["received"]
            result.measured = report["measured"]
            result.percentiles_ms = report["percentiles_ms"]
            result.mean_ms = report["mean_ms"]
            if report["error"]:
                result.error = report["error"]
            elif result.received < result.sent:
                result.error = f"received {result.received} of {result.sent} records"
        else:
            result.error = "latency consumer did not report"
        return result
    except EOFError:
        result.error = "latency consumer exited without a report"
        return result
    finally:
        child.join(5.0)
        if child.is_alive():
            child.terminate()
            child.join(5.0)
        ours.close()


def _paced_produce(bootstrap: str, topic: str, properties: Mapping[str, str],
                   record_size: int, rate: float, total: int, result: LatencyResult) -> None:
    """Send ``total`` records on a schedule of ``rate`` per second, stamped when sent."""
    producer = Producer({"bootstrap.servers": bootstrap, **properties})
    buf = bytearray(b"x" * record_size)
    start = time.monotonic()
    hard_deadline = start + 2 * total / rate + 5.0
    sent = 0
    while sent < total and time.monotonic() < hard_deadline:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        while sent < due:
            HEADER.pack_into(buf, 0, time.monotonic_ns(), sent)
            try:
                producer.produce(topic, bytes(buf))
            except BufferError:  # the broker is not keeping up: fall behind schedule
                producer.poll(0.001)
                break
            sent += 1
        producer.poll(0)
        wait = start + sent / rate - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, 0.005))
    elapsed = time.monotonic() - start
    left = producer.flush(DRAIN_S)
    result.sent = sent - left
    result.achieved_mb_per_s = sent * record_size / elapsed / 1e6 if elapsed > 0 else None
    if sent < total:
        result.error = f"producer sent {sent} of {total} records within its bound"
