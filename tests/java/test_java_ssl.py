"""Kafka's Java client over SSL, with PEM stores (KIP-651) on both sides: the console
producer and consumer present a client certificate to a listener that requires one, and
the broker names the session by the certificate's subject as Kafka's principal builder
does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kernel.testing.embedded import EmbeddedBroker
from kernel.testing.pki import CLIENT_SUBJECT, make_pki
from reference import tools
from tests.plugin_fixtures.tls_plugins import PrincipalRecorder


def test_java_console_producer_and_consumer_over_ssl_with_a_client_certificate(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    pki = make_pki(tmp_path / "pki")
    b = broker_factory({
        "listeners": ["SSL://127.0.0.1:0"], "security.inter.broker.protocol": "SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("server"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca"),
        "ssl.client.auth": "required",
    }, plugins=["metadata_kraft", "coordinator", "txn", PrincipalRecorder.NAME])
    ssl_settings = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.path("ca"),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": pki.path("client"),
    }
    produced = tools.run(
        tools.CONSOLE_PRODUCER, "--bootstrap-server", b.bootstrap, "--topic", "java-ssl",
        *[a for k, v in ssl_settings.items() for a in ("--command-property", f"{k}={v}")],
        stdin="first\nsecond\n")
    assert produced.returncode == 0, produced.describe()
    consumed = tools.run(
        tools.CONSOLE_CONSUMER, "--bootstrap-server", b.bootstrap, "--topic", "java-ssl",
        "--from-beginning", "--max-messages", "2", "--timeout-ms", "20000",
        *[a for k, v in ssl_settings.items() for a in ("--command-property", f"{k}={v}")])
    assert consumed.returncode == 0, consumed.describe()
    assert consumed.stdout.splitlines() == ["first", "second"]
    assert b.broker is not None
    recorder = b.broker.plugins.pm.get_plugin(PrincipalRecorder.NAME)
    assert recorder.principals() == {f"User:{CLIENT_SUBJECT}"}
