"""Reading a ZooKeeper-mode cluster's state for ``kafkernel metadata migrate``.

Kafka's ZooKeeper layout (kafka.zk.ZkData), read once, offline: the znodes a
ZooKeeper-mode Kafka 3.x or Kafkernel's ``metadata_zk`` keeps. Plugins never import
each other, so this reads the JSON itself, as Kafka's own ZkMigrationClient did.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from kernel.api.cluster import AclBinding

DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.DEFAULT
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
# ZkAclStore's paths: pattern type code -> store; resource type name -> code.
ACL_STORES = {3: "/kafka-acl", 4: "/kafka-acl-extended/prefixed"}
ACL_RESOURCE_TYPES = {"Topic": 2, "Group": 3, "Cluster": 4, "TransactionalId": 5,
                      "DelegationToken": 6, "User": 7}
ACL_OPERATIONS = {"All": 2, "Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7,
                  "Describe": 8, "ClusterAction": 9, "DescribeConfigs": 10,
                  "AlterConfigs": 11, "IdempotentWrite": 12, "CreateTokens": 13,
                  "DescribeTokens": 14, "TwoPhaseCommit": 15}
ACL_PERMISSIONS = {"Deny": 2, "Allow": 3}


class ZkMigrationError(Exception):
    """The cluster cannot be migrated as it is: one line saying why."""


@dataclass
class ZkPartition:
    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    leader: int = -1
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()
    partition_epoch: int = 0  # the state znode's version, as ZooKeeper-mode Kafka


@dataclass
class ZkTopic:
    name: str
    topic_id: uuid.UUID | None  # None: written by a Kafka before 2.8
    partitions: dict[int, ZkPartition]
    configs: dict[str, str]


@dataclass
class ZkClusterState:
    cluster_id: str
    live_brokers: list[int] = field(default_factory=list)
    topics: list[ZkTopic] = field(default_factory=list)
    deleting: set[str] = field(default_factory=set)
    # broker id -> configs; -1 is the cluster-wide default (<default>)
    broker_configs: dict[int, dict[str, str]] = field(default_factory=dict)
    # (entity type, name or None) pairs -> the entity's config znode
    entity_configs: dict[tuple[tuple[str, str | None], ...], dict[str, str]] = field(
        default_factory=dict)
    acls: list[AclBinding] = field(default_factory=list)
    producer_id_block: tuple[int, int] | None = None  # (broker, block_end inclusive)
    delegation_tokens: int = 0


def _json(path: str, data: bytes | None) -> dict[str, Any]:
    try:
        value = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError) as e:
        raise ZkMigrationError(f"znode {path} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ZkMigrationError(f"znode {path} is not a JSON object")
    return value


def kafka_uuid(path: str, text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16:
        raise ZkMigrationError(f"znode {path}: {text!r} is not a Kafka Uuid")
    return uuid.UUID(bytes=raw)


def _ints(path: str, value: Any) -> tuple[int, ...]:
    try:
        return tuple(int(b) for b in value)
    except (TypeError, ValueError):
        raise ZkMigrationError(f"znode {path}: {value!r} is not a list of broker ids") from None


def _replica_map(path: str, value: dict[str, Any], key: str) -> dict[int, tuple[int, ...]]:
    raw = value.get(key) or {}
    if not isinstance(raw, dict):
        raise ZkMigrationError(f"znode {path}: {key} is not an object")
    try:
        return {int(p): _ints(path, r) for p, r in raw.items()}
    except ValueError:
        raise ZkMigrationError(f"znode {path}: {key} has a partition that is not a number"
                               ) from None


class ZkReader:
    """Reads one cluster (the connect string's chroot) through a started KazooClient."""

    def __init__(self, zk: Any) -> None:
        self._zk = zk

    def _get(self, path: str) -> tuple[bytes | None, Any] | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self._zk.get(path)
        except NoNodeError:
            return None
        return data, stat

    def _children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return sorted(self._zk.get_children(path))
        except NoNodeError:
            return []

    def _config(self, path: str) -> dict[str, str]:
        got = self._get(path)
        if got is None or not got[0]:
            return {}
        config = _json(path, got[0]).get("config") or {}
        if not isinstance(config, dict):
            raise ZkMigrationError(f"znode {path}: config is not an object")
        return {str(k): str(v) for k, v in config.items()}

    def read(self) -> ZkClusterState:
        got = self._get("/cluster/id")
        if got is None:
            raise ZkMigrationError("no Kafka cluster there: /cluster/id does not exist "
                                   "(is the chroot of --zookeeper-connect right?)")
        cluster_id = _json("/cluster/id", got[0]).get("id")
        if not isinstance(cluster_id, str) or not cluster_id:
            raise ZkMigrationError("znode /cluster/id holds no cluster id")
        state = ZkClusterState(cluster_id)
        state.live_brokers = sorted(int(b) for b in self._children("/brokers/ids")
                                    if b.lstrip("-").isdigit())
        state.deleting = set(self._children("/admin/delete_topics"))
        state.topics = [self._topic(name) for name in self._children("/brokers/topics")]
        for entity in self._children("/config/brokers"):
            if entity != DEFAULT_ENTITY and not entity.isdigit():
                raise ZkMigrationError(f"znode /config/brokers/{entity}: not a broker id")
            broker = -1 if entity == DEFAULT_ENTITY else int(entity)
            state.broker_configs[broker] = self._config(f"/config/brokers/{entity}")
        self._entities(state)
        self._acls(state)
        got = self._get("/latest_producer_id_block")
        if got is not None and got[0]:
            block = _json("/latest_producer_id_block", got[0])
            try:
                state.producer_id_block = (int(block["broker"]), int(block["block_end"]))
            except (KeyError, TypeError, ValueError):
                raise ZkMigrationError(
                    "znode /latest_producer_id_block: broker or block_end missing") from None
        state.delegation_tokens = len(self._children("/delegation_token/tokens"))
        return state

    def _topic(self, name: str) -> ZkTopic:
        path = f"/brokers/topics/{name}"
        got = self._get(path)
        value = _json(path, got[0] if got else None)
        raw_id = value.get("topic_id")
        topic_id = kafka_uuid(path, raw_id) if isinstance(raw_id, str) else None
        adding = _replica_map(path, value, "adding_replicas")
        removing = _replica_map(path, value, "removing_replicas")
        partitions: dict[int, ZkPartition] = {}
        for p, replicas in sorted(_replica_map(path, value, "partitions").items()):
            part = ZkPartition(replicas, adding.get(p, ()), removing.get(p, ()))
            state_path = f"{path}/partitions/{p}/state"
            got_state = self._get(state_path)
            if got_state is not None:
                s = _json(state_path, got_state[0])
                try:
                    part.leader = int(s["leader"])
                    part.leader_epoch = int(s["leader_epoch"])
                except (KeyError, TypeError, ValueError):
                    raise ZkMigrationError(f"znode {state_path}: leader or leader_epoch "
                                           "missing") from None
                part.isr = _ints(state_path, s.get("isr", ()))
                part.partition_epoch = got_state[1].version
            partitions[p] = part
        return ZkTopic(name, topic_id, partitions, self._config(f"/config/topics/{name}"))

    def _entities(self, state: ZkClusterState) -> None:
        """Users (SCRAM credentials and quotas), clients, users' clients and IPs."""
        def name(kind: str, znode: str) -> str | None:
            if znode == DEFAULT_ENTITY:
                return None
            return znode if kind == "ip" else unquote(znode)

        for user in self._children("/config/users"):
            key = (("user", name("user", user)),)
            state.entity_configs[key] = self._config(f"/config/users/{user}")
            for client in self._children(f"/config/users/{user}/clients"):
                state.entity_configs[(*key, ("client-id", name("client-id", client)))] = (
                    self._config(f"/config/users/{user}/clients/{client}"))
        for client in self._children("/config/clients"):
            state.entity_configs[(("client-id", name("client-id", client)),)] = (
                self._config(f"/config/clients/{client}"))
        for ip in self._children("/config/ips"):
            state.entity_configs[(("ip", name("ip", ip)),)] = self._config(
                f"/config/ips/{ip}")

    def _acls(self, state: ZkClusterState) -> None:
        for pattern_type, store in ACL_STORES.items():
            for type_name, resource_type in ACL_RESOURCE_TYPES.items():
                for resource in self._children(f"{store}/{type_name}"):
                    path = f"{store}/{type_name}/{resource}"
                    got = self._get(path)
                    acls = _json(path, got[0] if got else None).get("acls") or []
                    for acl in acls if isinstance(acls, list) else []:
                        try:
                            state.acls.append(AclBinding(
                                resource_type, resource, pattern_type, str(acl["principal"]),
                                str(acl["host"]), ACL_OPERATIONS[acl["operation"]],
                                ACL_PERMISSIONS[acl["permissionType"]]))
                        except (KeyError, TypeError) as e:
                            raise ZkMigrationError(
                                f"znode {path}: an ACL without a known {e}") from None
