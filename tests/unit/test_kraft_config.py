"""KRaft's settings (kernel/config/kraft.py): Kafka 4.3.1's names and defaults, and
Kafka's checks across them, each refused in one line naming the key; the metadata_kraft
plugin's refusal of what it cannot run yet."""

from __future__ import annotations

from typing import Any

import pytest

from kernel.config import BrokerConfig, ConfigError, load_config, schema_keys
from plugins.metadata_kraft import MetadataKraftPlugin

# A combined node, the only voter, as Kafka's reference harness configures one.
COMBINED = {
    "process.roles": "broker,controller",
    "node.id": 1,
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093",
}
BROKER_ONLY = {
    "process.roles": "broker",
    "node.id": 4,
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "controller.quorum.voters": "1@c1:9093,2@c2:9093,3@c3:9093",
}


def problem(settings: dict[str, Any], **changes: Any) -> str:
    """The one line a config gets, with ``changes`` (None removes a key)."""
    values = {**settings, **{k.replace("_", "."): v for k, v in changes.items()}}
    with pytest.raises(ConfigError) as e:
        load_config(None, extra={k: v for k, v in values.items() if v is not None})
    lines = str(e.value).splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_kafka_4_3_1_defaults() -> None:
    # Read from 4.3.1's KafkaConfig.configDef() (kafka_2.13-4.3.1.jar).
    expected = {
        "process.roles": [], "controller.listener.names": [],
        "controller.quorum.voters": [], "controller.quorum.bootstrap.servers": [],
        "controller.quorum.election.timeout.ms": 1000,
        "controller.quorum.fetch.timeout.ms": 2000,
        "controller.quorum.election.backoff.max.ms": 1000,
        "controller.quorum.request.timeout.ms": 2000,
        "controller.quorum.retry.backoff.ms": 20, "controller.quorum.append.linger.ms": 25,
        "controller.quorum.fetch.max.bytes": 1048576,
        "controller.quorum.fetch.snapshot.max.bytes": 1048576,
        "controller.quorum.auto.join.enable": False,
        "broker.heartbeat.interval.ms": 2000, "broker.session.timeout.ms": 9000,
        "initial.broker.registration.timeout.ms": 60000, "metadata.log.dir": None,
        "metadata.log.segment.bytes": 1073741824, "metadata.log.segment.ms": 604800000,
        "metadata.max.retention.bytes": 104857600, "metadata.max.retention.ms": 604800000,
        "metadata.log.max.record.bytes.between.snapshots": 20971520,
        "metadata.log.max.snapshot.interval.ms": 3600000,
        "metadata.max.idle.interval.ms": 500, "sasl.mechanism.controller.protocol": "GSSAPI",
    }
    keys = schema_keys(BrokerConfig)
    assert {name: keys[name].default for name in expected} == expected


def test_node_id_and_broker_id_are_synonyms() -> None:
    assert load_config(None, extra={"node.id": 3}).broker.broker_id == 3
    assert load_config(None, extra={"broker.id": 5}).broker.node_id == 5
    both = load_config(None, extra={"broker.id": 6, "node.id": 6}).broker
    assert (both.node_id, both.broker_id) == (6, 6)
    assert problem({"node.id": 1, "broker.id": 2}) == \
        "<defaults>: node.id: must be the same value as broker.id (1 and 2); broker.id " \
        "is its synonym"


def test_a_combined_single_voter_and_a_broker_only_node_are_accepted() -> None:
    combined = load_config(None, extra=COMBINED).broker
    assert combined.process_roles == ["broker", "controller"]
    assert combined.controller_quorum_voters == ["1@127.0.0.1:9093"]
    broker = load_config(None, extra=BROKER_ONLY).broker
    assert (broker.node_id, broker.broker_id) == (4, 4)
    # Kafka 4.3.1 takes both (the voters static, the bootstrap servers to discover).
    load_config(None, extra={**COMBINED,
                             "controller.quorum.bootstrap.servers": "127.0.0.1:9093"})


@pytest.mark.parametrize(("settings", "changes", "key", "says"), [
    (COMBINED, {"process_roles": "broker,zookeeper"}, "process.roles",
     "expected a list of broker, controller"),
    (COMBINED, {"controller_quorum_voters": "1@localhost"}, "controller.quorum.voters",
     "no host:port after the @ of '1@localhost'"),
    (COMBINED, {"controller_quorum_voters": "x@localhost:9093"}, "controller.quorum.voters",
     "voter id 'x' of 'x@localhost:9093' is not an integer"),
    (COMBINED, {"controller_quorum_voters": "localhost:9093"}, "controller.quorum.voters",
     "'localhost:9093' has no single @"),
    (COMBINED, {"controller_quorum_voters": "1@h:9093,1@h:9094"}, "controller.quorum.voters",
     "voter id 1 is named twice"),
    (COMBINED, {"controller_quorum_voters": None,
                "controller_quorum_bootstrap_servers": "localhost"},
     "controller.quorum.bootstrap.servers", "{host}:{port} entries ('localhost' is not one)"),
    (COMBINED, {"node_id": None}, "node.id", "required when process.roles is set"),
    (COMBINED, {"controller_listener_names": None}, "controller.listener.names",
     "required when process.roles is set"),
    (COMBINED, {"controller_quorum_voters": None}, "controller.quorum.voters",
     "either controller.quorum.bootstrap.servers must name the bootstrap controllers or "
     "controller.quorum.voters must name the voters"),
    (COMBINED, {"controller_quorum_voters": "2@127.0.0.1:9093"}, "controller.quorum.voters",
     "with the controller role, node id 1 must be one of the voters ([2])"),
    (COMBINED, {"listeners": "PLAINTEXT://127.0.0.1:9092"}, "controller.listener.names",
     "CONTROLLER must be in listeners (PLAINTEXT) with the controller role"),
    (COMBINED, {"listeners": "CONTROLLER://127.0.0.1:9093",
                "inter_broker_listener_name": None}, "listeners",
     "at least one broker listener; all of them are in controller.listener.names"),
    (COMBINED, {"process_roles": "controller"}, "listeners",
     "with process.roles=controller only, listeners must be controller listeners "
     "(PLAINTEXT is not in controller.listener.names)"),
    (BROKER_ONLY, {"controller_quorum_voters": "4@c1:9093"}, "controller.quorum.voters",
     "with process.roles=broker only, node id 4 must not be one of the voters ([4])"),
    (BROKER_ONLY, {"listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"},
     "controller.listener.names", "CONTROLLER must not be in listeners when "
     "process.roles=broker only"),
    (BROKER_ONLY, {"listener_security_protocol_map": "PLAINTEXT:PLAINTEXT"},
     "controller.listener.names",
     "controller listener CONTROLLER has no entry in listener.security.protocol.map"),
    ({}, {"controller_listener_names": "CONTROLLER"}, "controller.listener.names",
     "must be empty when process.roles is unset"),
    ({}, {"controller_quorum_voters": "1@h:9093"}, "controller.quorum.voters",
     "needs process.roles"),
    (COMBINED, {"metadata_log_segment_bytes": 1048576}, "metadata.log.segment.bytes",
     "a value >= 8388608"),
    (COMBINED, {"controller_quorum_election_timeout_ms": -1},
     "controller.quorum.election.timeout.ms", "a value >= 0"),
])
def test_each_mistake_is_one_line_naming_the_key(
    settings: dict[str, Any], changes: dict[str, Any], key: str, says: str,
) -> None:
    line = problem(settings, **changes)
    assert line.startswith(f"<defaults>: {key}: "), line
    assert says in line, line


def test_controller_listeners_default_to_plaintext_as_kafka() -> None:
    # Kafka's effectiveListenerSecurityProtocolMap: the map unset, no SSL or SASL in use.
    assert "CONTROLLER:PLAINTEXT" in load_config(
        None, extra=COMBINED).broker.listener_security_protocol_map
    tls = {**COMBINED, "listeners": "SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
           "security.inter.broker.protocol": "SSL"}
    assert "CONTROLLER:PLAINTEXT" not in load_config(
        None, extra=tls).broker.listener_security_protocol_map


def test_the_inter_broker_listener_is_not_a_controller_listener() -> None:
    from kernel.network.listener import check_listener_names, parse_endpoints
    cfg = load_config(None, extra={**COMBINED,
                                   "inter.broker.listener.name": "CONTROLLER"}).broker
    endpoints = parse_endpoints(cfg.listeners, cfg.listener_security_protocol_map,
                                "listeners")
    with pytest.raises(ConfigError, match=r"^inter.broker.listener.name: CONTROLLER must be "
                                          r"a listener name defined in listeners \(PLAINTEXT\)"):
        check_listener_names(cfg, endpoints, None)


def configure(settings: dict[str, Any], plugin_log_dir: str | None = None) -> str | None:
    """What metadata_kraft's configure step refuses, None when it takes the config."""
    from plugins.metadata_kraft import KRaftSettings
    config = load_config(None, extra={k: v for k, v in settings.items()
                                      if v is not None}).broker
    try:
        MetadataKraftPlugin().kafkernel_configure(KRaftSettings(plugin_log_dir), config)
    except ConfigError as e:
        return str(e)
    return None


def test_metadata_kraft_refuses_what_one_node_cannot_run() -> None:
    assert configure({}) is None
    assert configure(COMBINED) is None
    multi = configure({**COMBINED, "controller.quorum.voters":
                       "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"})
    assert multi == ("controller.quorum.voters: a quorum of several voters (also [2, 3]) "
                     "is not supported yet on a broker: the metadata_kraft plugin runs a "
                     "quorum of controller-only nodes (process.roles=controller), or one "
                     "node, the only voter")
    # A controller-only voter of a static quorum runs it (tests/integration/test_kraft_quorum).
    assert configure({"process.roles": "controller", "node.id": 1,
                      "listeners": "CONTROLLER://127.0.0.1:9093",
                      "controller.listener.names": "CONTROLLER",
                      "controller.quorum.voters":
                      "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"}) is None
    dynamic = configure({**COMBINED, "controller.quorum.voters": None,
                         "controller.quorum.bootstrap.servers": "127.0.0.1:9093"})
    assert dynamic is not None
    assert dynamic.startswith("controller.quorum.bootstrap.servers: a dynamic quorum is "
                              "not supported yet")
    broker_only = configure(BROKER_ONLY)
    assert broker_only is not None and broker_only.splitlines()[0].startswith(
        "process.roles: broker is not supported yet")


def test_metadata_log_dir_has_kafkas_top_level_name() -> None:
    assert configure({"metadata.log.dir": "meta"}) is None
    assert configure({}, plugin_log_dir="meta") is None  # the deprecated synonym
    assert configure({"metadata.log.dir": "meta"}, plugin_log_dir="meta") is None
    assert configure({"metadata.log.dir": "a"}, plugin_log_dir="b") == (
        "plugins.metadata_kraft.metadata.log.dir: 'b' differs from metadata.log.dir 'a'; "
        "set only metadata.log.dir")
