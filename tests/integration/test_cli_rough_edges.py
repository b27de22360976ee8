"""The command line as a new user meets it: ``config check`` reports every problem
with its line, a closed pipe ends a command quietly, kcat's formats print as kcat's,
tables off a terminal are plain columns, and a bad ``spark export`` option is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from kernel.testing.embedded import EmbeddedBroker


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernel", *args], capture_output=True,
                          text=True, timeout=60)


BAD = """\
# every line below the comment but the tables has a problem
broker.id = 3
num.partitionz = 3
log.dirs = "data"
sasl.enabled.mechanisms = ["PLAIN"]
"log.retention.hourz" = 5
auto.create.topics.enable = 1

[plugins]
enabled = ["metadata_kraft", "auth_sasl"]

[plugins.auth_sasl]
sasl.enabled.mechanismz = ["PLAIN"]
"""


def test_config_check_reports_every_problem_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BAD)
    result = _cli("config", "check", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"{path}:3: num.partitionz: unknown key; did you mean 'num.partitions'?",
        # Kafka's one properties file has it at the top level: say where it goes here,
        # from the auth_sasl plugin's schema
        f"{path}:5: sasl.enabled.mechanisms: unknown key here; it belongs to the "
        "[plugins.auth_sasl] table",
        f"{path}:6: log.retention.hourz: unknown key; did you mean 'log.retention.hours' "
        "or 'log.retention.ms' or 'log.retention.minutes'?",
        f"{path}:7: auto.create.topics.enable: expected true or false, got 1",
        f"{path}:13: plugins.auth_sasl.sasl.enabled.mechanismz: unknown key; did you "
        "mean 'sasl.enabled.mechanisms'?",
    ]
    # no line lists the broker's hundred keys
    assert max(map(len, result.stderr.splitlines())) < 200


def test_config_check_names_the_line_of_a_toml_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("broker.id = 1\nnum.partitions = \n")
    result = _cli("config", "check", str(path))
    assert result.returncode == 2
    assert result.stderr.startswith(f"{path}:2: not valid TOML: "), result.stderr


def _into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``kafkernel ARGS | head -0``: the reader is gone before the first write."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "kernel", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)


def test_output_into_a_closed_pipe_ends_quietly(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    bootstrap = broker_factory().bootstrap
    for args in (("version",),
                 ("config", "describe", "--broker", "1", "-o", "json",
                  "--bootstrap-server", bootstrap)):
        result = _into_closed_pipe(*args)
        # as a shell reports a command SIGPIPE ended, and nothing on stderr
        assert (result.returncode, result.stderr) == (141, ""), args


def test_a_bad_spark_export_option_is_one_line() -> None:
    for args, problem in (
            (("--path", "t", "--bootstrap-servers", "h:9092", "--bogus"),
             "unrecognized arguments: --bogus"),
            (("--path", "t"), "the following arguments are required: --bootstrap-servers"),
            (("--path", "t", "--bootstrap-servers", "h:9092", "--topics", "t",
              "--max-offsets-per-trigger", "-3"),
             "--max-offsets-per-trigger: -3 is not allowed; expected a value > 0")):
        result = _cli("spark", "export", *args)
        assert (result.returncode, result.stderr) == (
            2, f"kafkernel spark export: {problem} (--help lists the options)\n")
