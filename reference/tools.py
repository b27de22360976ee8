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
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"  # kafka-acls
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"  # kafka-console-producer
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"  # kafka-console-consumer
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSET_SHELL = "org.apache.kafka.tools.GetOffsetShell"  # kafka-get-offsets
DELETE_RECORDS_COMMAND = "org.apache.kafka.tools.DeleteRecordsCommand"  # kafka-delete-records
PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"  # kafka-producer-perf-test
CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance"  # kafka-consumer-perf-test
# kafka-reassign-partitions
REASSIGN_PARTITIONS_COMMAND = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LEADER_ELECTION_COMMAND = "org.apache.kafka.tools.LeaderElectionCommand"  # kafka-leader-election
LOG_DIRS_COMMAND = "org.apache.kafka.tools.LogDirsCommand"  # kafka-log-dirs
METADATA_QUORUM_COMMAND = "org.apache.kafka.tools.MetadataQuorumCommand"  # kafka-metadata-quorum
FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"  # kafka-features
DUMP_LOG_COMMAND = "org.apache.kafka.tools.DumpLogSegments"  # kafka-dump-log
STORAGE_COMMAND = "kafka.tools.StorageTool"  # kafka-storage

# A tool is a short-lived JVM: the C1 compiler alone starts it quicker, and it needs
# little heap. The JVM's own warnings go to stderr, never into the output a test reads.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-Xshare:auto", "-XX:+UseSerialGC", "-Xmx256m",
               "-Djava.awt.headless=true", "-Xlog:disable", "-Xlog:all=warning:stderr")
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
    """Kafka's jars (a ``libs/*`` wildcard, as bin/kafka-run-class.sh builds), then
    ``extra``: the jars come first so the class-data archive's classpath stays a prefix."""
    if not is_fetched():
        raise KafkaNotFetched(
            f"Apache Kafka {kafka_version()} is not fetched into {libs_dir()}: run ./dev test"
        )
    return ":".join([f"{libs_dir()}/*", *(str(e) for e in extra)])


def class_data_archive(java: str = "java") -> Path:
    """Where the class-data archive of Kafka's classes (AppCDS, a JVM's dynamic archive)
    is kept: named by the JVM binary and the jars, since an archive only serves the JVM
    and the classpath that wrote it (a JVM that cannot use one ignores it)."""
    binary = Path(shutil.which(java) or java).resolve()
    jars = sorted(p.name for p in libs_dir().glob("*.jar"))
    key = hashlib.sha256("\0".join(
        [str(binary), str(binary.stat().st_mtime_ns), *jars]).encode()).hexdigest()[:16]
    return REPO / ".cache" / "java" / f"kafka-{kafka_version()}-{key}.jsa"


def java_command(main: str, *args: str, extra_classpath: Iterable[str | Path] = (),
                 jvm_options: Sequence[str] = (), java: str = "java",
                 archive: Sequence[str] = ()) -> list[str]:
    if shutil.which(java) is None:
        raise KafkaNotFetched(f"{java} is not installed: run ./dev test")
    return [java, *JVM_OPTIONS, *archive, *jvm_options,
            f"-Dlog4j2.configurationFile={LOG4J2}", "-cp", classpath(*extra_classpath),
            main, *args]


def run(main: str, *args: str, stdin: str | None = None, timeout: float = TIMEOUT,
        extra_classpath: Iterable[str | Path] = (), jvm_options: Sequence[str] = (),
        java: str = "java") -> ToolResult:
    """Run ``main`` to its end (killed after ``timeout`` seconds, which raises
    subprocess.TimeoutExpired) and return its exit code and output.

    The classes Kafka's tools load are mapped from a class-data archive, which starts a
    tool in about half the time (1.9 s -> 0.9 s here); the first run without
    ``extra_classpath`` writes the archive as it exits."""
    extra = list(extra_classpath)
    archive = class_data_archive(java)
    written = None
    if archive.is_file():
        options = [f"-XX:SharedArchiveFile={archive}"]
    elif not extra:
        archive.parent.mkdir(parents=True, exist_ok=True)
        written = archive.with_name(f"{archive.name}.partial-{os.getpid()}")
        options = [f"-XX:ArchiveClassesAtExit={written}"]
    else:
        options = []
    command = java_command(main, *args, extra_classpath=extra, jvm_options=jvm_options,
                           java=java, archive=options)
    began = time.monotonic()
    try:
        done = subprocess.run(command, input=stdin if stdin is not None else "",
                              capture_output=True, text=True, timeout=timeout)
    finally:
        if written is not None:
            _keep(written, archive)
    return ToolResult(tuple(command), done.returncode, done.stdout, done.stderr,
                      time.monotonic() - began)


def _target(bootstrap_controller: str | None, bootstrap_server: str | None) -> list[str]:
    if (bootstrap_controller is None) == (bootstrap_server is None):
        raise ValueError("name exactly one of bootstrap_controller and bootstrap_server")
    if bootstrap_controller is not None:
        return ["--bootstrap-controller", bootstrap_controller]
    assert bootstrap_server is not None
    return ["--bootstrap-server", bootstrap_server]


def metadata_quorum(*args: str, bootstrap_controller: str | None = None,
                    bootstrap_server: str | None = None,
                    timeout: float = TIMEOUT) -> ToolResult:
    """``kafka-metadata-quorum --bootstrap-controller h:p,... <args>`` (or through a
    broker with ``bootstrap_server``), e.g. ``metadata_quorum("describe", "--status",
    bootstrap_controller=quorum.controller_bootstrap)``."""
    return run(METADATA_QUORUM_COMMAND,
               *_target(bootstrap_controller, bootstrap_server), *args, timeout=timeout)


def features(*args: str, bootstrap_controller: str | None = None,
             bootstrap_server: str | None = None, timeout: float = TIMEOUT) -> ToolResult:
    """``kafka-features --bootstrap-controller h:p,... <args>`` (``describe``,
    ``upgrade --feature k=v``...), or through a broker with ``bootstrap_server``."""
    return run(FEATURE_COMMAND, *_target(bootstrap_controller, bootstrap_server), *args,
               timeout=timeout)


def dump_log(*files: str | Path, cluster_metadata: bool = True, print_data: bool = False,
             timeout: float = TIMEOUT) -> ToolResult:
    """``kafka-dump-log --files f1,f2 [--cluster-metadata-decoder]``: Kafka's reading of
    log segments and (with the decoder) ``__cluster_metadata`` segments and snapshots."""
    args = ["--files", ",".join(str(f) for f in files)]
    if cluster_metadata:
        args.append("--cluster-metadata-decoder")
    if print_data:
        args.append("--print-data-log")
    return run(DUMP_LOG_COMMAND, *args, timeout=timeout)


def _keep(written: Path, archive: Path) -> None:
    """Move a freshly written archive into place (another run may have been first)."""
    try:
        if written.is_file():
            written.rename(archive)
    except OSError:
        pass
    written.unlink(missing_ok=True)


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
