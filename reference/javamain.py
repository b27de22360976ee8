"""Run one of Apache Kafka's Java main classes (a perf tool, a command-line tool) from the
fetched jars, the way Kafka's ``bin/*.sh`` scripts would:

    done = javamain.run("org.apache.kafka.tools.ProducerPerformance", [...], timeout=60)

Nothing here depends on pytest; ``python -m reference.fetch`` must have run.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from reference.fetch import is_fetched, kafka_version, libs_dir
from reference.kafka import JVM_OPTIONS, KafkaNotFetched

# kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh set -Xmx512M.
TOOL_HEAP = "512m"


def command(main_class: str, args: Sequence[str], *, heap: str = TOOL_HEAP,
            java: str = "java") -> list[str]:
    """The command line: ``java <Kafka's JVM options> -Xmx<heap> -cp 'libs/*' MAIN ARGS``.
    Log4j finds no configuration and prints errors only."""
    if not is_fetched():
        raise KafkaNotFetched(
            f"Apache Kafka {kafka_version()} is not fetched into {libs_dir()}: run ./dev test")
    if shutil.which(java) is None:
        raise KafkaNotFetched(f"{java} is not installed: run ./dev test")
    return [java, *JVM_OPTIONS, f"-Xmx{heap}", "-cp", f"{libs_dir()}/*", main_class, *args]


def run(main_class: str, args: Sequence[str], *, timeout: float, heap: str = TOOL_HEAP,
        java: str = "java") -> subprocess.CompletedProcess[str]:
    """Run to completion, output captured as text; raises ``subprocess.TimeoutExpired``
    (after killing it) when it overruns ``timeout`` seconds."""
    return subprocess.run(command(main_class, args, heap=heap, java=java),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, check=False)
