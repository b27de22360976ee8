"""Run Apache Kafka's own command-line tools and small Java programs built against its
client, from the jars ``python -m reference.fetch`` caches, the way Kafka's bin/ scripts
do (``java -cp 'libs/*' <main class> ...``), without the scripts.

    result = reference.tools.run(reference.tools.TOPIC_COMMAND,
                                 "--bootstrap-server", bootstrap, "--list")
    result.check()          # raises ToolFailed (with the output) on a non-zero exit
    print(result.stdout)

Used by tests/java and meant for the benchmarks too, so nothing here depends on pytest.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from reference.fetch import REPO, is_fetched, kafka_version, libs_dir
from reference.kafka import KafkaNotFetched

# The main classes behind Kafka 4.3's bin/ scripts (kafka-topics.sh and friends). Only
# kafka-configs is still Scala, in kafka_2.13; the rest live in kafka-tools.
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"  # kafka-topics
CONFIG_COMMAND = "kafka.admin.ConfigCommand"  # kafka-configs
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"  # kafka-console-producer
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"  # kafka-console-consumer
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSET_SHELL = "org.apache.kafka.tools.GetOffsetShell"  # kafka-get-offsets
DELETE_RECORDS_COMMAND = "org.apache.kafka.tools.DeleteRecordsCommand"  # kafka-delete-records
PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"  # kafka-producer-perf-test
CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance"  # kafka-consumer-perf-test

# A tool is a short-lived JVM: the C1 compiler alone and the JDK's class-data archive
# start it in about half the time of the defaults, and it needs little heap.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-Xshare:auto", "-XX:+UseSerialGC", "-Xmx256m",
               "-Djava.awt.headless=true")
# Warnings and worse to stderr, as bin/'s tools-log4j2.yaml does.
LOG4J2 = Path(__file__).resolve().parent / "kafka" / "tools-log4j2.properties"
TIMEOUT = 120.0


class ToolFailed(RuntimeError):
    """A tool exited non-zero; the message holds its command line and output."""


@dataclass(frozen=True)
class ToolResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def check(self) -> ToolResult:
        if self.returncode != 0:
            raise ToolFailed(self.describe())
        return self

    def describe(self) -> str:
        """The command, its exit code and its output, for an assertion message."""
        return (f"{' '.join(self.args[-12:])}\nexit code {self.returncode} after "
                f"{self.seconds:.1f} s\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}")


def classpath(*extra: str | Path) -> str:
    """Kafka's jars (a ``libs/*`` wildcard, as bin/kafka-run-class.sh builds) and ``extra``."""
    if not is_fetched():
        raise KafkaNotFetched(
            f"Apache Kafka {kafka_version()} is not fetched into {libs_dir()}: run ./dev test"
        )
    return ":".join([*(str(e) for e in extra), f"{libs_dir()}/*"])


def java_command(main: str, *args: str, extra_classpath: Iterable[str | Path] = (),
                 jvm_options: Sequence[str] = (), java: str = "java") -> list[str]:
    if shutil.which(java) is None:
        raise KafkaNotFetched(f"{java} is not installed: run ./dev test")
    return [java, *JVM_OPTIONS, *jvm_options, f"-Dlog4j2.configurationFile={LOG4J2}",
            "-cp", classpath(*extra_classpath), main, *args]


def run(main: str, *args: str, stdin: str | None = None, timeout: float = TIMEOUT,
        extra_classpath: Iterable[str | Path] = (), jvm_options: Sequence[str] = (),
        java: str = "java") -> ToolResult:
    """Run ``main`` to its end (killed after ``timeout`` seconds, which raises
    subprocess.TimeoutExpired) and return its exit code and output."""
    command = java_command(main, *args, extra_classpath=extra_classpath,
                           jvm_options=jvm_options, java=java)
    began = time.monotonic()
    done = subprocess.run(command, input=stdin if stdin is not None else "",
                          capture_output=True, text=True, timeout=timeout)
    return ToolResult(tuple(command), done.returncode, done.stdout, done.stderr,
                      time.monotonic() - began)


def compile_java(sources: Sequence[Path], name: str, javac: str = "javac") -> Path:
    """Compile ``sources`` against Kafka's jars into ``.cache/java/<name>-<hash>`` (git-
    ignored), once: the folder is named by a hash of the sources and the Kafka version, so
    an unchanged program is not compiled again. Returns the classes folder."""
    digest = hashlib.sha256(kafka_version().encode())
    for source in sorted(sources):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    out = REPO / ".cache" / "java" / f"{name}-{digest.hexdigest()[:16]}"
    if (out / "compiled.stamp").is_file():
        return out
    if shutil.which(javac) is None:
        raise KafkaNotFetched(f"{javac} is not installed (a JDK): run ./dev test")
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    compiled = subprocess.run(
        [javac, "-nowarn", "-Xlint:none", "--release", "17", "-d", str(partial),
         "-cp", classpath(), *(str(s) for s in sources)],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    if compiled.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise ToolFailed(f"javac failed ({compiled.returncode}):\n{compiled.stdout}"
                         f"{compiled.stderr}")
    (partial / "compiled.stamp").write_text("")
    try:
        partial.rename(out)
    except OSError:  # another run compiled the same sources first
        shutil.rmtree(partial, ignore_errors=True)
    return out
