"""A real Prometheus for the tests: Debian's ``prometheus`` package (``./dev test``
installs it; it brings ``promtool``) run on a free loopback port with a temporary
config and TSDB, scraping and evaluating every second; it dies with the process that
started it.

    with tests.ops.prometheus.start(["127.0.0.1:9100"], [rules]) as prom:
        prom.query("up")

Nothing here depends on pytest.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference.kafka import die_with_parent
from tests.zookeeper import HOST, free_port

STARTUP_TIMEOUT = 60.0


class PrometheusNotInstalled(RuntimeError):
    pass


class QueryError(RuntimeError):
    """Prometheus refused a query: the message is its errorType and error."""


def binary(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; raises when it is not installed."""
    path = shutil.which(name)
    if path is None:
        raise PrometheusNotInstalled(
            f"{name} is not on PATH: run ./dev test (it installs Debian's prometheus "
            "package, which brings promtool)")
    return path


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run promtool; its output is stdout and stderr together."""
    return subprocess.run([binary("promtool"), *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)


@dataclass
class Prometheus:
    port: int
    work_dir: Path
    process: subprocess.Popen[bytes]
    _stopped: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a /api/v1 answer; raises QueryError when it is an error."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}",
                                        timeout=30) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as e:  # 400/422: a query Prometheus refused
            body = json.load(e)
        if body.get("status") != "success":
            raise QueryError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result: a vector, each element with ``metric`` and
        ``value`` (time, value as a string)."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts, with their labels."""
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def rules(self) -> list[dict[str, Any]]:
        """Every rule of every loaded group, as Prometheus parsed it (``query``) and
        evaluated it last (``health``, ``lastError``)."""
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def log(self) -> str:
        return (self.work_dir / "prometheus.out").read_text(errors="replace")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(targets: Sequence[str], rule_files: Sequence[Path] = (),
          timeout: float = STARTUP_TIMEOUT) -> Prometheus:
    """Start Prometheus scraping ``targets`` (host:port of /metrics endpoints, job
    ``kafkernel``) every second and evaluating ``rule_files`` every second; returns
    once it is ready. A rule file Prometheus cannot load fails the start."""
    executable = binary("prometheus")
    work_dir = Path(tempfile.mkdtemp(prefix="prometheus-"))
    config = work_dir / "prometheus.yml"
    # JSON is YAML: no YAML writer needed.
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                   "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": "kafkernel",
                            "static_configs": [{"targets": list(targets)}]}],
    }, indent=2))
    port = free_port()
    with open(work_dir / "prometheus.out", "ab") as out:
        process = subprocess.Popen(
            [*die_with_parent(), executable, f"--config.file={config}",
             f"--storage.tsdb.path={work_dir / 'data'}",
             f"--web.listen-address={HOST}:{port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=work_dir)
    prom = Prometheus(port, work_dir, process)
    deadline = time.monotonic() + timeout
    while not _ready(prom):
        if process.poll() is not None or time.monotonic() > deadline:
            log = prom.log()[-3000:]
            prom.stop()
            raise RuntimeError(f"Prometheus did not start on {HOST}:{port}:\n{log}")
        time.sleep(0.1)
    return prom


def _ready(prom: Prometheus) -> bool:
    try:
        with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False
