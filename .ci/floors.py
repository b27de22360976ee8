#!/usr/bin/env python3
"""Check the lowest versions pyproject.toml allows.

Each `name>=X` of the dependencies and of the extras below becomes `name==X` in a
constraints file (markers kept; `==` pins stay as they are). A virtualenv under .cache/,
keyed by the hash of pyproject.toml, setup.py and EXTRAS, gets the project installed with
those constraints; there the whole suite must collect (every test module imports),
`ruff check .` must pass and so must a slice of the suite (SLICE). A floor that does not
install (no such version, or no wheel for this Python and its build fails) or fails a
step fails this command: raise it in pyproject.toml, with a comment saying why.

    .ci/floors.py                  build (or reuse) the venv, run the checks
    .ci/floors.py --constraints    print the constraints file and exit
    .ci/floors.py [pytest args]    run pytest with these args in the floors venv instead

`./dev test` runs it after the suite. The install's output goes to <venv>/install.log,
shown on failure. KAFKERNEL_FLOORS_CACHE puts the venv elsewhere than .cache/.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# spark (pyspark==4.0.0, a 300 MB wheel) is left out: its one floor, rich, is admin's too.
EXTRAS = ("fast", "zk", "oauth", "admin", "test")
# What the floors must carry: the unit tests, and one integration test of each dependency
# at work (a few minutes in all: the whole suite runs on the newest versions).
IT = "tests/integration/"
OBS = IT + "test_observability_and_embedding.py::"
SLICE = (
    "tests/unit",
    # Property walks over every kio schema (kio is pinned): five minutes of the unit
    # tests' seven on a loaded machine; hypothesis's floor is exercised by the others.
    "--ignore=tests/unit/test_protocol_writer.py",
    "--ignore=tests/unit/test_request_guard.py",
    # a broker with every plugin starts (pluggy reads every attribute of a plugin object),
    # a third-party plugin is found, `config check` reads a file
    IT + "test_plugins.py",
    IT + "test_cli_rough_edges.py::test_config_check_reports_every_problem_with_its_line",
    # produce/consume with each client and codec (lz4, zstandard, python-snappy, crc32c)
    IT + "test_produce_fetch.py::test_confluent_kafka_roundtrip_each_codec",
    IT + "test_produce_fetch.py::test_kafka_python_roundtrip",
    IT + "test_produce_fetch.py::test_aiokafka_roundtrip",
    # SASL/OAUTHBEARER (PyJWT, cryptography), from confluent-kafka and kafka-python
    IT + "test_oauthbearer.py::test_confluent_kafka_over_sasl_plaintext_and_sasl_ssl",
    IT + "test_oauthbearer.py::test_kafka_python_with_a_token_provider",
    IT + "test_oauthbearer.py::test_a_bad_token_gets_the_invalid_token_challenge_then_fails",
    # setuptools builds a plugin distribution (no build isolation) that pip installs
    IT + "test_plugin_packaging.py::test_a_pip_installed_plugin_is_enabled_by_its_entry_point",
    # a ZooKeeper (kazoo)
    "tests/zk/test_startup_zk.py::test_a_second_broker_id_joins_the_same_cluster",
    # the admin CLI (confluent-kafka's AdminClient, kafka-python, rich)
    IT + "test_admin_cli.py",
    # the Prometheus metrics page (prometheus-client), `kafkernel serve` on uvloop, the
    # published pytest fixture
    OBS + "test_metrics_endpoint_shows_request_and_topic_metrics",
    OBS + "test_serve_binary_answers_kcat_and_stops_on_sigterm",
    OBS + "test_pytest_fixture_in_a_scratch_project",
)
REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"
    r"(?P<spec>[^;]*?)\s*(?:;\s*(?P<marker>.*))?$")


def constraints(pyproject: dict) -> list[str]:
    """One `name==floor` line per distribution."""
    project = pyproject["project"]
    requirements = list(project["dependencies"])
    for extra in EXTRAS:
        requirements += project["optional-dependencies"][extra]
    floors: dict[str, tuple[tuple[int, ...], str]] = {}
    for requirement in requirements:
        m = REQUIREMENT.match(requirement)
        if m is None:
            sys.exit(f"floors: cannot read the requirement {requirement!r}")
        name = re.sub(r"[-_.]+", "-", m["name"]).lower()
        spec = m["spec"].replace(" ", "")
        if spec.startswith(">="):
            version = spec[2:].split(",")[0]
        elif spec.startswith("==") and "," not in spec:
            version = spec[2:]
        else:
            sys.exit(f"floors: {requirement!r} has no floor (>=X) nor pin (==X): give it one")
        key = tuple(int(p) for p in re.findall(r"\d+", version))
        line = f"{name}=={version}" + (f"; {m['marker']}" if m["marker"] else "")
        if name in floors and floors[name][0] != key:
            sys.exit(f"floors: {name} has two floors in pyproject.toml ({floors[name][1]} "
                     f"and {line}): give every list the same, so the one tested is each's")
        floors[name] = (key, line)
    return [line for _, line in sorted(floors.values(), key=lambda f: f[1])]


def venv_for(key: str) -> Path:
    """The floors venv of this pyproject; ones of older pyprojects are removed."""
    cache = Path(os.environ.get("KAFKERNEL_FLOORS_CACHE", ROOT / ".cache"))
    cache.mkdir(parents=True, exist_ok=True)
    for old in cache.glob("floors-*"):
        if old.name != f"floors-{key}":
            shutil.rmtree(old, ignore_errors=True)
    return cache / f"floors-{key}"


def install(venv: Path, lines: list[str]) -> None:
    stamp = venv / ".installed"
    if stamp.exists():
        return
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (venv / "constraints.txt").write_text("\n".join(lines) + "\n")
    log = venv / "install.log"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    print(f"floors: installing the lowest allowed versions into {venv} (log: {log})",
          file=sys.stderr)
    with log.open("w") as out:
        steps = [[*pip, "install", "--upgrade", "pip"],
                 [*pip, "install", "-c", str(venv / "constraints.txt"),
                  "-e", f"{ROOT}[{','.join(EXTRAS)}]"],
                 [*pip, "check"]]
        for step in steps:
            out.write(f"$ {' '.join(step)}\n")
            out.flush()
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT).returncode:
                sys.stderr.write(log.read_text())
                sys.exit("floors: installing the floors failed (the log is above): raise the "
                         "floor pip could not install in pyproject.toml")
    stamp.write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    pyproject_bytes = (ROOT / "pyproject.toml").read_bytes()
    lines = constraints(tomllib.loads(pyproject_bytes.decode()))
    if argv[:1] == ["--constraints"]:
        print("\n".join(lines))
        return 0
    digest = hashlib.sha256(pyproject_bytes + (ROOT / "setup.py").read_bytes()
                            + ",".join(EXTRAS).encode())
    venv = venv_for(digest.hexdigest()[:16])
    install(venv, lines)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    pytest = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if argv:
        return subprocess.run([*pytest, *argv], cwd=ROOT, env=env).returncode
    # Every test module imports on the floors (a name a client library lacks shows here,
    # in half a minute), then the slice runs.
    print("floors: collecting the whole suite", file=sys.stderr)
    collected = subprocess.run([*pytest, "--collect-only", "-qq"], cwd=ROOT, env=env,
                               capture_output=True, text=True)
    if collected.returncode:
        sys.stderr.write(collected.stdout + collected.stderr)
        print("floors: the suite does not import on the floors (above)", file=sys.stderr)
        return collected.returncode
    # ruff's floor must know every rule the config names, and find the tree clean.
    if subprocess.run([str(venv / "bin" / "ruff"), "check", "--quiet", "."], cwd=ROOT,
                      env=env).returncode:
        print("floors: `ruff check .` fails on ruff's floor (above)", file=sys.stderr)
        return 1
    print("floors: running the slice", file=sys.stderr)
    return subprocess.run([*pytest, *SLICE], cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
