"""A fault soak of three Kafkernel brokers (issue 16): under an acks=all idempotent load,
each cycle kills (kill -9) or pauses (SIGSTOP) a random broker, waits for the
partitions it led to get new leaders, then restarts or resumes it and waits until
every replica is back in the ISR. At the end it reads the topic back and prints the
acknowledged records, the lost ones (the target is 0), the duplicates and the time
to a new leader per cycle (median, max). Not part of the test suite.

    .venv/bin/python -m bench.fault_soak [--cycles 50] [--seed N]

A pause lasts a random time between 0.5 and 2 ZooKeeper session timeouts, so some
outlive the session (the broker loses its registration and leadership) and some do
not (it must go on as if nothing happened). Each cycle takes roughly 15 to 25 s (the
session timeout, the restart, the catch-up), so 50 cycles take about 15 to 20 minutes.
The exit code is 1 when a record was lost or a cycle did not recover.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass

from tests.cluster import harness
from tests.cluster.load import LoadProducer, read_all, verify

BROKERS = (1, 2, 3)
TOPIC = "soak"
RECOVER_S = 90.0
NEW_LEADER_S = 60.0


@dataclass
class Cycle:
    number: int
    broker: int
    fault: str  # "kill" or "pause <seconds>"
    led: tuple[int, ...]  # partitions it led at the fault
    new_leader_s: float | None = None  # until each of them had another leader (znode)
    recovered_s: float | None = None  # until every replica was in every ISR again
    problem: str | None = None


def in_sync(cluster: harness.Cluster, partitions: int) -> bool:
    for p in range(partitions):
        s = cluster.partition_state(TOPIC, p)
        if s is None or s.leader == harness.NO_LEADER or set(s.isr) != set(BROKERS):
            return False
    return True


def leaders(cluster: harness.Cluster, partitions: int) -> dict[int, int]:
    return {p: cluster.leader(TOPIC, p) for p in range(partitions)}


def wait_new_leaders(cluster: harness.Cluster, broker: int, led: tuple[int, ...],
                     began: float) -> float | None:
    """Seconds from ``began`` until none of ``led`` is led by ``broker`` or nobody."""
    if not led:
        return None

    def moved() -> bool:
        now = leaders(cluster, max(led) + 1)
        return all(now[p] not in (broker, harness.NO_LEADER) for p in led)

    harness.wait_until(moved, f"new leaders of partitions {list(led)}", NEW_LEADER_S,
                       interval=0.05)
    return time.monotonic() - began


def run_cycle(cluster: harness.Cluster, number: int, rng: random.Random,
              partitions: int, session_s: float) -> Cycle:
    broker = rng.choice(BROKERS)
    led = tuple(p for p, b in leaders(cluster, partitions).items() if b == broker)
    b = cluster.broker(broker)
    if rng.random() < 0.5:
        cycle = Cycle(number, broker, "kill", led)
        b.kill()
        began = time.monotonic()
        try:
            cycle.new_leader_s = wait_new_leaders(cluster, broker, led, began)
        except harness.ClusterError as e:
            cycle.problem = str(e)
        cluster.restart(broker)
    else:
        pause_s = rng.uniform(0.5, 2.0) * session_s
        cycle = Cycle(number, broker, f"pause {pause_s:.1f} s", led)
        b.pause()
        began = time.monotonic()
        try:
            if pause_s > session_s + 2:
                cycle.new_leader_s = wait_new_leaders(cluster, broker, led, began)
            time.sleep(max(0.0, began + pause_s - time.monotonic()))
        except harness.ClusterError as e:
            cycle.problem = str(e)
        finally:
            b.resume()
        cluster.wait_registered([broker], timeout=RECOVER_S)
    try:
        harness.wait_until(lambda: in_sync(cluster, partitions),
                           "every replica back in every ISR", RECOVER_S)
        cycle.recovered_s = time.monotonic() - began
    except harness.ClusterError as e:
        cycle.problem = f"{cycle.problem + '; ' if cycle.problem else ''}{e}"
    return cycle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200.0, help="records/s produced")
    parser.add_argument("--session-ms", type=int, default=harness.SESSION_TIMEOUT_MS)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    session_s = args.session_ms / 1000
    print(f"command: python -m bench.fault_soak --cycles {args.cycles} --seed {seed} "
          f"--partitions {args.partitions} --rate {args.rate:g} --session-ms "
          f"{args.session_ms}", flush=True)
    began = time.monotonic()
    cycles: list[Cycle] = []
    with harness.start_cluster(3, session_timeout_ms=args.session_ms) as cluster:
        cluster.create_topic(TOPIC, args.partitions, 3, {"min.insync.replicas": "2"})
        harness.wait_until(lambda: in_sync(cluster, args.partitions),
                           "every replica in sync", RECOVER_S)
        producer = LoadProducer(cluster.bootstrap, TOPIC, partitions=args.partitions,
                                rate=args.rate).start()
        try:
            if not producer.wait_acked(100, 30):
                print(f"no load: {producer.acks.count()} of 100 acks=all records "
                      f"acknowledged in 30 s (delivery failures: "
                      f"{dict(producer.acks.failed) or 'none'}); the brokers do not "
                      "replicate", file=sys.stderr)
                producer.stop(flush_timeout=2)
                return 2
            for n in range(1, args.cycles + 1):
                try:
                    cycle = run_cycle(cluster, n, rng, args.partitions, session_s)
                except harness.ClusterError as e:  # a broker that did not come back
                    cycles.append(Cycle(n, 0, "?", (), problem=str(e)))
                    print(f"cycle {n}: {e}; the soak stops", file=sys.stderr)
                    break
                cycles.append(cycle)
                print(f"cycle {n}: broker {cycle.broker} {cycle.fault}, led {list(cycle.led)}"
                      f", new leader {_s(cycle.new_leader_s)}, in sync again "
                      f"{_s(cycle.recovered_s)}; {producer.acks.count()} acknowledged"
                      + (f"; PROBLEM {cycle.problem}" if cycle.problem else ""),
                      file=sys.stderr, flush=True)
        finally:
            acks = producer.stop(flush_timeout=120)
        verdict = verify(acks, read_all(cluster.bootstrap, TOPIC, args.partitions, 120))
    times = [c.new_leader_s for c in cycles if c.new_leader_s is not None]
    problems = [c for c in cycles if c.problem]
    print(f"{len(cycles)} cycles ({sum(c.fault == 'kill' for c in cycles)} kill -9, "
          f"{sum(c.fault != 'kill' for c in cycles)} SIGSTOP) in "
          f"{time.monotonic() - began:.0f} s")
    print(f"acknowledged {verdict.acked}, lost {len(verdict.lost)}, duplicates "
          f"{len(verdict.duplicates)}, consumed {verdict.consumed}, in the log without an "
          f"acknowledgement {verdict.unacked_present}, never acknowledged "
          f"{producer.unflushed}, delivery failures {dict(acks.failed) or 'none'}")
    if times:
        print(f"time to a new leader: median {statistics.median(times):.2f} s, max "
              f"{max(times):.2f} s over {len(times)} cycles whose broker led a partition")
    for c in problems:
        print(f"cycle {c.number} did not recover: {c.problem}")
    if verdict.lost:
        print(f"lost, first: {verdict.lost[:10]}")
    return 1 if verdict.lost or problems else 0


def _s(value: float | None) -> str:
    return f"{value:.2f} s" if value is not None else "-"


if __name__ == "__main__":
    raise SystemExit(main())
