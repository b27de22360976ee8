"""Client quotas on metadata_zk: AlterClientQuotas writes Kafka 3.x's /config znodes
(users, clients, users/<user>/clients, ips; "<default>" for defaults; a user's SCRAM
credential kept beside its quotas) with change notifications, and they survive a
restart."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from kernel.cluster import ScramCredential
from kernel.testing.embedded import EmbeddedBroker
from plugins.metadata_zk.znodes import scram_to_config
from tests.reference.test_conformance_quotas import ANY, CLIENT, IP, USER, alter, describe


def _config(kazoo: KazooClient, path: str) -> dict[str, Any]:
    data, _ = kazoo.get(path)
    return dict(json.loads(data)["config"])


def test_quotas_are_kafkas_znodes_and_survive_a_restart(
        zk_broker_factory: Callable[..., EmbeddedBroker], kazoo: KazooClient) -> None:
    b = zk_broker_factory()
    # A SCRAM credential Kafka's tools left on the user's znode stays beside its quotas.
    credential = ScramCredential("alice smith", 1, b"salt", b"stored", b"server", 4096)
    kazoo.create("/config/users/alice%20smith", json.dumps(
        {"version": 1, "config": {"SCRAM-SHA-256": scram_to_config(credential)}}).encode(),
                 makepath=True)
    deadline = time.monotonic() + 10
    while ("alice smith", 1) not in b.broker.metadata.scram_credentials():
        assert time.monotonic() < deadline, "the broker never saw the user's znode"
        time.sleep(0.05)
    entries: list[Any] = [
        ([(USER, "alice smith")], [("producer_byte_rate", 1024.0)]),
        ([(CLIENT, "c1")], [("consumer_byte_rate", 2048.0), ("request_percentage", 12.5)]),
        ([(USER, "alice smith"), (CLIENT, "c1")], [("controller_mutation_rate", 3.0)]),
        ([(USER, None), (CLIENT, None)], [("producer_byte_rate", 300.0)]),
        ([(IP, "10.1.2.3")], [("connection_creation_rate", 10.0)]),
    ]
    answers = alter(b.bootstrap, entries)
    assert [a[1] for a in answers] == [ErrorCode.none] * len(entries)
    user = _config(kazoo, "/config/users/alice%20smith")
    assert user["producer_byte_rate"] == "1024" and user["SCRAM-SHA-256"].startswith("salt=")
    assert _config(kazoo, "/config/clients/c1") == {
        "consumer_byte_rate": "2048", "request_percentage": "12.5"}
    assert _config(kazoo, "/config/users/alice%20smith/clients/c1") == {
        "controller_mutation_rate": "3.0"}
    assert _config(kazoo, "/config/users/<default>/clients/<default>") == {
        "producer_byte_rate": "300"}
    assert _config(kazoo, "/config/ips/10.1.2.3") == {"connection_creation_rate": "10"}
    changes = [json.loads(kazoo.get(f"/config/changes/{c}")[0])["entity_path"]
               for c in kazoo.get_children("/config/changes")]
    assert "users/alice%20smith/clients/c1" in changes and "ips/10.1.2.3" in changes

    before = describe(b.bootstrap, [])
    assert len(before[2]) == len(entries)
    b.restart()
    assert describe(b.bootstrap, []) == before
    alter(b.bootstrap, [([(USER, "alice smith")], [("producer_byte_rate", None)])])
    assert _config(kazoo, "/config/users/alice%20smith").keys() == {"SCRAM-SHA-256"}
    assert describe(b.bootstrap, [(USER, ANY, None)], strict=True)[2] == []
