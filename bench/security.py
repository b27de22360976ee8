"""Produce and consume throughput over SASL_SSL with SCRAM-SHA-256, Kafkernel against
Apache Kafka configured the same way, in one run (issue 15's security benchmark).

    .venv/bin/python -m bench.security [--records N] [--runs N] [--size BYTES]

Both brokers get one SASL_SSL listener with the same PEM certificate (made here), PLAIN
for the admin and SCRAM-SHA-256 for the benchmark's user (created through
AlterUserScramCredentials by the admin, on both); Kafka runs its StandardAuthorizer
with the admin and the user as super users, Kafkernel no authorizer (an authorizer
that admits everyone costs Kafka nothing measurable either). confluent-kafka produces
``records`` records of ``size`` bytes (acks=all) and consumes them back, each broker in
turn, ``runs`` times; the table gives medians and Kafkernel/Kafka ratios.

The consumer gets bench.run's consumer settings (``ClientSettings.consumer_properties``).
With librdkafka's defaults it stops fetching for fetch.queue.backoff.ms (1 s) each time
its prefetch queue passes queued.min.messages (100,000), which a broker that delivers
faster than the Python consumer drains reaches every ~200,000 records: the figure then
counted those pauses, not the broker. ``--consumer-defaults`` measures that way.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from bench.brokers import kafkernel_executable
from bench.clients import consume_confluent, produce_confluent
from bench.settings import ClientSettings
from kernel.testing.pki import Pki, make_pki
from reference import kafka as reference_kafka

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
USER, PASSWORD = "bench", "bench-secret"
TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client_properties(pki: Pki, mechanism: str, user: str, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": pki.path("ca")}


@contextmanager
def kafka(pki: Pki) -> Iterator[str]:
    broker = reference_kafka.start(
        sasl_users={ADMIN: ADMIN_PASSWORD}, tls=(pki.path("server"), pki.path("ca")),
        overrides={"super.users": f"User:{ADMIN};User:{USER};User:ANONYMOUS"})
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@contextmanager
def kafkernel(pki: Pki) -> Iterator[str]:
    work = Path(tempfile.mkdtemp(prefix="kafkernel-bench-security-"))
    port = _free_port()
    config = work / "kafkernel.toml"
    config.write_text("\n".join([
        f'listeners = ["SASL_SSL://127.0.0.1:{port}"]',
        'inter.broker.listener.name = "SASL_SSL"',
        f"log.dirs = [{json.dumps(str(work / 'data'))}]",
        '"ssl.keystore.type" = "PEM"',
        f'"ssl.keystore.location" = {json.dumps(pki.path("server"))}',
        '"ssl.truststore.type" = "PEM"',
        f'"ssl.truststore.location" = {json.dumps(pki.path("ca"))}',
        "metrics.port = -1",
        "[plugins]",
        'enabled = ["metadata_kraft", "coordinator", "txn", "auth_sasl"]',
        "[plugins.coordinator]",
        '"group.initial.rebalance.delay.ms" = 0',
        "[plugins.auth_sasl]",
        f'"plain.users" = ["{ADMIN}:{ADMIN_PASSWORD}"]',
        "",
    ]))
    with open(work / "broker.log", "wb") as log:
        proc = subprocess.Popen([kafkernel_executable(), "serve", "--config", str(config)],
                                stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not reference_kafka.answers_api_versions(bootstrap, tls=True):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kafkernel did not start: "
                                   + (work / "broker.log").read_text()[-2000:])
            time.sleep(0.1)
        yield bootstrap
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


def prepare(bootstrap: str, pki: Pki, topic: str) -> None:
    """The SCRAM user, created by the admin over PLAIN, and the topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap,
                         **client_properties(pki, "PLAIN", ADMIN, ADMIN_PASSWORD)})
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    time.sleep(1.0)  # Kafka applies the credential from its metadata log


def measure(bootstrap: str, pki: Pki, topic: str, records: int, size: int,
            consumer_properties: dict[str, str]) -> dict[str, float]:
    scram = client_properties(pki, "SCRAM-SHA-256", USER, PASSWORD)
    produced = produce_confluent(bootstrap, topic, b"x" * size, records,
                                 {**scram, "acks": "all", "linger.ms": "5"}, TIMEOUT_S)
    if produced.error or produced.records != records:
        raise RuntimeError(f"produce failed: {produced.error} ({produced.records} records)")
    consumed = consume_confluent(bootstrap, topic, 1, records,
                                 {**scram, **consumer_properties}, TIMEOUT_S)
    if consumed.error or consumed.records != records:
        raise RuntimeError(f"consume failed: {consumed.error} ({consumed.records} records)")
    return {"produce": records / produced.seconds, "consume": records / consumed.seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--consumer-defaults", action="store_true",
                        help="consume with librdkafka's defaults, not bench.run's settings")
    args = parser.parse_args(argv)
    consumer = {} if args.consumer_defaults else ClientSettings().consumer_properties()
    work = Path(tempfile.mkdtemp(prefix="bench-security-pki-"))
    pki = make_pki(work)
    figures: dict[str, dict[str, list[float]]] = {}
    brokers: dict[str, Callable[[Pki], Any]] = {"kafka": kafka, "kafkernel": kafkernel}
    for name, start in brokers.items():
        with start(pki) as bootstrap:
            for run in range(args.runs):
                topic = f"bench-sasl-ssl-{run}"
                if run == 0:
                    prepare(bootstrap, pki, topic)
                else:
                    _topic(bootstrap, pki, topic)
                result = measure(bootstrap, pki, topic, args.records, args.size, consumer)
                for k, v in result.items():
                    figures.setdefault(name, {}).setdefault(k, []).append(v)
                print(f"{name} run {run + 1}: " + ", ".join(
                    f"{k} {v:,.0f} rec/s" for k, v in result.items()), file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    print(f"SASL_SSL SCRAM-SHA-256, confluent-kafka, {args.records:,} x {args.size} B, "
          f"median of {args.runs}; consumer: "
          + (", ".join(f"{k}={v}" for k, v in consumer.items()) or "librdkafka's defaults"))
    print("| workload | Kafka rec/s | Kafkernel rec/s | ratio |")
    print("|---|---|---|---|")
    for workload in ("produce", "consume"):
        k = statistics.median(figures["kafka"][workload])
        n = statistics.median(figures["kafkernel"][workload])
        print(f"| {workload} | {k:,.0f} | {n:,.0f} | {n / k:.2f} |")
    return 0


def _topic(bootstrap: str, pki: Pki, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap,
                         **client_properties(pki, "PLAIN", ADMIN, ADMIN_PASSWORD)})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
