"""Throughput runs with three clients: confluent-kafka from Python, kcat (C), and Kafka's
own Java perf tools (ProducerPerformance, ConsumerPerformance).

Every run is bounded by a record count and a deadline and returns a ``RunResult``; a
run that fails or overruns says so in the result instead of raising, so one broker's
missing feature does not stop the other figures.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import string
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kernel.protocol.build import make, request_module
from kernel.protocol.client import BrokerConnection, BrokerConnectionError
from kernel.protocol.records import SimpleRecord, build_batch
from reference import tools
from reference.kafka import JVM_OPTIONS as KAFKA_JVM_OPTIONS

# reference.tools starts a short-lived tool on C1 with the serial collector; a perf
# tool runs as kafka-*-perf-test.sh starts it: both JIT tiers, Kafka's G1 options and
# KAFKA_HEAP_OPTS=-Xmx512M.
PERF_JVM_OPTIONS = ("-XX:TieredStopAtLevel=4", "-XX:-UseSerialGC", *KAFKA_JVM_OPTIONS,
                    "-Xmx512m")


@dataclass
class RunResult:
    records: int = 0
    bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    timed_out: bool = False
    check: str = "not checked"
    broker_cpu_s: float | None = None
    broker_rss_kb: int | None = None
    broker_hwm_kb: int | None = None
    # Set when the rate is not records / seconds (the wall time of the whole run) but a
    # phase of it: the Java perf tools' own figures, without their JVM's start-up.
    rate_records: int | None = None
    rate_seconds: float | None = None

    @property
    def records_per_s(self) -> float | None:
        if self.rate_records is not None and self.rate_seconds:
            return self.rate_records / self.rate_seconds
        return self.records / self.seconds if self.seconds > 0 and self.records else None

    @property
    def mb_per_s(self) -> float | None:
        rate = self.records_per_s
        if rate is None or not self.records or not self.bytes:
            return None
        return rate * (self.bytes / self.records) / 1e6

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


@dataclass
class Measurement:
    """Repeated runs of one workload; its figures are those of the median run."""

    runs: list[RunResult] = field(default_factory=list)

    @property
    def failed(self) -> RunResult | None:
        return next((r for r in self.runs if not r.ok), None)

    @property
    def ok(self) -> bool:
        return bool(self.runs) and self.failed is None

    @property
    def median(self) -> RunResult | None:
        if not self.ok:
            return None
        ordered = sorted(self.runs, key=lambda r: r.records_per_s or 0.0)
        return ordered[(len(ordered) - 1) // 2]

    @property
    def records_per_s(self) -> float | None:
        m = self.median
        return m.records_per_s if m is not None else None

    @property
    def mb_per_s(self) -> float | None:
        m = self.median
        return m.mb_per_s if m is not None else None

    @property
    def check(self) -> str:
        if not self.runs:
            return "not run"
        return next((r.check for r in self.runs if not r.check.startswith("ok")),
                    self.runs[0].check)

    @property
    def problem(self) -> str | None:
        bad = self.failed
        if bad is not None:
            return "timed out" if bad.timed_out else (bad.error or "failed")
        return None

    @property
    def spread(self) -> tuple[float, float] | None:
        rates = [r.records_per_s for r in self.runs if r.records_per_s is not None]
        return (min(rates), max(rates)) if rates and self.ok else None


def payload(record_size: int) -> bytes:
    """Printable, newline-free bytes (kcat -l splits its file on newlines); fixed seed."""
    rng = random.Random(record_size)
    alphabet = (string.ascii_letters + string.digits).encode()
    return bytes(rng.choice(alphabet) for _ in range(record_size))


def write_kcat_file(path: Path, record_size: int, records: int) -> Path:
    line = payload(record_size) + b"\n"
    chunk = 10_000
    with open(path, "wb") as f:
        for start in range(0, records, chunk):
            f.write(line * min(chunk, records - start))
    return path


def _error_text(e: BaseException) -> str:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return f"{e.args[0].name()}: {e.args[0].str()}"
    return f"{type(e).__name__}: {e}"


# ---------------------------------------------------------------------------- topics


def await_topics(bootstrap: str, names: Sequence[str], partitions: int,
                 timeout_s: float = 120.0) -> None:
    """Wait until every topic has its partitions, each with a leader that serves it.

    Metadata names a leader before the broker has created the partition's log: Kafka
    answered ListOffsets with NOT_LEADER_OR_FOLLOWER for 23 s after creating 1,000
    partitions on a busy host, and a produce run started then timed the creation too.
    So a topic is ready once ListOffsets answers for every partition.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    missing = list(names)
    while time.monotonic() < deadline:
        try:
            topics = admin.list_topics(timeout=5).topics
        except KafkaException:
            time.sleep(0.2)
            continue
        missing = [
            n for n in names
            if n not in topics or topics[n].error is not None
            or len(topics[n].partitions) != partitions
            or any(p.leader < 0 for p in topics[n].partitions.values())
        ]
        if not missing:
            break
        time.sleep(0.2)
    for name in names if not missing else ():
        while True:
            left = deadline - time.monotonic()
            try:
                log_size(bootstrap, name, partitions, timeout_s=max(1.0, left))
                break
            except (KafkaException, RuntimeError):
                if time.monotonic() > deadline:
                    missing = [name]
                    break
                time.sleep(0.2)
    if missing:
        raise RuntimeError(f"topics not ready after {timeout_s:.0f} s: {', '.join(missing)}")


def log_size(bootstrap: str, topic: str, partitions: int,
             timeout_s: float = 30.0) -> tuple[int, int]:
    """(sum of log start offsets, sum of high watermarks) over the topic's partitions."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkernel-bench-probe",
                         "enable.auto.commit": False})
    deadline = time.monotonic() + timeout_s
    try:
        low = high = 0
        for p in range(partitions):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{topic}: watermarks not read within {timeout_s:.0f} s")
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                    timeout=min(10.0, left))
            low, high = low + lo, high + hi
        return low, high
    finally:
        consumer.close()


def check_appended(bootstrap: str, topic: str, partitions: int, before: int,
                   expected: int) -> str:
    try:
        _, high = log_size(bootstrap, topic, partitions)
    except (KafkaException, RuntimeError) as e:
        return f"could not read watermarks ({_error_text(e)})"
    appended = high - before
    if appended != expected:
        return f"MISMATCH: log grew by {appended}, expected {expected}"
    return f"ok: log grew by {appended}"


# --------------------------------------------------------------------------- produce


def produce_confluent(bootstrap: str, topic: str, value: bytes, records: int,
                      properties: Mapping[str, str], timeout_s: float,
                      spread_over: int = 0) -> RunResult:
    """Send ``records`` and flush; with ``spread_over`` partitions, round-robin over
    them (librdkafka's partitioner would stick to one partition per linger)."""
    if properties.get("transactional.id"):
        return produce_confluent_transactions(bootstrap, topic, value, records, properties,
                                              timeout_s)
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, **properties,
                         "delivery.report.only.error": True, "on_delivery": on_delivery})
    produce, poll = producer.produce, producer.poll
    result = RunResult()
    sent = 0
    start = time.perf_counter()
    deadline = start + timeout_s
    try:
        while sent < records:
            chunk_end = min(records, sent + 10_000)
            while sent < chunk_end:
                try:
                    if spread_over:
                        produce(topic, value, partition=sent % spread_over)
                    else:
                        produce(topic, value)
                    sent += 1
                except BufferError:
                    poll(0.001)
            poll(0)
            if time.perf_counter() > deadline:
                result.timed_out = True
                break
        undelivered = producer.flush(max(0.0, deadline - time.perf_counter()))
        result.seconds = time.perf_counter() - start
        failed = len(failures)
        if undelivered:
            result.timed_out = True
            producer.purge()
            producer.flush(1.0)
    except KafkaException as e:
        result.seconds = time.perf_counter() - start
        result.error = _error_text(e)
        undelivered, failed = 0, len(failures)
    delivered = max(0, sent - undelivered - failed)
    result.records, result.bytes = delivered, delivered * len(value)
    if failed:
        result.error = f"{failed} delivery failures, first: {failures[0].name()}"
    return result


# UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER
RETRIABLE_PRODUCE_ERRORS = frozenset({3, 5, 6})


def produce_batches(bootstrap: str, topic: str, value: bytes, records: int,
                    partitions: int, per_batch: int, timeout_s: float,
                    keys: int = 0) -> RunResult:
    """Send ``records`` as batches of ``per_batch`` records, spread evenly over
    ``partitions``, acks=1, one Produce at a time. A client cuts its batches by timing
    (linger, in-flight answers); these are cut by count, so two brokers given the same
    arguments hold the same batches, and their consumers' fetches hold the same records.
    With ``keys``, a partition's n-th record has the key ``key_of(n % keys)``."""
    result = RunResult()
    start = time.perf_counter()
    try:
        asyncio.run(_produce_batches(bootstrap, topic, value, records, partitions,
                                     per_batch, timeout_s, keys))
        result.records, result.bytes = records, records * len(value)
    except (BrokerConnectionError, RuntimeError) as e:
        result.error = _error_text(e)
    except TimeoutError:
        result.timed_out = True
    result.seconds = time.perf_counter() - start
    return result


def key_of(n: int) -> bytes:
    return b"key-%08d" % n


async def _produce_batches(bootstrap: str, topic: str, value: bytes, records: int,
                           partitions: int, per_batch: int, timeout_s: float,
                           keys: int) -> None:
    m = request_module(0, 9)  # Produce v9: topics by name, served by Kafka 4 and Kafkernel
    host, port = bootstrap.rsplit(":", 1)
    connection = BrokerConnection(host, int(port), client_id="bench-produce-batches",
                                  timeout_s=timeout_s)
    try:
        left = [records // partitions + (p < records % partitions) for p in range(partitions)]
        sent = [0] * partitions
        batches: dict[int, bytes] = {}
        async with asyncio.timeout(timeout_s):
            while any(left) or batches:
                for p, n in enumerate(left):
                    if n and p not in batches:
                        count = min(n, per_batch)
                        now = int(time.time() * 1000)
                        batches[p] = build_batch(
                            [SimpleRecord(value, key=key_of(n % keys), timestamp=now)
                             for n in range(sent[p], sent[p] + count)] if keys
                            else [SimpleRecord(value, timestamp=now)] * count)
                        left[p] -= count
                        sent[p] += count
                response = await connection.request(make(
                    m.ProduceRequest, transactional_id=None, acks=1,
                    timeout=datetime.timedelta(seconds=30),
                    topic_data=(make(m.TopicProduceData, name=topic, partition_data=tuple(
                        make(m.PartitionProduceData, index=p, records=b)
                        for p, b in batches.items())),)))
                retry = False
                for answer in response.responses[0].partition_responses:
                    code = int(answer.error_code)
                    if code == 0:
                        del batches[answer.index]
                    elif code in RETRIABLE_PRODUCE_ERRORS:  # a topic not ready yet
                        retry = True
                    else:
                        raise RuntimeError(f"partition {answer.index}: error {code}")
                if retry:
                    await asyncio.sleep(0.1)
    finally:
        connection.close()


def kcat_properties(properties: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in properties.items():
        args += ["-X", f"{key}={value}"]
    return args


def _timed_kcat(cmd: list[str], records: int, record_size: int,
                timeout_s: float) -> RunResult:
    """Run kcat once and time it; the run counts ``records`` when kcat exits 0 (each
    caller checks separately that they really went through)."""
    result = RunResult()
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        result.seconds = time.perf_counter() - start
        result.timed_out = True
        return result
    result.seconds = time.perf_counter() - start
    if done.returncode != 0:
        result.error = f"kcat exit {done.returncode}: {_first_lines(done.stderr)}"
        return result
    result.records, result.bytes = records, records * record_size
    return result


def produce_kcat(bootstrap: str, topic: str, path: Path, records: int, record_size: int,
                 properties: Mapping[str, str], timeout_s: float) -> RunResult:
    """Whether every record landed is checked after, by the log's growth."""
    cmd = ["kcat", "-b", bootstrap, "-P", "-t", topic, *kcat_properties(properties),
           "-l", str(path)]
    return _timed_kcat(cmd, records, record_size, timeout_s)


def _first_lines(data: bytes, n: int = 3) -> str:
    return " | ".join(data.decode(errors="replace").strip().splitlines()[:n]) or "(no output)"


# --------------------------------------------------------------------------- consume


def fill(bootstrap: str, topic: str, value: bytes, records: int, partitions: int,
         properties: Mapping[str, str], timeout_s: float) -> RunResult:
    """Write the log that the consume runs read, the same count into every partition.

    Not a figure. Even spreading (not the partitioner's random choice) keeps every
    partition within the mock's retention.
    """
    producer = Producer({"bootstrap.servers": bootstrap, **properties})
    result = RunResult()
    start = time.perf_counter()
    deadline = start + timeout_s
    chunk = 1000
    counts = [records // partitions + (p < records % partitions) for p in range(partitions)]
    try:
        for first in range(0, max(counts), chunk):
            for p, count in enumerate(counts):
                for _ in range(max(0, min(chunk, count - first))):
                    while True:
                        try:
                            producer.produce(topic, value, partition=p)
                            break
                        except BufferError:
                            producer.poll(0.01)
                producer.poll(0)
            if time.perf_counter() > deadline:
                result.timed_out = True
                break
        left = producer.flush(max(0.0, deadline - time.perf_counter()))
        if left:
            result.timed_out = True
            producer.purge()
            producer.flush(1.0)
    except KafkaException as e:
        result.error = _error_text(e)
    result.seconds = time.perf_counter() - start
    result.records = records
    return result


def consume_confluent(bootstrap: str, topic: str, partitions: int, records: int,
                      properties: Mapping[str, str], timeout_s: float) -> RunResult:
    """Read the whole log from offset 0 of every partition, ``records`` in all."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkernel-bench",
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         **properties})
    result = RunResult()
    start = time.perf_counter()
    deadline = start + timeout_s
    got = nbytes = 0
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        consume = consumer.consume
        while got < records:
            left = deadline - time.perf_counter()
            if left <= 0:
                result.timed_out = True
                break
            for m in consume(min(10_000, records - got), min(left, 1.0)):
                if m.error() is not None:
                    raise KafkaException(m.error())
                got += 1
                nbytes += len(m)
        result.seconds = time.perf_counter() - start
    except KafkaException as e:
        result.seconds = time.perf_counter() - start
        result.error = _error_text(e)
    finally:
        consumer.close()
    result.records, result.bytes = got, nbytes
    result.check = (f"ok: {got} records" if got == records
                    else f"MISMATCH: {got} records, expected {records}")
    return result


def consume_kcat(bootstrap: str, topic: str, records: int, record_size: int,
                 properties: Mapping[str, str], timeout_s: float) -> RunResult:
    """``kcat -C -e -o beginning -q`` to /dev/null over all partitions, timed.

    A second run, not timed, counts what kcat prints, to check that the first one had
    every record to read.
    """
    cmd = ["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
           "-c", str(records), *kcat_properties(properties)]
    result = _timed_kcat(cmd, records, record_size, timeout_s)
    if not result.ok:
        return result
    lines, size, problem = _count_kcat_output(cmd, timeout_s)
    if problem:
        result.check = f"could not check: {problem}"
    elif lines != records or size != records * (record_size + 1):
        result.check = f"MISMATCH: a checking run printed {lines} records ({size} bytes)"
        result.error = result.check
    else:
        result.check = f"ok: a checking run printed {lines} records of {record_size} B"
    return result


def _count_kcat_output(cmd: list[str], timeout_s: float) -> tuple[int, int, str | None]:
    deadline = time.monotonic() + timeout_s
    lines = size = 0
    with subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        while chunk := proc.stdout.read(1 << 20):
            lines += chunk.count(b"\n")
            size += len(chunk)
            if time.monotonic() > deadline:
                proc.kill()
                return lines, size, "the checking run overran"
        proc.wait(max(1.0, deadline - time.monotonic()))
        if proc.returncode != 0:
            return lines, size, f"kcat exit {proc.returncode}"
    return lines, size, None


# ----------------------------------------------------------- Kafka's Java perf tools


def _java_props(flag: str, properties: Mapping[str, str]) -> list[str]:
    return [x for key, value in properties.items() for x in (flag, f"{key}={value}")]


def _run_java(main_class: str, args: list[str], timeout_s: float,
              result: RunResult) -> str | None:
    """Run a perf tool; its stdout, or None with ``result`` saying what went wrong."""
    start = time.perf_counter()
    try:
        done = tools.run(main_class, *args, timeout=timeout_s, jvm_options=PERF_JVM_OPTIONS)
    except subprocess.TimeoutExpired:
        result.seconds = time.perf_counter() - start
        result.timed_out = True
        return None
    except RuntimeError as e:  # jars or java missing
        result.error = str(e)
        return None
    result.seconds = time.perf_counter() - start
    if done.returncode != 0:
        result.error = (f"{main_class.rsplit('.', 1)[1]} exit {done.returncode}: "
                        f"{_first_lines((done.stdout + done.stderr).encode(), 4)}")
        return None
    return done.stdout


def transactions_of(records: int, per_transaction: int) -> int:
    return -(-records // per_transaction)


def produce_confluent_transactions(bootstrap: str, topic: str, value: bytes, records: int,
                                   properties: Mapping[str, str],
                                   timeout_s: float) -> RunResult:
    """``records`` in transactions of ``transaction.records`` (a property of this bench,
    not librdkafka's) each committed before the next begins, all to partition 0 of
    ``topic``. init_transactions is not timed: it is the producer's start-up."""
    props = dict(properties)
    per_transaction = int(props.pop("transaction.records"))
    producer = Producer({"bootstrap.servers": bootstrap, **props})
    result = RunResult()
    sent = 0
    try:
        producer.init_transactions(timeout_s)
        start = time.perf_counter()
        deadline = start + timeout_s
        produce, poll = producer.produce, producer.poll
        while sent < records:
            if time.perf_counter() > deadline:
                result.timed_out = True
                break
            producer.begin_transaction()
            end = min(records, sent + per_transaction)
            while sent < end:
                try:
                    produce(topic, value, partition=0)
                    sent += 1
                except BufferError:
                    poll(0.001)
            producer.commit_transaction(max(1.0, deadline - time.perf_counter()))
        result.seconds = time.perf_counter() - start
        result.records, result.bytes = sent, sent * len(value)
    except KafkaException as e:
        result.error = _error_text(e)
    finally:
        producer.flush(1.0)
    return result


def warmup_records(records: int) -> int:
    """ProducerPerformance's warm-up: the first tenth of the records, not in the rate."""
    return records // 10


def produce_java(bootstrap: str, topic: str, record_size: int, records: int,
                 properties: Mapping[str, str], timeout_s: float) -> RunResult:
    """``ProducerPerformance --throughput -1 --warmup-records N/10``. The rate is the
    tool's own steady-state line: from the send of the first record after the warm-up
    to the end of ``producer.close()``, records acknowledged in that time; the JVM's
    start-up, the producer's construction, the first Metadata and the warm-up records
    are not in it. Whether every record landed is checked after, by the log's growth."""
    result = RunResult()
    warmup = warmup_records(records)
    args = ["--topic", topic, "--num-records", str(records), "--record-size",
            str(record_size), "--throughput", "-1", "--warmup-records", str(warmup),
            "--reporting-interval", "3600000", "--command-property",
            f"bootstrap.servers={bootstrap}",
            *[f"{k}={v}" for k, v in properties.items()]]
    out = _run_java(tools.PRODUCER_PERFORMANCE, args, timeout_s, result)
    if out is None:
        return result
    # "100000 records sent, 30599.75 records/sec (2.92 MB/sec), ..." then, with a
    # warm-up, "90000 steady state records sent, 56214.86 records/sec (...), ..."
    total = steady = None
    for line in out.splitlines():
        head = line.split(",", 2)
        if len(head) < 2 or "records/sec" not in head[1]:
            continue
        sent, rate = int(head[0].split()[0]), float(head[1].split()[0])
        if "steady state" in head[0]:
            steady = (sent, rate)
        else:
            total = (sent, rate)
    if total is None or (warmup and steady is None):
        result.error = f"ProducerPerformance printed no summary: {_first_lines(out.encode())}"
        return result
    result.records, result.bytes = total[0], total[0] * record_size
    sent, rate = steady if steady is not None else total
    result.rate_records, result.rate_seconds = sent, sent / rate if rate > 0 else None
    if total[0] != records:
        result.error = f"ProducerPerformance: {total[0]} of {records} records acknowledged"
    return result


def consume_java(bootstrap: str, topic: str, records: int, record_size: int,
                 properties: Mapping[str, str], timeout_s: float) -> RunResult:
    """``ConsumerPerformance --num-records N`` in a fresh group (subscribe, classic
    protocol, auto.offset.reset=earliest). The rate is the tool's fetch.nMsg.sec:
    records over fetch.time.ms, the time from the consumer's creation to the last
    record less the group join (the JVM's start-up and the join, with the first
    Metadata and FindCoordinator, are not in it; the OffsetFetch and ListOffsets after
    the join are)."""
    result = RunResult()
    with tempfile.NamedTemporaryFile("w", suffix=".properties") as config:
        config.write("".join(f"{k}={v}\n" for k, v in properties.items()))
        config.flush()
        args = ["--bootstrap-server", bootstrap, "--topic", topic,
                "--num-records", str(records), "--group",
                f"kafkernel-bench-{uuid.uuid4().hex[:8]}", "--hide-header",
                "--timeout", str(int(timeout_s * 1000)), "--command-config", config.name]
        out = _run_java(tools.CONSUMER_PERFORMANCE, args, timeout_s + 30, result)
    if out is None:
        return result
    # start.time, end.time, MB, MB.sec, nMsg, nMsg.sec, rebalance.time.ms,
    # fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    rows = [line.split(", ") for line in out.splitlines() if line.count(", ") == 9]
    if not rows:
        result.error = f"ConsumerPerformance printed no summary: {_first_lines(out.encode())}"
        return result
    got, fetch_ms = int(rows[-1][4]), int(rows[-1][7])
    result.records, result.bytes = got, got * record_size
    result.rate_records, result.rate_seconds = got, fetch_ms / 1000 if fetch_ms > 0 else None
    if got != records:
        result.error = result.check = f"MISMATCH: {got} records, expected {records}"
    else:
        result.check = (f"ok: {got} records (join {rows[-1][6]} ms, fetch {fetch_ms} ms, "
                        f"JVM run {result.seconds:.1f} s)")
    return result
