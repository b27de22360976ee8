"""Benchmark Kafkernel against Apache Kafka and librdkafka's mock cluster, in one run,
with real clients.

    .venv/bin/python -m bench.run [--quick] [--only KEYS] [--brokers NAMES]

Starts the mock cluster, Apache Kafka and ``kafkernel serve`` (their data in temporary
directories), runs every workload on each, taking turns run by run, then each latency
run; stops them; prints absolute figures and kafkernel/kafka and kafkernel/mock ratios,
and writes them to bench/results/latest.json. See bench/README.md for what each figure
means.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench import clients
from bench.brokers import (
    REPO_ROOT,
    Broker,
    BrokerError,
    KafkaBroker,
    KafkernelBroker,
    MockBroker,
)
from bench.latency import run_latency
from bench.profile import PySpy
from bench.report import BROKERS, BrokerRun, Report, header_lines, render, to_json
from bench.settings import (
    FULL,
    QUICK,
    RECORD_SIZES,
    ClientSettings,
    Scale,
    Workload,
    workloads,
)
from reference.fetch import kafka_version

PREFLIGHT_TOPIC = "bench-preflight"


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def command_line(argv: Sequence[str]) -> str:
    exe = Path(sys.executable)
    try:
        shown = str(exe.relative_to(Path.cwd()))
    except ValueError:
        shown = str(exe)
    return shlex.join([shown, "-m", "bench.run", *argv])


def _kcat_version() -> str:
    """``kcat 1.7.1 (librdkafka 2.0.2)`` from ``kcat -V``."""
    try:
        done = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "kcat unavailable"
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith("Version "):
            version = line.split()[1]
            lib = line.split("librdkafka ", 1)[1].split()[0] if "librdkafka " in line else "?"
            return f"kcat {version} (librdkafka {lib})"
    return "kcat (unknown version)"


def _java_version() -> str:
    """``openjdk version "17.0.15" 2025-04-15`` from ``java -version``."""
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "java unavailable"
    lines = (done.stderr + done.stdout).strip().splitlines()
    return lines[0] if lines else "java (unknown version)"


def collect_meta(argv: Sequence[str]) -> dict[str, Any]:
    import confluent_kafka

    # kafkernel runs from the same environment and uses uvloop when it is installed.
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    walk = "C" if importlib.util.find_spec("kernel.log._scan") is not None else "Python"
    try:
        kafkernel = (f"{importlib.metadata.version('kafkernel')} (event loop: {loop}; "
                     f"record walk: {walk})")
    except importlib.metadata.PackageNotFoundError:
        kafkernel = f"not installed (event loop: {loop})"
    return {
        "command": command_line(argv),
        "git": {
            "commit": _git("rev-parse", "HEAD") or "unknown",
            "tracked_changes": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "bench_changes": bool(_git("status", "--porcelain", "--", "bench")),
        },
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": {
            "cpus": os.cpu_count(),
            "load_average_at_start": _load(),
            "platform": platform.platform(terse=True),
            "python": platform.python_version(),
            "confluent_kafka": confluent_kafka.version(),
            "librdkafka": confluent_kafka.libversion()[0],
            "kcat": _kcat_version(),
            "java": _java_version(),
            "kafka": kafka_version(),
            "kafkernel": kafkernel,
        },
    }


def _load() -> list[float]:
    """1, 5 and 15 minute load averages: other work on the machine skews the figures."""
    return [round(x, 2) for x in os.getloadavg()]


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def preflight(bootstrap: str, partitions: int,
              settings: ClientSettings) -> tuple[str | None, str | None]:
    """One record through the broker, quickly: (produce problem, consume problem).

    A broker without Produce would otherwise make each run wait for message.timeout.ms.
    """
    producer = Producer({"bootstrap.servers": bootstrap,
                         **settings.producer_properties("all"),
                         "message.timeout.ms": "10000"})
    outcome: list[str] = []
    producer.produce(PREFLIGHT_TOPIC, b"preflight",
                     on_delivery=lambda err, _m: outcome.append(err.name() if err else "ok"))
    producer.flush(15.0)
    if outcome != ["ok"]:
        return f"Produce does not work: {outcome[0] if outcome else 'no delivery report'}", \
            "not tried"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkernel-bench",
                         "enable.auto.commit": False, **settings.consumer_properties()})
    try:
        consumer.assign([TopicPartition(PREFLIGHT_TOPIC, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            err = m.error()
            if err is not None:
                return None, f"Fetch does not work: {err.name()}"
            return None, None
        return None, "Fetch does not work: the record did not come back within 15 s"
    finally:
        consumer.close()


def _measured(broker: Broker, run: Callable[[], clients.RunResult]) -> clients.RunResult:
    before = broker.sample()
    result = run()
    after = broker.sample()
    if before is not None and after is not None:
        result.broker_cpu_s = after.cpu_s - before.cpu_s
        result.broker_rss_kb, result.broker_hwm_kb = after.rss_kb, after.hwm_kb
    return result


def run_workload(broker: Broker, w: Workload, settings: ClientSettings, scale: Scale,
                 inputs: dict[int, Path]) -> clients.RunResult:
    b = broker.bootstrap
    value = clients.payload(w.record_size)
    timeout = scale.run_timeout_s
    if w.kind == "produce":
        assert w.acks is not None
        props = settings.producer_properties(w.acks, compression=w.compression,
                                             idempotent=w.idempotent)
        if w.transaction_records:
            props.update({"transactional.id": f"{w.topic}-{broker.name}",
                          "transaction.records": str(w.transaction_records)})
        try:
            before: int | None = clients.log_size(b, w.topic, w.partitions)[1]
        except (KafkaException, RuntimeError):
            before = None
        if w.client == "confluent":
            result = _measured(broker, lambda: clients.produce_confluent(
                b, w.topic, value, w.records, props, timeout,
                spread_over=w.partitions if w.spread else 0))
        elif w.client == "java":
            java_props = settings.java_producer_properties(w.acks, idempotent=w.idempotent)
            result = _measured(broker, lambda: clients.produce_java(
                b, w.topic, w.record_size, w.records, java_props, timeout))
        else:
            result = _measured(broker, lambda: clients.produce_kcat(
                b, w.topic, inputs[w.record_size], w.records, w.record_size, props,
                timeout))
        if result.ok and before is not None:
            # A transaction's commit marker takes an offset of the log too.
            markers = (clients.transactions_of(result.records, w.transaction_records)
                       if w.transaction_records else 0)
            result.check = clients.check_appended(b, w.topic, w.partitions, before,
                                                  result.records + markers)
            if result.check.startswith("MISMATCH"):
                result.error = result.check
        elif result.ok:
            result.check = "could not read watermarks before the run"
        return result
    if w.client == "java":
        return _measured(broker, lambda: clients.consume_java(
            b, w.topic, w.records, w.record_size, settings.java_consumer_properties(),
            timeout))
    props = settings.consumer_properties(client=w.client)
    if w.client == "confluent":
        return _measured(broker, lambda: clients.consume_confluent(
            b, w.topic, w.partitions, w.records, props, timeout))
    return _measured(broker, lambda: clients.consume_kcat(
        b, w.topic, w.records, w.record_size, props, timeout))


def measure_once(broker: Broker, w: Workload, settings: ClientSettings, scale: Scale,
                 inputs: dict[int, Path], tag: str,
                 profiler: PySpy | None = None) -> clients.RunResult:
    """One timed run of a workload; a produce topic is emptied again afterwards."""
    # Write back what earlier runs left dirty now: the kernel's flusher writes pages
    # 30 s old, and doing that inside a timed run took a core from it.
    os.sync()
    try:
        if (profiler is not None and isinstance(broker, KafkernelBroker)
                and profiler.wanted(w.key)):
            with profiler.record(broker.pid, f"{broker.name}-{w.key}"):
                result = run_workload(broker, w, settings, scale, inputs)
        else:
            result = run_workload(broker, w, settings, scale, inputs)
    except (KafkaException, OSError, RuntimeError) as e:
        result = clients.RunResult(error=f"{type(e).__name__}: {e}")
    progress(f"[{broker.name}] {_progress_line(w, result)}{tag}")
    if result.ok and w.kind == "produce":
        broker.recycle_topic(w.topic, w.partitions)
        clients.await_topics(broker.bootstrap, [w.topic], w.partitions)
    return result


# This machine is a VM whose memory the host maps on the guest's first touch of a page:
# writing to never-touched memory (page cache included) runs at about 450 MB/s, to
# memory touched before at about 5 GB/s. Touching this much once, before either broker
# runs, makes the figures independent of what the machine did before the run.
WARM_MEMORY_BYTES = 2 * 1024**3


def warm_memory(nbytes: int) -> dict[str, float]:
    started = time.perf_counter()
    block = b"\x01" * nbytes  # writes every page
    del block
    return {"bytes": nbytes, "seconds": round(time.perf_counter() - started, 2)}


def fill_consume_logs(broker: Broker, plan: list[Workload], settings: ClientSettings,
                      scale: Scale) -> dict[str, str]:
    """Write each consume topic once; returns a problem per topic, if any."""
    problems: dict[str, str] = {}
    logs = {(w.topic, w.record_size, w.records, w.partitions)
            for w in plan if w.kind == "consume"}
    for topic, size, records, partitions in sorted(logs):
        progress(f"[{broker.name}] filling {topic}: {records:,} records in {partitions} "
                 "partitions (not timed)")
        filled = clients.fill(broker.bootstrap, topic, clients.payload(size), records,
                              partitions, settings.producer_properties("all"),
                              scale.run_timeout_s)
        if not filled.ok:
            problems[topic] = f"filling {topic} failed: {filled.error or 'timed out'}"
            continue
        try:
            low, high = clients.log_size(broker.bootstrap, topic, partitions)
        except (KafkaException, RuntimeError) as e:
            problems[topic] = f"{topic}: could not read watermarks: {e}"
            continue
        if (low, high) != (0, records):
            problems[topic] = (f"{topic} holds offsets {low}..{high} summed over partitions, "
                              f"expected 0..{records} (log trimmed?)")
    return problems


def latency_topic(fetch_wait_ms: int) -> str:
    return f"bench-latency-wait{fetch_wait_ms}ms"


def _create_all_topics(broker: Broker, plan: list[Workload], partitions: int,
                       settings: ClientSettings, with_latency: bool) -> str:
    by_count: dict[int, set[str]] = {partitions: {PREFLIGHT_TOPIC}}
    if with_latency:
        by_count[partitions] |= {latency_topic(w) for w in settings.latency_fetch_wait_ms}
    for w in plan:
        by_count.setdefault(w.partitions, set()).add(w.topic)
    how: set[str] = set()
    for count, names in sorted(by_count.items()):
        how.add(broker.create_topics(sorted(names), count))
        clients.await_topics(broker.bootstrap, sorted(names), count)
    return "; ".join(sorted(how))


def _run_latency(broker: Broker, run: BrokerRun, partitions: int, settings: ClientSettings,
                 scale: Scale) -> None:
    for wait in settings.latency_fetch_wait_ms:
        progress(f"[{broker.name}] latency at {settings.latency_target_bytes_per_s / 1e6:g} "
                 f"MB/s, fetch.wait.max.ms={wait}, for "
                 f"{scale.latency_seconds + scale.latency_warmup_seconds:g} s ...")
        lat = run_latency(
            broker.bootstrap, latency_topic(wait), partitions,
            settings.producer_properties(settings.latency_acks, settings.latency_linger_ms),
            settings.consumer_properties(wait), settings.latency_record_size,
            settings.latency_target_bytes_per_s, scale.latency_seconds,
            scale.latency_warmup_seconds, fetch_wait_ms=wait)
        run.latency[wait] = lat
        progress(f"[{broker.name}] latency p50 {lat.ms('p50')} ms, p99 {lat.ms('p99')} ms"
                 + (f" ({lat.error})" if lat.error else ""))


@dataclasses.dataclass
class Contender:
    """A started broker and what has been measured on it."""

    broker: Broker
    run: BrokerRun
    # Workloads that cannot run on this broker, with the reason.
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    # Set by the preflight; a broker that failed later on is not usable either.
    usable: bool = False
    consume_works: bool = False


def prepare(broker: Broker, plan: list[Workload], partitions: int, settings: ClientSettings,
            scale: Scale, with_latency: bool) -> Contender:
    """Start-up, topics, preflight and the untimed consume logs of one started broker."""
    c = Contender(broker, BrokerRun(broker.name))
    run = c.run
    unsupported = {w.key: broker.unsupported_clients[w.client] for w in plan
                   if w.client in broker.unsupported_clients}
    try:
        run.info = broker.describe()
        took = (f", exec to first Metadata answer {broker.startup_s:.2f} s"
                if broker.startup_s is not None else "")
        progress(f"[{broker.name}] started at {broker.bootstrap} (pid {broker.pid}{took})")
        started = broker.sample()
        run.milestone("started", started)
        if started is not None and broker.reset_peak():
            run.startup_peak_kb = started.hwm_kb
            run.milestone("peak reset", broker.sample())
        run.topic_creation = _create_all_topics(broker, plan, partitions, settings,
                                                with_latency)
        run.milestone("topics created", broker.sample())
        produce_problem, consume_problem = preflight(broker.bootstrap, partitions, settings)
        if produce_problem:
            run.error = f"preflight: {produce_problem}; workloads skipped"
            progress(f"[{broker.name}] {run.error}")
            return c
        c.usable = True
        if consume_problem:
            run.error = f"preflight: {consume_problem}; consume and latency skipped"
            progress(f"[{broker.name}] {run.error}")
            c.skipped = {w.key: consume_problem for w in plan if w.kind == "consume"}
            return c
        c.consume_works = True
        c.skipped = dict(unsupported)
        runnable = [w for w in plan if w.key not in unsupported]
        if any(w.kind == "consume" for w in runnable):
            fill_problems = fill_consume_logs(broker, runnable, settings, scale)
            c.skipped |= {w.key: fill_problems[w.topic] for w in runnable
                          if w.kind == "consume" and w.topic in fill_problems}
            run.milestone("consume logs written", broker.sample())
    except (BrokerError, KafkaException, RuntimeError, OSError) as e:
        _failed(c, e)
    return c


def _failed(c: Contender, e: BaseException) -> None:
    c.usable = False
    c.run.error = f"{type(e).__name__}: {e}"
    progress(f"[{c.broker.name}] ERROR {c.run.error}")


def measure_interleaved(contenders: list[Contender], w: Workload, settings: ClientSettings,
                        scale: Scale, inputs: dict[int, Path],
                        profiler: PySpy | None = None) -> None:
    """``scale.repeats`` runs of one workload on every broker, taking turns run by run
    and swapping who goes first, so that a noisy moment of the host falls on both
    brokers rather than on one. A broker stops at its first failed run."""
    found = {c.broker.name: clients.Measurement() for c in contenders}
    for c in contenders:
        if w.key in c.skipped:
            found[c.broker.name].runs.append(clients.RunResult(error=c.skipped[w.key]))
    for n in range(scale.repeats):
        order = contenders if n % 2 == 0 else contenders[::-1]
        tag = f" [{n + 1}/{scale.repeats}]" if scale.repeats > 1 else ""
        for c in order:
            runs = found[c.broker.name].runs
            if not c.usable or (runs and not runs[-1].ok):
                continue
            try:
                runs.append(measure_once(c.broker, w, settings, scale, inputs, tag,
                                         profiler))
            except (BrokerError, KafkaException, RuntimeError, OSError) as e:
                runs.append(clients.RunResult(error=f"{type(e).__name__}: {e}"))
    for c in contenders:
        if c.usable:
            c.run.results[w.key] = found[c.broker.name]
            c.run.milestone(w.label, c.broker.sample())


def run_brokers(brokers: list[Broker], plan: list[Workload], partitions: int,
                settings: ClientSettings, scale: Scale, inputs: dict[int, Path],
                with_latency: bool, profiler: PySpy | None = None) -> dict[str, BrokerRun]:
    """Starts every broker, runs the workloads on all of them in turns, then the
    latency runs one broker at a time (each paces its own load), and stops them."""
    contenders: list[Contender] = []
    with contextlib.ExitStack() as stack:
        for broker in brokers:
            try:
                stack.enter_context(broker)
            except (BrokerError, OSError) as e:
                c = Contender(broker, BrokerRun(broker.name))
                _failed(c, e)
                contenders.append(c)
                continue
            contenders.append(prepare(broker, plan, partitions, settings, scale,
                                      with_latency))
        for w in plan:
            measure_interleaved(contenders, w, settings, scale, inputs, profiler)
        for c in contenders:
            if not c.usable:
                continue
            try:
                if with_latency and c.consume_works:
                    _run_latency(c.broker, c.run, partitions, settings, scale)
                    c.run.milestone("latency runs done", c.broker.sample())
                c.run.final = c.broker.sample()
            except (BrokerError, KafkaException, RuntimeError, OSError) as e:
                _failed(c, e)
    for c in contenders:
        c.run.exit_code = c.broker.returncode
        c.run.startup_s = c.broker.startup_s
        if (isinstance(c.broker, KafkernelBroker | KafkaBroker)
                and (c.run.error or c.broker.returncode)):
            c.run.log_tail = c.broker.log_tail(20)
    return {c.broker.name: c.run for c in contenders}


def _progress_line(w: Workload, r: clients.RunResult) -> str:
    if not r.ok:
        return f"{w.label}: {'TIMED OUT' if r.timed_out else 'ERROR'} {r.error or ''}"
    timed = f"{r.records:,} records in {r.seconds:.2f} s"
    if r.rate_records is not None and r.rate_seconds:
        timed = (f"{r.records:,} records, tool run {r.seconds:.2f} s; its rate: "
                 f"{r.rate_records:,} records in {r.rate_seconds:.2f} s")
    return (f"{w.label}: {timed} = {r.records_per_s or 0:,.0f} rec/s, "
            f"{r.mb_per_s or 0:.1f} MB/s ({r.check})")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a tenth of the records and a 3 s latency run (harness check)")
    parser.add_argument("--repeat", type=int, default=None, metavar="N",
                        help="runs per throughput workload, median reported "
                             "(default 5, 1 with --quick)")
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions per topic (default 1)")
    parser.add_argument("--brokers", default="mock,kafka,kafkernel",
                        help=f"which brokers, comma-separated, of {', '.join(BROKERS)} "
                             "(default mock,kafka,kafkernel; --baseline adds baseline)")
    parser.add_argument("--only", default="",
                        help="comma-separated substrings of workload keys to run, e.g. "
                             "produce-kcat,latency, or zstd,lz4 for the compressed "
                             "produce workloads (default: all)")
    parser.add_argument("--output", type=Path,
                        default=Path(__file__).resolve().parent / "results" / "latest.json",
                        help="JSON result file (default bench/results/latest.json)")
    parser.add_argument("--kafkernel-override", action="append", default=[],
                        metavar="KEY=VALUE", help="passed to kafkernel serve as --override")
    parser.add_argument("--kafka-override", action="append", default=[],
                        metavar="KEY=VALUE", help="a server.properties setting for Kafka")
    parser.add_argument("--kafka-heap", default=None, metavar="SIZE",
                        help="Kafka's -Xms and -Xmx (default: reference/kafka.py's HEAP)")
    parser.add_argument("--baseline", type=Path, default=None, metavar="CHECKOUT",
                        help="also run the kafkernel of another checkout (its .venv), "
                             "as broker 'baseline': before/after a change in one run")
    parser.add_argument("--py-spy", default="", metavar="SUBSTRINGS",
                        help="record Kafkernel with py-spy during each run of these "
                             "workloads (comma-separated substrings of their keys); raw "
                             "files in OUTPUT's name + -py-spy/")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep kafkernel's and Kafka's temporary data directories")
    args = parser.parse_args(argv)
    args.broker_list = [b.strip() for b in args.brokers.split(",") if b.strip()]
    unknown = set(args.broker_list) - set(BROKERS)
    if unknown or not args.broker_list:
        parser.error(f"--brokers: choose from {', '.join(BROKERS)}")
    if args.baseline is not None:
        if not (args.baseline / ".venv" / "bin" / "kafkernel").exists():
            parser.error(f"--baseline: {args.baseline}/.venv/bin/kafkernel does not exist "
                         "(python3 -m venv .venv && .venv/bin/pip install -e '.[fast]' there)")
        if "baseline" not in args.broker_list:  # its turn just before kafkernel's
            at = (args.broker_list.index("kafkernel") if "kafkernel" in args.broker_list
                  else len(args.broker_list))
            args.broker_list.insert(at, "baseline")
    elif "baseline" in args.broker_list:
        parser.error("--brokers baseline needs --baseline CHECKOUT")
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.partitions < 1:
        parser.error("--partitions must be at least 1")
    if any("=" not in item for item in args.kafka_override):
        parser.error("--kafka-override takes KEY=VALUE")
    return args


def _raise_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_on_sigterm)  # so every finally runs
    began = time.monotonic()
    meta = collect_meta(argv)
    print("\n".join(header_lines(meta)), flush=True)

    scale = QUICK if args.quick else FULL
    if args.repeat is not None:
        scale = dataclasses.replace(scale, repeats=args.repeat)
    settings = ClientSettings()
    plan = workloads(scale, args.partitions)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    if only:
        plan = [w for w in plan if any(s in w.key for s in only)]
    with_latency = not only or any(s in "latency" for s in only)
    # The mock outlives every run of both brokers; this bounds it should the bench die.
    bound_s = len(args.broker_list) * (len(plan) * scale.repeats + 4) * scale.run_timeout_s
    meta["host"]["memory_warmup"] = warm_memory(WARM_MEMORY_BYTES)
    progress(f"touched {WARM_MEMORY_BYTES / 2**30:g} GiB of memory once in "
             f"{meta['host']['memory_warmup']['seconds']} s (see WARM_MEMORY_BYTES)")
    with tempfile.TemporaryDirectory(prefix="kafkernel-bench-input-") as tmp:
        inputs = {
            size: clients.write_kcat_file(Path(tmp) / f"records-{size}.txt", size,
                                          scale.records(size))
            for size in RECORD_SIZES
            if any(w.client == "kcat" and w.record_size == size for w in plan)
        }
        brokers: list[Broker] = []
        for name in args.broker_list:
            if name == "mock":
                brokers.append(MockBroker(bound_s))
            elif name == "kafka":
                brokers.append(KafkaBroker(args.partitions, args.kafka_override,
                                           args.keep_data, args.kafka_heap))
            elif name == "baseline":
                brokers.append(KafkernelBroker(args.partitions, args.kafkernel_override,
                                               args.keep_data, args.baseline))
            else:
                brokers.append(KafkernelBroker(args.partitions, args.kafkernel_override,
                                               args.keep_data))
        profiler = None
        if args.py_spy:
            profiler = PySpy(args.py_spy.split(","),
                             args.output.with_name(args.output.stem + "-py-spy"))
        runs = run_brokers(brokers, plan, args.partitions, settings, scale, inputs,
                           with_latency, profiler)
        if profiler is not None:
            progress(f"py-spy: {len(profiler.files)} profiles in {profiler.directory}")
        for broker in brokers:
            if args.keep_data and isinstance(broker, KafkernelBroker | KafkaBroker):
                progress(f"[{broker.name}] data kept in {broker.workdir}")
    meta["finished_at"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    meta["wall_seconds"] = round(time.monotonic() - began, 1)
    meta["host"]["load_average_at_end"] = _load()
    report = Report(meta, scale, settings, args.partitions, plan, runs, with_latency)
    print()
    print(render(report))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(to_json(report), indent=2) + "\n")
    print(f"\nwritten: {args.output}")
    return 0 if all(r.error is None for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
