"""KRaft's settings, with Kafka 4.3.1's names, defaults and checks (``QuorumConfig``,
``KRaftConfigs``, ``MetadataLogConfig``), and Kafka's checks across them
(``KafkaConfig.validateValues``).

``BrokerConfig`` inherits them. The metadata plugins read them through
``kernel.api.config``; the kernel itself acts only on ``process.roles`` and
``controller.listener.names`` (each listener's role, kernel/routing.py)."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from kernel.config.schema import (
    ConfigProblem,
    all_of,
    at_least,
    int_at_least,
    setting,
)

ROLES = ("broker", "controller")
# Kafka's Utils.HOST_PORT_PATTERN: a host (an IPv6 address in brackets) and a port.
HOST_PORT = re.compile(r"^\[?([0-9a-zA-Z\-%._:]*)\]?:([0-9]+)$")
# KafkaRaftClient's size of a metadata log segment at the least (8 MiB).
MIN_METADATA_SEGMENT_BYTES = 8 * 1024 * 1024


def parse_voters(items: list[str]) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters``: ``{id}@{host}:{port}`` entries -> id -> (host,
    port), as Kafka's QuorumConfig.parseVoterConnections; ValueError says what is
    wrong in Kafka's words."""
    voters: dict[int, tuple[str, int]] = {}
    for item in items:
        parts = item.split("@")
        if len(parts) != 2:
            raise ValueError(f"{item!r} has no single @")
        id_s, address = parts
        try:
            voter_id = int(id_s)
        except ValueError:
            raise ValueError(f"voter id {id_s!r} of {item!r} is not an integer") from None
        match = HOST_PORT.match(address)
        if match is None or not match.group(1):
            raise ValueError(f"no host:port after the @ of {item!r}")
        if voter_id in voters:
            raise ValueError(f"voter id {voter_id} is named twice")
        voters[voter_id] = (match.group(1), int(match.group(2)))
    return voters


def _voters(items: list[str]) -> str | None:
    try:
        parse_voters(items)
    except ValueError as e:
        return f"{{id}}@{{host}}:{{port}} entries ({e})"
    return None


def _bootstrap_servers(items: list[str]) -> str | None:
    for item in items:
        match = HOST_PORT.match(item)
        if match is None or not match.group(1):
            return f"{{host}}:{{port}} entries ({item!r} is not one)"
    return None


@dataclass(frozen=True, slots=True)
class KRaftConfig:
    """The KRaft settings of a node; the broker's settings (``BrokerConfig``) add the
    rest."""

    process_roles: list[str] = setting(
        "process.roles", [],
        "The roles of this node: broker, controller, or both (broker,controller). Empty, "
        "Kafkernel's default, is one node that is both, the only voter of its own "
        "metadata log, with no controller listener (Kafka requires the setting). "
        "controller alone runs a voter of a static quorum (controller.quorum.voters) "
        "with no broker duties yet; broker alone, or broker,controller among other "
        "voters, is refused at start-up until the KRaft plugin supports it.",
        check=all_of(*ROLES),
    )
    node_id: int = setting(
        "node.id", 1,
        "This node's id, as a broker and as a voter; broker.id is its synonym (set one, "
        "or both to the same value). Required when process.roles is set.",
        check=int_at_least(0),
    )
    controller_listener_names: list[str] = setting(
        "controller.listener.names", [],
        "The listeners of the controller (their role is controller: they serve the "
        "controller's APIs and are not advertised to clients as the broker's); a node "
        "that is only a broker uses the first to reach the quorum. Required when "
        "process.roles is set.",
    )
    controller_quorum_voters: list[str] = setting(
        "controller.quorum.voters", [],
        "The static voters of the quorum as {id}@{host}:{port} entries "
        "(1@localhost:9093,2@localhost:9094); a dynamic quorum sets "
        "controller.quorum.bootstrap.servers instead.", check=_voters,
    )
    controller_quorum_bootstrap_servers: list[str] = setting(
        "controller.quorum.bootstrap.servers", [],
        "{host}:{port} entries of controllers to discover the quorum from (a dynamic "
        "quorum, KIP-853).", check=_bootstrap_servers,
    )
    controller_quorum_election_timeout_ms: int = setting(
        "controller.quorum.election.timeout.ms", 1000,
        "Longest time without a leader to fetch from before a voter starts an election.",
        check=int_at_least(0),
    )
    controller_quorum_fetch_timeout_ms: int = setting(
        "controller.quorum.fetch.timeout.ms", 2000,
        "Longest time a voter goes without a successful fetch from the leader before it "
        "becomes a candidate; a leader without fetches from a majority this long resigns.",
        check=int_at_least(0),
    )
    controller_quorum_election_backoff_max_ms: int = setting(
        "controller.quorum.election.backoff.max.ms", 1000,
        "Cap of the exponential backoff between elections (it keeps elections from "
        "gridlocking).", check=int_at_least(0),
    )
    controller_quorum_request_timeout_ms: int = setting(
        "controller.quorum.request.timeout.ms", 2000,
        "How long a quorum request waits for its answer before it is sent again or fails.",
        check=int_at_least(0),
    )
    controller_quorum_retry_backoff_ms: int = setting(
        "controller.quorum.retry.backoff.ms", 20,
        "Wait before a failed quorum request is retried.", check=int_at_least(0),
    )
    controller_quorum_append_linger_ms: int = setting(
        "controller.quorum.append.linger.ms", 25,
        "How long the leader lets writes gather before it flushes them to disk.",
        check=int_at_least(0),
    )
    controller_quorum_fetch_max_bytes: int = setting(
        "controller.quorum.fetch.max.bytes", 1048576,
        "Most bytes of one Fetch of the metadata log (at least one batch comes whole).",
        check=int_at_least(1),
    )
    controller_quorum_fetch_snapshot_max_bytes: int = setting(
        "controller.quorum.fetch.snapshot.max.bytes", 1048576,
        "Most bytes of one FetchSnapshot.", check=int_at_least(1),
    )
    controller_quorum_auto_join_enable: bool = setting(
        "controller.quorum.auto.join.enable", False,
        "A controller adds itself to the voters of a dynamic quorum (KIP-853).",
    )
    broker_heartbeat_interval_ms: int = setting(
        "broker.heartbeat.interval.ms", 2000,
        "Time between a broker's heartbeats to the active controller.",
        check=int_at_least(1),
    )
    broker_session_timeout_ms: int = setting(
        "broker.session.timeout.ms", 9000,
        "A broker without a heartbeat for this long is fenced by the controller.",
        check=int_at_least(1),
    )
    initial_broker_registration_timeout_ms: int = setting(
        "initial.broker.registration.timeout.ms", 60000,
        "How long a starting broker tries to register with the quorum before it exits.",
        check=int_at_least(1),
    )
    metadata_log_dir: str | None = setting(
        "metadata.log.dir", None,
        "Directory of the metadata log (__cluster_metadata-0); null: the first of "
        "log.dirs. (plugins.metadata_kraft.metadata.log.dir is its deprecated synonym.)",
    )
    metadata_log_segment_bytes: int = setting(
        "metadata.log.segment.bytes", 1073741824,
        "Largest file of the metadata log.", check=int_at_least(MIN_METADATA_SEGMENT_BYTES),
    )
    metadata_log_segment_ms: int = setting(
        "metadata.log.segment.ms", 604800000,
        "Longest time before a new metadata log file is rolled.", check=at_least(1),
    )
    metadata_max_retention_bytes: int = setting(
        "metadata.max.retention.bytes", 104857600,
        "Most bytes of metadata log and snapshots kept before old ones are deleted (a "
        "soft limit: a snapshot must exist before any log is deleted); -1: no limit.",
        check=at_least(-1),
    )
    metadata_max_retention_ms: int = setting(
        "metadata.max.retention.ms", 604800000,
        "How long a metadata log file or snapshot is kept (a soft limit, as the bytes "
        "one); -1: no limit.", check=at_least(-1),
    )
    metadata_log_max_record_bytes_between_snapshots: int = setting(
        "metadata.log.max.record.bytes.between.snapshots", 20971520,
        "Bytes of metadata log after the latest snapshot that make a new snapshot.",
        check=at_least(1),
    )
    metadata_log_max_snapshot_interval_ms: int = setting(
        "metadata.log.max.snapshot.interval.ms", 3600000,
        "Longest time committed records wait for a snapshot to include them; 0 turns "
        "the time trigger off.", check=at_least(0),
    )
    metadata_max_idle_interval_ms: int = setting(
        "metadata.max.idle.interval.ms", 500,
        "How often an idle active controller writes a no-op record to the metadata log "
        "(so observers see the high watermark move); 0: never.", check=int_at_least(0),
    )
    sasl_mechanism_controller_protocol: str = setting(
        "sasl.mechanism.controller.protocol", "GSSAPI",
        "The SASL mechanism used to reach the controllers on a SASL controller listener: "
        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default, GSSAPI, is not "
        "supported).",
    )


def controller_listeners(cfg: Any) -> frozenset[str]:
    """The names (upper case, as listeners are named) of the controller listeners."""
    return frozenset(n.strip().upper() for n in cfg.controller_listener_names)


def check_roles(cfg: Any, explicit: Collection[str], source: str) -> list[ConfigProblem]:
    """Kafka's checks of the KRaft settings against each other and the listeners
    (``KafkaConfig.validateValues``), each one line naming the key, in the substance of
    Kafka's message. ``explicit``: the keys the file or overrides set."""
    problems: list[ConfigProblem] = []

    def problem(key: str, text: str) -> None:
        problems.append(ConfigProblem(f"{source}: {key}: {text}", key))

    roles = set(cfg.process_roles)
    controllers = controller_listeners(cfg)
    names = [item.partition("://")[0].strip().upper() for item in cfg.listeners]
    voters = parse_voters(cfg.controller_quorum_voters)
    if "node.id" in explicit and "broker.id" in explicit and cfg.node_id != cfg.broker_id:
        problem("node.id", f"must be the same value as broker.id ({cfg.node_id} and "
                           f"{cfg.broker_id}); broker.id is its synonym")
    if not roles:
        if controllers:
            problem("controller.listener.names", "must be empty when process.roles is "
                    "unset; a controller listener needs process.roles=broker,controller")
        for key in ("controller.quorum.voters", "controller.quorum.bootstrap.servers"):
            if key in explicit and getattr(cfg, key.replace(".", "_")):
                problem(key, "needs process.roles (broker, controller or both)")
        return problems
    if "node.id" not in explicit and "broker.id" not in explicit:
        problem("node.id", "required when process.roles is set (KRaft mode)")
    if not controllers:
        problem("controller.listener.names", "required when process.roles is set")
    if not voters and not cfg.controller_quorum_bootstrap_servers:
        problem("controller.quorum.voters", "with process.roles set, either "
                "controller.quorum.bootstrap.servers must name the bootstrap controllers "
                "or controller.quorum.voters must name the voters")
    node = cfg.node_id
    if roles == {"broker"}:
        if node in voters:
            problem("controller.quorum.voters", f"with process.roles=broker only, node id "
                    f"{node} must not be one of the voters ({sorted(voters)})")
        inside = sorted(controllers & set(names))
        if inside:
            problem("controller.listener.names", f"{', '.join(inside)} must not be in "
                    "listeners when process.roles=broker only (the controllers listen there)")
        mapped = {p.partition(":")[0].strip().upper() for p in cfg.listener_security_protocol_map}
        unmapped = sorted(controllers - mapped)
        if unmapped:
            problem("controller.listener.names", f"controller listener {unmapped[0]} has no "
                    "entry in listener.security.protocol.map")
    if "controller" in roles:
        if voters and node not in voters:
            problem("controller.quorum.voters", f"with the controller role, node id {node} "
                    f"must be one of the voters ({sorted(voters)})")
        missing = sorted(controllers - set(names))
        if controllers and missing:
            problem("controller.listener.names", f"{', '.join(missing)} must be in listeners "
                    f"({', '.join(names)}) with the controller role")
        if roles == {"controller"}:
            others = [n for n in names if n not in controllers]
            if others:
                problem("listeners", "with process.roles=controller only, listeners must be "
                        f"controller listeners ({', '.join(others)} is not in "
                        "controller.listener.names)")
    if "broker" in roles and controllers and not [n for n in names if n not in controllers]:
        problem("listeners", "there must be at least one broker listener; all of them "
                "are in controller.listener.names")
    return problems
