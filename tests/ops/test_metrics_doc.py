"""ops/README.md's metric tables tell the truth: every metric a broker exposes with every
shipped plugin is listed with its type and labels, every listed one exists (or says when
it is absent), and the dashboard and alert rules name only listed metrics."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kernel.testing.embedded import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "ops" / "README.md"
DASHBOARD = ROOT / "ops" / "grafana" / "kafkernel-dashboard.json"
RULES = ROOT / "ops" / "prometheus" / "kafkernel-alerts.yml"
EVERY_PLUGIN = ("metadata_kraft", "coordinator", "txn", "auth_sasl", "acl", "spark_sink")
# A histogram's series: its name with these suffixes.
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def documented() -> dict[str, tuple[str, frozenset[str], str]]:
    """Metric name -> (type, labels, meaning), from the page's tables."""
    rows = re.findall(r"^\| `(kafkernel_\w+)` \| (\w+) \|([^|]*)\|([^|]*)\|$",
                      PAGE.read_text(), re.M)
    table: dict[str, tuple[str, frozenset[str], str]] = {}
    for name, kind, labels, meaning in rows:
        assert name not in table, f"{name} is listed twice"
        table[name] = (kind, frozenset(re.findall(r"`(\w+)`", labels)), meaning)
    return table


def test_every_metric_a_broker_exposes_is_documented(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    b = broker_factory({"metrics.port": 0}, plugins=EVERY_PLUGIN, plugin_settings={
        "acl": {"allow.everyone.if.no.acl.found": True}})
    assert b.broker is not None
    # Some traffic, so labelled metrics have samples whose labels can be compared.
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("doc", 1, 1)])["doc"].result(10)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    producer.produce("doc", b"x")
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "doc"})
    consumer.commit(offsets=[TopicPartition("doc", 0, 0)], asynchronous=False)
    consumer.close()

    table = documented()
    exposed: set[str] = set()
    for family in b.broker.metrics.registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        exposed.add(name)
        assert name in table, f"ops/README.md does not list {name} ({family.documentation})"
        kind, labels, _ = table[name]
        assert kind == family.type, f"{name} is a {family.type}, listed as a {kind}"
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            assert set(s.labels) - {"le"} == labels, f"{name}: labels {sorted(s.labels)}"
    # Listed but not exposed: only what the page says is absent at times.
    for name in table.keys() - exposed:
        assert "absent" in table[name][2], f"{name} is listed but the broker lacks it"


def test_dashboard_and_rules_name_only_documented_metrics() -> None:
    table = documented()
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"]
             for t in p.get("targets", [])]
    exprs += re.findall(r"^\s+expr: (.+)$", RULES.read_text(), re.M)
    assert exprs
    for expr in exprs:
        for series in re.findall(r"\bkafkernel_\w+", expr):
            name = series
            for suffix in HISTOGRAM_SERIES:
                base = series.removesuffix(suffix)
                if base != series and table.get(base, ("",))[0] == "histogram":
                    name = base
            assert name in table, f"{series} in {expr!r} is not in ops/README.md"
            if table[name][0] == "histogram":
                assert name != series, f"{expr!r}: a histogram is read by its series"
