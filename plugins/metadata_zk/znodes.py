"""Kafka's ZooKeeper layout: the znode paths and their JSON, as Kafka 3.x wrote them
(core's kafka.zk.ZkData), so a ZooKeeper that Kafka's tools or brokers read holds what
they expect. Pure functions; nothing here talks to ZooKeeper.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

from kernel.api.cluster import AclBinding, BrokerEndpoint, BrokerRegistration, ScramCredential

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CLUSTER_ID = "/cluster/id"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGES = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
# Kafka's PreferredReplicaElectionZNode: partitions whose preferred replica a broker (or
# kafka-preferred-replica-election) asked the controller to elect.
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
# Kafkernel's: the same for unclean elections (ElectLeaders with election type 1), which
# Kafka's ZooKeeper-mode brokers handed their controller in memory.
UNCLEAN_LEADER_ELECTION = "/admin/unclean_leader_election"

# The persistent paths Kafka's KafkaZkClient.createTopLevelPaths makes at startup.
PERSISTENT_PATHS = (
    "/consumers", "/admin/delete_topics", "/brokers/ids", "/brokers/topics",
    "/brokers/seqid", "/config/changes", "/config/clients", "/config/brokers",
    "/config/topics", "/config/users", "/config/ips", "/isr_change_notification",
    "/latest_producer_id_block", "/log_dir_event_notification",
)

# Kafka's ConfigEntityName.DEFAULT: the entity name of cluster-wide broker defaults.
DEFAULT_ENTITY = "<default>"
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
SCRAM_MECHANISM_TYPES = {name: t for t, name in SCRAM_MECHANISMS.items()}


class ZnodeFormatError(ValueError):
    """A znode whose content is not Kafka's format: named with its path by the reader."""


def _json(data: Mapping[str, object]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _parse(data: bytes | None) -> dict[str, object]:
    try:
        value = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError) as e:
        raise ZnodeFormatError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ZnodeFormatError("not a JSON object")
    return value


def _millis() -> str:
    return str(int(time.time() * 1000))


# -- ids ------------------------------------------------------------------------


def uuid_to_kafka(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_kafka(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16:
        raise ZnodeFormatError(f"{text!r} is not a Kafka Uuid")
    return uuid.UUID(bytes=raw)


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize (a user name as a znode name): Java's URLEncoder, then
    '*' as %2A and a space as %20."""
    out = []
    for byte in name.encode():
        c = chr(byte)
        if c.isascii() and (c.isalnum() or c in ".-_"):
            out.append(c)
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def desanitize(name: str) -> str:
    return unquote(name)


# -- cluster and controller -------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _json({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    value = _parse(data).get("id")
    if not isinstance(value, str) or not value:
        raise ZnodeFormatError("no cluster id")
    return value


def encode_controller(broker_id: int) -> bytes:
    return _json({"version": 2, "brokerid": broker_id, "timestamp": _millis(),
                  "kraftControllerEpoch": -1})


def decode_controller(data: bytes | None) -> int:
    value = _parse(data).get("brokerid")
    if not isinstance(value, int):
        raise ZnodeFormatError("no brokerid")
    return value


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").decode())
    except (ValueError, UnicodeDecodeError):
        raise ZnodeFormatError("not an integer") from None


# -- brokers ----------------------------------------------------------------------


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def encode_broker(registration: BrokerRegistration) -> bytes:
    """BrokerIdZNode version 5: every endpoint as ``NAME://host:port``, their security
    protocols, and host/port of the first PLAINTEXT one for old clients."""
    endpoints = registration.endpoints
    plaintext = next((e for e in endpoints if e.security_protocol == "PLAINTEXT"), None)
    data: dict[str, object] = {
        "features": {},
        "listener_security_protocol_map": {
            e.listener_name: e.security_protocol for e in endpoints},
        "endpoints": [f"{e.listener_name}://{e.host}:{e.port}" for e in endpoints],
        "jmx_port": -1,
        "port": plaintext.port if plaintext else -1,
        "host": plaintext.host if plaintext else None,
        "version": 5,
        "timestamp": _millis(),
    }
    if registration.rack is not None:
        data["rack"] = registration.rack
    return _json(data)


def decode_broker(broker_id: int, data: bytes | None) -> BrokerRegistration:
    value = _parse(data)
    protocols = value.get("listener_security_protocol_map") or {}
    raw_endpoints = value.get("endpoints")
    if not isinstance(protocols, dict) or not isinstance(raw_endpoints, list):
        raise ZnodeFormatError("endpoints or listener_security_protocol_map malformed")
    endpoints = []
    for text in raw_endpoints:
        name, sep, rest = str(text).partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ZnodeFormatError(f"endpoint {text!r} is not NAME://host:port")
        endpoints.append(BrokerEndpoint(
            name, host.strip("[]"), int(port), str(protocols.get(name, name))))
    if not endpoints:
        raise ZnodeFormatError("no endpoints")
    rack = value.get("rack")
    return BrokerRegistration.of(
        broker_id, tuple(endpoints), rack if isinstance(rack, str) else None)


# -- topics and partitions ----------------------------------------------------------


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """/brokers/topics/<topic>: the replicas of each partition and the topic id (None
    for a topic written by a Kafka before 2.8, until the controller gives it one). A
    partition being reassigned (KIP-455) lists its full replica set, targets first, and
    its replicas being added and removed."""

    topic_id: uuid.UUID | None
    partitions: Mapping[int, tuple[int, ...]]
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


def encode_topic(topic_id: uuid.UUID | None, partitions: Mapping[int, Sequence[int]],
                 adding: Mapping[int, Sequence[int]] | None = None,
                 removing: Mapping[int, Sequence[int]] | None = None) -> bytes:
    """TopicZNode version 3; as Kafka, only partitions with replicas moving are listed
    under adding_replicas and removing_replicas."""
    def listed(m: Mapping[int, Sequence[int]] | None) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted((m or {}).items()) if r}

    data: dict[str, object] = {
        "version": 3,
        "partitions": {str(p): list(r) for p, r in sorted(partitions.items())},
        "adding_replicas": listed(adding),
        "removing_replicas": listed(removing),
    }
    if topic_id is not None:
        data["topic_id"] = uuid_to_kafka(topic_id)
    return _json(data)


def _replica_lists(value: dict[str, object], key: str) -> dict[int, tuple[int, ...]]:
    raw = value.get(key) or {}
    if not isinstance(raw, dict):
        raise ZnodeFormatError(f"{key} is not an object")
    try:
        return {int(p): tuple(int(b) for b in r) for p, r in raw.items()}
    except (TypeError, ValueError):
        raise ZnodeFormatError(f"{key} are not lists of broker ids") from None


def decode_topic(data: bytes | None) -> TopicAssignment:
    value = _parse(data)
    topic_id = value.get("topic_id")
    return TopicAssignment(
        uuid_from_kafka(topic_id) if isinstance(topic_id, str) else None,
        _replica_lists(value, "partitions"),
        {p: r for p, r in _replica_lists(value, "adding_replicas").items() if r},
        {p: r for p, r in _replica_lists(value, "removing_replicas").items() if r})


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """/brokers/topics/<topic>/partitions/<p>/state; ``zk_version`` is the znode's
    version, Kafka's partition epoch in ZooKeeper mode."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = 0


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    return _json({"controller_epoch": state.controller_epoch, "leader": state.leader,
                  "version": 1, "leader_epoch": state.leader_epoch,
                  "isr": list(state.isr)})


def decode_partition_state(data: bytes | None, zk_version: int) -> LeaderAndIsr:
    value = _parse(data)
    try:
        return LeaderAndIsr(
            int(value["leader"]), int(value["leader_epoch"]),  # type: ignore[call-overload]
            tuple(int(b) for b in value["isr"]),  # type: ignore[attr-defined]
            int(value["controller_epoch"]), zk_version)  # type: ignore[call-overload]
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError("leader, leader_epoch, isr or controller_epoch missing") \
            from None


def encode_isr_change(partitions: Sequence[tuple[str, int]]) -> bytes:
    return _json({"version": 1, "partitions": [
        {"topic": t, "partition": p} for t, p in partitions]})


# -- configs ------------------------------------------------------------------------


def config_path(entity_type: str, name: str) -> str:
    return f"/config/{entity_type}/{name}"


def broker_entity(broker_id: int) -> str:
    """The /config/brokers/ entity of a broker id; -1 is the cluster-wide default."""
    return DEFAULT_ENTITY if broker_id == -1 else str(broker_id)


def encode_config(configs: Mapping[str, str]) -> bytes:
    return _json({"version": 1, "config": dict(sorted(configs.items()))})


def decode_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    config = _parse(data).get("config") or {}
    if not isinstance(config, dict):
        raise ZnodeFormatError("config is not an object")
    return {str(k): str(v) for k, v in config.items()}


def encode_config_change(entity_path: str) -> bytes:
    return _json({"version": 2, "entity_path": entity_path})


def scram_to_config(credential: ScramCredential) -> str:
    """Kafka's ScramCredentialUtils.credentialToString."""
    b64 = base64.b64encode
    return (f"salt={b64(credential.salt).decode()},"
            f"stored_key={b64(credential.stored_key).decode()},"
            f"server_key={b64(credential.server_key).decode()},"
            f"iterations={credential.iterations}")


def scram_from_config(user: str, mechanism: int, text: str) -> ScramCredential:
    fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    try:
        return ScramCredential(
            user, mechanism, base64.b64decode(fields["salt"]),
            base64.b64decode(fields["stored_key"]), base64.b64decode(fields["server_key"]),
            int(fields["iterations"]))
    except (KeyError, ValueError, binascii.Error):
        raise ZnodeFormatError(f"SCRAM credential of {user!r} malformed") from None


def scram_credentials(user: str, configs: Mapping[str, str]) -> list[ScramCredential]:
    """The SCRAM credentials among a /config/users/<user> znode's configs."""
    return [scram_from_config(user, SCRAM_MECHANISM_TYPES[name], value)
            for name, value in configs.items() if name in SCRAM_MECHANISM_TYPES]


# -- admin and producer ids ------------------------------------------------------------


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def encode_election(partitions: Collection[tuple[str, int]]) -> bytes:
    """PreferredReplicaElectionZNode (and Kafkernel's unclean twin)."""
    return _json({"version": 1, "partitions": [
        {"topic": t, "partition": p} for t, p in sorted(partitions)]})


def decode_election(data: bytes | None) -> frozenset[tuple[str, int]]:
    raw = _parse(data).get("partitions")
    if not isinstance(raw, list):
        raise ZnodeFormatError("no partitions list")
    try:
        return frozenset((str(e["topic"]), int(e["partition"])) for e in raw)
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError("a partition without topic and partition") from None


def encode_producer_id_block(broker_id: int, block: range) -> bytes:
    """ProducerIdBlockZNode: block_end is inclusive, both ends as strings."""
    return _json({"version": 1, "broker": broker_id, "block_start": str(block.start),
                  "block_end": str(block.stop - 1)})


def decode_producer_id_block_end(data: bytes | None) -> int:
    """The last producer id handed out (-1 when no block was ever)."""
    if not data:
        return -1
    try:
        return int(_parse(data)["block_end"])  # type: ignore[call-overload]
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError("block_end missing") from None


# -- ACLs: Kafka's ZooKeeper authorizer (AclAuthorizer, ZkAclStore) -------------------

ACL_STORES = {3: "/kafka-acl", 4: "/kafka-acl-extended/prefixed"}  # by PatternType code
# AclResourceType code -> the name ZkAclStore writes in paths.
ACL_RESOURCE_TYPES = {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId",
                      6: "DelegationToken", 7: "User"}
_ACL_OPERATIONS = {2: "All", 3: "Read", 4: "Write", 5: "Create", 6: "Delete", 7: "Alter",
                   8: "Describe", 9: "ClusterAction", 10: "DescribeConfigs",
                   11: "AlterConfigs", 12: "IdempotentWrite", 13: "CreateTokens",
                   14: "DescribeTokens", 15: "TwoPhaseCommit"}
_ACL_OPERATION_CODES = {name: code for code, name in _ACL_OPERATIONS.items()}
_ACL_PERMISSIONS = {2: "Deny", 3: "Allow"}
_ACL_PERMISSION_CODES = {name: code for code, name in _ACL_PERMISSIONS.items()}
ACL_PATHS = tuple(f"{store}/{name}" for store in ACL_STORES.values()
                  for name in ACL_RESOURCE_TYPES.values())


def acl_path(resource_type: int, name: str, pattern_type: int) -> str:
    return f"{ACL_STORES[pattern_type]}/{ACL_RESOURCE_TYPES[resource_type]}/{name}"


def encode_acls(bindings: Sequence[AclBinding]) -> bytes:
    """The ACLs of one resource pattern: {"version":1,"acls":[...]} as Kafka wrote them."""
    return _json({"version": 1, "acls": [
        {"principal": b.principal, "permissionType": _ACL_PERMISSIONS[b.permission_type],
         "operation": _ACL_OPERATIONS[b.operation], "host": b.host} for b in bindings]})


def decode_acls(resource_type: int, name: str, pattern_type: int,
                data: bytes | None) -> list[AclBinding]:
    acls = _parse(data).get("acls")
    if not isinstance(acls, list):
        raise ZnodeFormatError("no acls list")
    out: list[AclBinding] = []
    for acl in acls:
        if not isinstance(acl, dict):
            raise ZnodeFormatError("an ACL is not an object")
        try:
            out.append(AclBinding(resource_type, name, pattern_type, str(acl["principal"]),
                                  str(acl["host"]), _ACL_OPERATION_CODES[acl["operation"]],
                                  _ACL_PERMISSION_CODES[acl["permissionType"]]))
        except KeyError as e:
            raise ZnodeFormatError(f"an ACL without a known {e}") from None
    return out


def acl_id(binding: AclBinding) -> uuid.UUID:
    """ZooKeeper keeps no ACL ids: one derived from the binding, the same on every broker."""
    return uuid.uuid5(uuid.NAMESPACE_OID, repr(binding))


def acls_by_pattern(bindings: Sequence[AclBinding]) -> dict[tuple[int, str, int], list[AclBinding]]:
    """ACLs grouped by the znode that holds them: (resource type, name, pattern type)."""
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in bindings:
        groups.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return groups
