"""The dashboard and alerting rules shipped in ops/, against a real Prometheus (Debian's,
tests/ops/prometheus.py) scraping a broker under load: a producer writing and a consumer
group reading with confluent-kafka. Every panel's query and every alert expression must
be valid PromQL and every panel must show data; the consumer-lag alert must fire once
the group stops consuming while the producer goes on. The rules are loaded as shipped,
their `for:` durations shortened to seconds; promtool checks them and runs their unit
test (ops/prometheus/kafkernel-alerts.test.yml) as shipped."""

from __future__ import annotations

import json
import math
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.testing.embedded import EmbeddedBroker
from tests.ops import prometheus
from tests.ops.prometheus import Prometheus

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops" / "grafana" / "kafkernel-dashboard.json"
RULES = ROOT / "ops" / "prometheus" / "kafkernel-alerts.yml"
RULES_TEST = ROOT / "ops" / "prometheus" / "kafkernel-alerts.test.yml"
# Grafana's variables as a dashboard showing every broker over a short range expands
# them (rate windows of several 1 s scrapes).
GRAFANA_VARIABLES = {"$__rate_interval": "10s", "$__range": "5m", "$job": ".+",
                     "$instance": ".+"}
SHORT_FOR = "3s"
TOPIC, GROUP = "orders", "billing"
LAG_ALERT = "KafkernelConsumerLagGrowing"
HEALTHY_BROKER_QUIET = {"KafkernelErrorsLogged", "KafkernelOfflinePartitions",
                        "KafkernelUnderMinIsrPartitions",
                        "KafkernelUnderReplicatedPartitions"}


def panel_queries() -> dict[str, str]:
    """Each panel target's PromQL, Grafana's variables expanded, by panel and refId."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries: dict[str, str] = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"{panel['title']}: a variable the test does not know"
            queries[f"{panel['title']} ({target['refId']})"] = expr
    return queries


def alert_expressions() -> list[str]:
    """The rules file's `expr:` lines (each expression is one line)."""
    text = RULES.read_text()
    exprs = re.findall(r"^\s+expr: (.+)$", text, re.M)
    assert len(exprs) == len(re.findall(r"^\s+- alert: ", text, re.M))
    return exprs


def rules_with_short_for(directory: Path) -> Path:
    """The shipped rules with every `for:` shortened, nothing else changed."""
    text = RULES.read_text()
    short, replaced = re.subn(r"^(\s+)for: \S+$", rf"\g<1>for: {SHORT_FOR}", text,
                              flags=re.M)
    assert replaced and replaced == len(re.findall(r"^\s+for:", text, re.M))
    path = directory / RULES.name
    path.write_text(short)
    return path


def test_promtool_checks_the_rules_and_runs_their_unit_test() -> None:
    check = prometheus.promtool("check", "rules", RULES)
    assert check.returncode == 0, check.stdout
    unit = prometheus.promtool("test", "rules", RULES_TEST)
    assert unit.returncode == 0, unit.stdout


def test_dashboard_imports_into_any_grafana() -> None:
    """No data source of one Grafana: every panel and query names the `datasource`
    variable (Prometheus); panels have their own ids and places on the grid."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    source = {"type": "prometheus", "uid": "${datasource}"}
    cells: set[tuple[int, int]] = set()
    ids: set[int] = set()
    for panel in dashboard["panels"]:
        assert panel["id"] not in ids, panel["title"]
        ids.add(panel["id"])
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] != "row":
            assert panel["datasource"] == source, panel["title"]
            assert panel["targets"], panel["title"]
            assert all(t["datasource"] == source for t in panel["targets"]), panel["title"]
    for name in ("job", "instance"):
        assert variables[name]["datasource"] == source


class Load:
    """A producer writing to the topic's two partitions, about 250 records a second,
    and a consumer group reading them at most twice as fast, each in its own thread."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._producing = threading.Event()
        self._consuming = threading.Event()
        self.produced = 0
        self._producer = threading.Thread(target=self._produce, daemon=True)
        self._consumer = threading.Thread(target=self._consume, daemon=True)

    def start_producer(self) -> None:
        self._producing.set()
        self._producer.start()

    def start_consumer(self) -> None:
        self._consuming.set()
        self._consumer.start()

    def stop_consumer(self) -> None:
        self._consuming.clear()
        if self._consumer.ident is not None:
            self._consumer.join(30)

    def stop(self) -> None:
        self._producing.clear()
        self.stop_consumer()
        if self._producer.ident is not None:
            self._producer.join(30)

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self._bootstrap, "linger.ms": 5})
        while self._producing.is_set():
            producer.produce(TOPIC, b"x" * 200)
            self.produced += 1
            producer.poll(0)
            time.sleep(0.004)
        producer.flush(10)

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self._bootstrap, "group.id": GROUP,
                             "auto.offset.reset": "earliest",
                             "auto.commit.interval.ms": 200})
        consumer.subscribe([TOPIC])
        try:
            while self._consuming.is_set():
                consumer.consume(25, 0.1)
                time.sleep(0.05)  # a backlog takes seconds to catch up with
        finally:
            consumer.close()  # the group is left Empty, its offsets kept


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    broker = broker_factory({"metrics.port": 0})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # flush.messages: fsyncs while producing, for the flush latency panel.
    admin.create_topics([NewTopic(TOPIC, 2, 1, config={"flush.messages": "50"})])[
        TOPIC].result(10)
    return broker


@pytest.fixture
def load(broker: EmbeddedBroker) -> Iterator[Load]:
    running = Load(broker.bootstrap)
    yield running
    running.stop()


def refuse_a_tls_client(bootstrap: str) -> None:
    """A TLS handshake on the PLAINTEXT listener: a rejected connection
    (tls_on_plaintext), for the connections-rejected panel."""
    host, port = bootstrap.rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (socket.create_connection((host, int(port)), timeout=10) as raw,
          pytest.raises(OSError)):
        context.wrap_socket(raw, server_hostname=host)


def has_data(result: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(r["value"][1])) for r in result)


def wait_for(what: str, condition: Callable[[], Any], timeout: float,
             diagnose: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s. {diagnose()}", pytrace=False)
        time.sleep(0.5)
    return result


def lag_alert_states(prom: Prometheus) -> set[str]:
    return {a["state"] for a in prom.alerts()
            if a["labels"].get("alertname") == LAG_ALERT
            and a["labels"].get("group") == GROUP}


def group_lag(prom: Prometheus) -> float | None:
    result = prom.query(f'kafkernel_group_consumer_lag_sum{{group="{GROUP}"}}')
    return float(result[0]["value"][1]) if result else None


def test_dashboard_and_alerts_on_a_real_prometheus(broker: EmbeddedBroker, load: Load,
                                                   tmp_path: Path) -> None:
    assert broker.broker is not None and broker.broker.metrics_port
    rules = rules_with_short_for(tmp_path)
    check = prometheus.promtool("check", "rules", rules)
    assert check.returncode == 0, check.stdout
    queries = panel_queries()
    expressions = alert_expressions()
    with prometheus.start([f"127.0.0.1:{broker.broker.metrics_port}"], [rules]) as prom:
        # A backlog first, then a group that catches up with it while the producer goes
        # on: its lag falls, then stays low, and the lag alert stays quiet.
        load.start_producer()
        wait_for("a backlog", lambda: load.produced >= 1500, 30)
        load.start_consumer()
        refuse_a_tls_client(broker.bootstrap)

        # Every panel shows data once a few scrapes are in (rates need two). The error
        # codes panel has the group's first JoinGroup (MEMBER_ID_REQUIRED, KIP-394).
        def lacking() -> list[str]:
            return [name for name, expr in queries.items() if not has_data(prom.query(expr))]

        wait_for("every panel's query to return data", lambda: not lacking(), 60,
                 lambda: f"No data: {lacking()}")

        # Every rule loaded (as many as the file has) and evaluated without error, and
        # each expression as shipped is a query Prometheus answers.
        def evaluated() -> list[dict[str, Any]]:
            rules = prom.rules()
            return rules if rules and all(r["health"] == "ok" for r in rules) else []

        loaded = wait_for("the rules to be evaluated", evaluated, 30,
                          lambda: f"Rules: {prom.rules()}")
        assert sorted(r["type"] for r in loaded) == ["alerting"] * len(expressions)
        for expr in expressions:
            prom.query(expr)  # raises QueryError if Prometheus refuses it

        wait_for("the group to catch up", lambda: (group_lag(prom) or 1e9) < 300, 60,
                 lambda: f"lag: {group_lag(prom)}")
        time.sleep(3)  # longer than the shortened `for:`
        assert not lag_alert_states(prom), prom.alerts()

        # The group stops; the producer goes on.
        load.stop_consumer()
        wait_for(f"{LAG_ALERT} to fire for {GROUP}",
                 lambda: "firing" in lag_alert_states(prom), 90,
                 lambda: f"Alerts: {prom.alerts()}; lag: {group_lag(prom)}")
        # Nothing else is wrong with this broker. (The disk alerts depend on the
        # machine's /tmp: a few seconds of writes there can predict a full volume.)
        assert not {a["labels"]["alertname"] for a in prom.alerts()} & HEALTHY_BROKER_QUIET
