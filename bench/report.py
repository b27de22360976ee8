"""The results of one run: a table for people, the same figures as JSON for tools."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.clients import Measurement, RunResult
from bench.latency import LatencyResult
from bench.procfs import ProcSample
from bench.settings import ClientSettings, Scale, Workload

BROKERS = ("mock", "kafka", "baseline", "kafkernel")
# Every figure of Kafkernel is shown over each of these that ran. "baseline" is
# Kafkernel from another checkout (--baseline), to show what a change moved.
REFERENCES = ("kafka", "mock", "baseline")


@dataclass
class BrokerRun:
    """Everything measured on one broker."""

    name: str
    info: dict[str, Any] = field(default_factory=dict)
    topic_creation: str | None = None
    error: str | None = None
    results: dict[str, Measurement] = field(default_factory=dict)
    latency: dict[int, LatencyResult] = field(default_factory=dict)
    milestones: list[tuple[str, ProcSample]] = field(default_factory=list)
    # VmHWM when the broker had started; VmHWM is then reset, so that ``final`` holds
    # the peak of the workloads alone.
    startup_peak_kb: int | None = None
    final: ProcSample | None = None
    exit_code: int | None = None
    log_tail: str | None = None
    # Exec of the broker's command to its first Metadata answer (None for the mock).
    startup_s: float | None = None

    def milestone(self, label: str, sample: ProcSample | None) -> None:
        if sample is not None:
            self.milestones.append((label, sample))

    @property
    def peak_rss_mb(self) -> float | None:
        """Peak RSS while the workloads ran (since start if the reset was refused)."""
        return self.final.hwm_kb / 1024 if self.final is not None else None

    @property
    def startup_peak_mb(self) -> float | None:
        return self.startup_peak_kb / 1024 if self.startup_peak_kb is not None else None

    @property
    def peak_reached_by(self) -> str | None:
        """The first milestone at which the high-water mark already had its final value."""
        if self.final is None:
            return None
        labels = [label for label, _ in self.milestones]
        after = labels.index("peak reset") + 1 if "peak reset" in labels else 0
        return next((label for label, x in self.milestones[after:]
                     if x.hwm_kb >= self.final.hwm_kb), "end of run")


@dataclass
class Report:
    meta: dict[str, Any]
    scale: Scale
    settings: ClientSettings
    partitions: int
    workloads: list[Workload]
    runs: dict[str, BrokerRun]
    latency_planned: bool


def ratio(kafkernel: float | None, reference: float | None) -> float | None:
    if kafkernel is None or reference is None or reference == 0:
        return None
    return kafkernel / reference


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _brokers(report: Report) -> list[str]:
    return [n for n in BROKERS if n in report.runs]


def _references(report: Report) -> list[str]:
    return [r for r in REFERENCES if r in report.runs]


def _result(report: Report, broker: str, w: Workload) -> Measurement | None:
    run = report.runs.get(broker)
    return run.results.get(w.key) if run is not None else None


def _cpu_pct(m: Measurement | None) -> str:
    r = m.median if m is not None else None
    if r is None or r.broker_cpu_s is None or r.seconds <= 0:
        return "n/a"
    return f"{100 * r.broker_cpu_s / r.seconds:.0f}%"


def _cpu_s_per_gb(m: Measurement | None) -> float | None:
    """The broker's CPU seconds per GB (10^9 bytes) of record values, median over runs."""
    if m is None:
        return None
    values = [r.broker_cpu_s / (r.bytes / 1e9) for r in m.runs
              if r.broker_cpu_s is not None and r.bytes > 0]
    return statistics.median(values) if values else None


def _cpu_per_gb_rows(report: Report, brokers: list[str], refs: list[str]) -> list[str]:
    out = ["", "Broker CPU seconds per GB of record values (median of the runs; /kafka, "
               "/baseline: kafkernel's over that broker's, lower is better)"]
    head = (f"{'workload':<40}" + "".join(f" | {n:>10}" for n in brokers)
            + "".join(f" | {'/' + r:>9}" for r in refs))
    out += [head, "-" * len(head)]
    for w in report.workloads:
        values = {name: _cpu_s_per_gb(_result(report, name, w)) for name in brokers}
        out.append(f"{w.label:<40}" + "".join(f" | {_num(values[n], 2):>10}" for n in brokers)
                   + "".join(f" | {_ratio(ratio(values.get('kafkernel'), values[r])):>9}"
                             for r in refs))
    return out


def header_lines(meta: dict[str, Any]) -> list[str]:
    git = meta["git"]
    state = []
    if git.get("tracked_changes"):
        state.append("tracked files modified")
    if git.get("bench_changes"):
        state.append("bench/ has uncommitted changes")
    host = meta["host"]
    return [
        f"command:    {meta['command']}",
        f"git commit: {git.get('commit', 'unknown')}"
        + (f" ({'; '.join(state)})" if state else " (clean)"),
        f"started:    {meta['started_at']}",
        f"host:       {host['cpus']} CPUs, {host['platform']}, Python {host['python']}, "
        f"load average {' '.join(map(str, host['load_average_at_start']))}",
        f"clients:    confluent-kafka {host['confluent_kafka']} (librdkafka "
        f"{host['librdkafka']}), {host['kcat']}, Kafka {host.get('kafka')} perf tools "
        f"({host.get('java')})",
    ]


def _latency(report: Report, name: str, wait: int) -> LatencyResult | None:
    run = report.runs.get(name)
    return run.latency.get(wait) if run is not None else None


def _latency_rows(report: Report) -> list[str]:
    s = report.settings
    out = ["", f"End-to-end latency at {s.latency_target_bytes_per_s / 1e6:g} MB/s "
               f"(confluent-kafka producer and consumer, {s.latency_record_size} B records, "
               f"acks={s.latency_acks}, linger.ms={s.latency_linger_ms}, "
               f"{report.scale.latency_seconds:g} s after "
               f"{report.scale.latency_warmup_seconds:g} s warm-up; ratios: kafkernel "
               "over each other broker (/kafka, /mock, /baseline), lower is better)"]
    brokers, refs = _brokers(report), _references(report)
    cols = [*brokers, *(f"/{r}" for r in refs)]
    for wait in s.latency_fetch_wait_ms:
        out += ["", f"fetch.wait.max.ms={wait}",
                f"{'':<18}" + "".join(f" {c:>10}" for c in cols)]
        for p in ("p50", "p99", "p99.9", "max"):
            vals = {n: (x.ms(p) if (x := _latency(report, n, wait)) else None)
                    for n in brokers}
            out.append(f"{p + ' ms':<18}" + "".join(f" {_num(vals[n], 2):>10}" for n in brokers)
                       + "".join(f" {_ratio(ratio(vals.get('kafkernel'), vals[r])):>10}"
                                 for r in refs))
        for label, attr, digits in (("achieved MB/s", "achieved_mb_per_s", 1),
                                    ("records measured", "measured", 0)):
            vals = {n: (getattr(x, attr) if (x := _latency(report, n, wait)) else None)
                    for n in brokers}
            out.append(f"{label:<18}" + "".join(f" {_num(vals[n], digits):>10}"
                                                 for n in brokers))
    out.append("The mock answers a fetch that finds nothing only when fetch.wait.max.ms is "
               "over, even if records arrive meanwhile;")
    out.append("at 500 ms its latency is that wait. 1 ms compares the brokers; 500 ms "
               "shows whether a broker answers a waiting fetch on append.")
    for n in brokers:
        for w in s.latency_fetch_wait_ms:
            x = _latency(report, n, w)
            if x is not None and x.error:
                out.append(f"! latency fetch.wait.max.ms={w} on {n}: {x.error}")
    return out


def render(report: Report) -> str:
    """The figures; the caller prints ``header_lines`` (command, commit) above them."""
    s = report.settings
    host = report.meta["host"]
    out: list[str] = [
        f"kafkernel:  {host.get('kafkernel', 'unknown')}",
        f"finished:   {report.meta.get('finished_at')} after "
        f"{report.meta.get('wall_seconds', 0) / 60:.1f} min, load average "
        f"{' '.join(map(str, host.get('load_average_at_end', [])))}",
        f"settings:   producer linger.ms={s.linger_ms} batch.size={s.batch_size} "
        f"batch.num.messages={s.batch_num_messages} compression={s.compression_type} "
        "(unless the workload names a codec) "
        f"idempotence={str(s.enable_idempotence).lower()}; consumer fetch.wait.max.ms="
        f"{s.fetch_wait_max_ms} fetch.min.bytes={s.fetch_min_bytes} "
        f"max.partition.fetch.bytes={s.max_partition_fetch_bytes} "
        f"queued.min.messages={s.queued_min_messages} "
        f"fetch.queue.backoff.ms={s.fetch_queue_backoff_ms} (confluent-kafka only)",
    ]
    warmup = host.get("memory_warmup")
    if warmup:
        out.append(f"memory:     touched {warmup['bytes'] / 2**30:g} GiB once before the "
                   f"brokers ran, in {warmup['seconds']} s (see bench/README.md)")
    brokers, refs = _brokers(report), _references(report)
    for name in brokers:
        run = report.runs[name]
        if run.topic_creation:
            out.append(f"{name} topics: {run.topic_creation}")
        if run.error:
            out.append(f"{name} ERROR: {run.error}")

    runs = report.scale.repeats
    out += ["", "Throughput, records/s (MB = 10^6 bytes of record values; /kafka, /mock, "
                "/baseline = kafkernel's records/s over that broker's, higher is better; "
                "cpu = broker CPU time / wall time; "
                + (f"median of {runs} runs)" if runs > 1 else "one run)")]
    head = (f"{'workload':<40} {'records':>9} {'parts':>5}"
            + "".join(f" | {n + ' rec/s':>15} {'MB/s':>7} {'cpu':>5}" for n in brokers)
            + "".join(f" | {'/' + r:>9}" for r in refs))
    out += [head, "-" * len(head)]
    notes: list[str] = []
    for w in report.workloads:
        cells: list[str] = []
        values: dict[str, float | None] = {}
        for name in brokers:
            r = _result(report, name, w)
            rate = r.records_per_s if r is not None else None
            values[name] = rate
            mark = ""
            if r is not None and r.problem:
                mark = "!"
                notes.append(f"! {w.label} on {name}: {r.problem}")
            elif r is not None and not r.check.startswith("ok"):
                mark = "?"
                notes.append(f"? {w.label} on {name}: {r.check}")
            cells.append(f"{_num(rate) + mark:>15} "
                         f"{_num(r.mb_per_s if r else None, 1):>7} {_cpu_pct(r):>5}")
        out.append(f"{w.label:<40} {w.records:>9,} {w.partitions:>5} | " + " | ".join(cells)
                   + "".join(f" | {_ratio(ratio(values.get('kafkernel'), values[r])):>9}"
                             for r in refs))
    if any(w.client == "java" for w in report.workloads):
        out.append("java: Kafka's ProducerPerformance (its steady-state line, after a "
                   "warm-up of the first tenth of the records) and")
        out.append("ConsumerPerformance (its fetch.nMsg.sec: group join excluded); the JVM's "
                   "start-up is in neither; cpu is over the tool's whole run.")
    if any(w.kind == "consume" for w in report.workloads):
        out.append("consume: one read of the whole log from offset 0; its records are spread "
                   "over enough partitions that the mock,")
        out.append("which keeps at most 5 MiB per partition, still holds them all.")
    out += notes
    out += _cpu_per_gb_rows(report, brokers, refs)

    if report.latency_planned:
        out += _latency_rows(report)

    out += ["", "Start-up (exec of the broker's command to its first Metadata answer) and "
                "peak RSS (VmHWM of the broker process; reset once the broker",
            "has started, so the workload peak excludes start-up); /kafka, /mock, /baseline: "
            "kafkernel over that broker, lower is better",
            f"{'':<10} {'start-up':>10} {'workloads':>12} {'start-up':>12} "
            f"{'at the end':>12}   workload peak reached by"]
    kk = report.runs.get("kafkernel")
    for name in brokers:
        run = report.runs[name]
        line = (f"{name:<10} {_num(run.startup_s, 2) + ' s':>10} "
                f"{_num(run.peak_rss_mb, 1):>9} MB")
        if run.final is not None:
            line += (f" {_num(run.startup_peak_mb, 1):>9} MB {run.final.rss_kb / 1024:>9.1f}"
                     f" MB   {run.peak_reached_by}")
        out.append(line)
    for ref in refs:
        other = report.runs[ref]
        if kk is None:
            continue
        start_ratio = ratio(kk.startup_s, other.startup_s)
        out.append(f"{'/' + ref:<10} {_ratio(start_ratio):>10} "
                   f"{_ratio(ratio(kk.peak_rss_mb, other.peak_rss_mb)):>12}")
    kafka = report.runs.get("kafka")
    heap = kafka.info.get("heap") if kafka is not None else None
    out += ["mock: the mock_cluster process (Python + librdkafka + the records it holds, "
            "<= 5 MiB per partition; no start-up figure);",
            f"kafka: the JVM ({heap or 'heap n/a'}; kafka-storage format, a separate JVM, "
            "before it and not counted);",
            "kafkernel: the kafkernel serve process (through bench/orphan_guard.py's exec); "
            "page cache counted for neither."]
    return "\n".join(out)


def _run_json(r: RunResult) -> dict[str, Any]:
    d = asdict(r)
    d["records_per_s"] = r.records_per_s
    d["mb_per_s"] = r.mb_per_s
    d["ok"] = r.ok
    return d


def _measurement_json(m: Measurement | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "records_per_s": m.records_per_s, "mb_per_s": m.mb_per_s, "ok": m.ok,
        "problem": m.problem, "check": m.check, "spread_records_per_s": m.spread,
        "runs": [_run_json(r) for r in m.runs],
    }


def to_json(report: Report) -> dict[str, Any]:
    throughput = []
    for w in report.workloads:
        row: dict[str, Any] = {
            "workload": w.key, "label": w.label, "kind": w.kind, "client": w.client,
            "record_size": w.record_size, "acks": w.acks, "compression": w.compression,
            "records": w.records,
            "partitions": w.partitions, "topic": w.topic,
        }
        rates: dict[str, float | None] = {}
        for name in BROKERS:
            r = _result(report, name, w)
            row[name] = _measurement_json(r)
            rates[name] = r.records_per_s if r is not None else None
        for ref in REFERENCES:
            row[f"ratio_kafkernel_over_{ref}"] = ratio(rates["kafkernel"], rates[ref])
        throughput.append(row)

    brokers: dict[str, Any] = {}
    latency: dict[str, Any] = {}
    for name, run in report.runs.items():
        brokers[name] = {
            **run.info, "topic_creation": run.topic_creation, "error": run.error,
            "peak_rss_mb": run.peak_rss_mb, "peak_reached_by": run.peak_reached_by,
            "startup_peak_rss_mb": run.startup_peak_mb, "startup_seconds": run.startup_s,
            "final_sample": asdict(run.final) if run.final else None,
            "milestones": [{"after": label, **asdict(x)} for label, x in run.milestones],
            "exit_code": run.exit_code, "log_tail": run.log_tail,
        }
        latency[name] = {f"fetch.wait.max.ms={w}": asdict(x) for w, x in run.latency.items()}
    for ref in REFERENCES:
        ratios: dict[str, dict[str, float | None]] = {}
        for wait in report.settings.latency_fetch_wait_ms:
            k, o = _latency(report, "kafkernel", wait), _latency(report, ref, wait)
            ratios[f"fetch.wait.max.ms={wait}"] = {
                p: ratio(k.ms(p) if k else None, o.ms(p) if o else None)
                for p in ("p50", "p99", "p99.9", "max")
            }
        latency[f"ratio_kafkernel_over_{ref}"] = ratios
    rss: dict[str, float | None] = {
        n: (report.runs[n].peak_rss_mb if n in report.runs else None) for n in BROKERS}
    startup: dict[str, float | None] = {
        n: (report.runs[n].startup_s if n in report.runs else None) for n in BROKERS}
    for ref in REFERENCES:
        rss[f"ratio_kafkernel_over_{ref}"] = ratio(rss["kafkernel"], rss[ref])
        startup[f"ratio_kafkernel_over_{ref}"] = ratio(startup["kafkernel"], startup[ref])
    return {
        **report.meta,
        "partitions": report.partitions,
        "scale": asdict(report.scale),
        "client_settings": asdict(report.settings),
        "brokers": brokers,
        "throughput": throughput,
        "latency": latency,
        "peak_rss_mb": rss,
        "startup_seconds": startup,
    }
