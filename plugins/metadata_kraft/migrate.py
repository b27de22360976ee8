"""``kafkernel metadata migrate``: a ZooKeeper-mode cluster's metadata into a KRaft log.

Offline: every broker is stopped. The cluster's state is read once from ZooKeeper
(``zkread.py``) and written as Kafka's metadata records into a new
``__cluster_metadata-0`` (built in a temporary directory and renamed into place, so a
failure leaves no half log), then each given broker's log dirs get KRaft's
meta.properties (v1: ``node.id``, the same ``cluster.id``, a new ``directory.id``).
Topic ids, partition leaders, ISRs and epochs are kept, so the brokers' logs, their
``partition.metadata`` and leader-epoch caches stay valid and clients resume where they
left off.

No ZkMigrationStateRecord is written: it marks the phases of KIP-866's online
dual-write migration, which an offline copy does not have, and Kafka 4.3.1 replays it
as a no-op (MetadataDelta ignores api key 21); the log reads as a KRaft cluster's own.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import logging
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel.api.cluster import IP_KEYS, USER_AND_CLIENT_KEYS
from kernel.api.config import BrokerConfig, ConfigError, controller_listeners

from .log import METADATA_PARTITION_DIR, MetadataLog, versioned
from .properties import (
    KRAFT_VERSION,
    fsync_directory,
    parse_uuid,
    read_meta_properties,
    write_meta_properties,
)
from .records.schema import (
    AccessControlEntryRecord,
    BrokerEndpoint,
    ClientQuotaRecord,
    ConfigRecord,
    EntityData,
    FeatureLevelRecord,
    Message,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from .zkread import SCRAM_MECHANISMS, ZkClusterState, ZkMigrationError, ZkReader

METADATA_VERSION = 30  # 4.3-IV0, what the single node writes on a new cluster
UNASSIGNED_DIR = uuid.UUID(int=1)  # Kafka's DirectoryId.UNASSIGNED
TOPIC, BROKER = 2, 4  # ConfigResource.Type codes
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# Records per batch, as Kafka's migration (zookeeper.metadata.migration.min.batch.size).
BATCH_RECORDS = 200
QUOTA_KEYS = {**USER_AND_CLIENT_KEYS, **IP_KEYS}
ZK_META_VERSION = "0"


@dataclass
class Node:
    """A broker of the cluster whose KRaft-mode config was given: its dirs and
    endpoints."""

    node_id: int
    log_dirs: list[Path]
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None
    dir_ids: dict[Path, uuid.UUID] = field(default_factory=dict)


@dataclass
class Summary:
    topics: int = 0
    partitions: int = 0
    configs: int = 0
    acls: int = 0
    users: int = 0
    quotas: int = 0
    brokers: list[int] = field(default_factory=list)
    next_producer_id: int = 0
    records: int = 0
    warnings: list[str] = field(default_factory=list)


def node_of(config: BrokerConfig) -> Node:
    """The registration a KRaft-mode config gives its broker: advertised.listeners (else
    listeners), less the controller's."""
    protocols = dict(p.split(":", 1) for p in config.listener_security_protocol_map)
    controllers = set(controller_listeners(config))
    endpoints = []
    for text in config.advertised_listeners or config.listeners:
        name, _, rest = text.partition("://")
        host, _, port = rest.rpartition(":")
        if name in controllers:
            continue
        protocol = protocols.get(name, name)
        endpoints.append(BrokerEndpoint(
            name=name, host=host.strip("[]"), port=int(port),
            security_protocol=SECURITY_PROTOCOLS.get(protocol, 0)))
    return Node(config.broker_id, [Path(d) for d in config.log_dirs], tuple(endpoints),
                config.broker_rack)


def check_directories(nodes: Sequence[Node], metadata_dir: Path, cluster_id: str,
                      force: bool) -> None:
    """Refuse (ZkMigrationError) a dir of another broker or cluster, and a metadata dir
    that already holds a KRaft log unless ``force``; choose each dir's directory.id."""
    log_dir = metadata_dir / METADATA_PARTITION_DIR
    if log_dir.exists() and any(log_dir.iterdir()) and not force:
        raise ZkMigrationError(
            f"{log_dir} already holds a KRaft metadata log; remove it or pass --force")
    for i, node in enumerate(nodes):
        # The metadata dir is the first node's (the one whose config named it).
        dirs = [*node.log_dirs, metadata_dir] if i == 0 else node.log_dirs
        for directory in dict.fromkeys(dirs):
            props = read_meta_properties(directory) or {}
            path = directory / "meta.properties"
            version = props.get("version")
            stored_node = props.get("broker.id" if version == ZK_META_VERSION else "node.id")
            if props and stored_node != str(node.node_id):
                raise ZkMigrationError(
                    f"{path}: belongs to broker {stored_node}, not {node.node_id}")
            if props and props.get("cluster.id") != cluster_id:
                raise ZkMigrationError(
                    f"{path}: cluster.id={props.get('cluster.id')} is not the cluster in "
                    f"ZooKeeper ({cluster_id})")
            dir_text = props.get("directory.id") if version == KRAFT_VERSION else None
            try:
                node.dir_ids[directory] = parse_uuid(dir_text) if dir_text else uuid.uuid4()
            except ValueError:
                raise ZkMigrationError(
                    f"{path}: directory.id={dir_text} is not a Uuid") from None


def _directory(node: Node | None, topic: str, partition: int) -> uuid.UUID:
    """The replica's log dir as KRaft's Directories: the dir that holds it on a broker
    whose config was given (its only dir when none does yet), else UNASSIGNED, as
    ClusterControlManager.defaultDir."""
    if node is None:
        return UNASSIGNED_DIR
    for d in node.log_dirs:
        if (d / f"{topic}-{partition}").is_dir():
            return node.dir_ids[d]
    return node.dir_ids[node.log_dirs[0]] if len(node.log_dirs) == 1 else UNASSIGNED_DIR


def build_records(state: ZkClusterState, nodes: Sequence[Node],
                  summary: Summary) -> list[Message]:
    """The cluster's state as Kafka's metadata records, in the order a KRaft controller
    would have written them (features, brokers, topics, configs, security, ids)."""
    by_id = {n.node_id: n for n in nodes}
    records: list[Message] = [
        FeatureLevelRecord(name="metadata.version", feature_level=METADATA_VERSION)]
    for node in nodes:
        # Fenced until it starts and registers again, as Kafka's controller keeps a
        # broker that has not heartbeated yet.
        # Broker epoch: the record's offset, as KRaft's (the LeaderChange is offset 0).
        records.append(RegisterBrokerRecord(
            broker_id=node.node_id, incarnation_id=uuid.uuid4(), broker_epoch=len(records) + 1,
            end_points=node.endpoints, rack=node.rack, fenced=True,
            log_dirs=tuple(node.dir_ids[d] for d in node.log_dirs), cordoned_log_dirs=()))
        summary.brokers.append(node.node_id)
    for topic in state.topics:
        topic_id = topic.topic_id
        if topic_id is None:
            topic_id = uuid.uuid4()
            summary.warnings.append(f"topic {topic.name} had no topic id: given {topic_id}")
        if topic.name in state.deleting:
            summary.warnings.append(
                f"topic {topic.name} was queued for deletion: delete it again")
        records.append(TopicRecord(name=topic.name, topic_id=topic_id))
        for p, part in sorted(topic.partitions.items()):
            records.append(PartitionRecord(
                partition_id=p, topic_id=topic_id, replicas=part.replicas, isr=part.isr,
                removing_replicas=part.removing, adding_replicas=part.adding,
                leader=part.leader, leader_epoch=part.leader_epoch,
                partition_epoch=part.partition_epoch,
                directories=tuple(_directory(by_id.get(r), topic.name, p)
                                  for r in part.replicas)))
            summary.partitions += 1
        for name, value in sorted(topic.configs.items()):
            records.append(ConfigRecord(resource_type=TOPIC, resource_name=topic.name,
                                        name=name, value=value))
            summary.configs += 1
        summary.topics += 1
    for broker, configs in sorted(state.broker_configs.items()):
        for name, value in sorted(configs.items()):
            records.append(ConfigRecord(resource_type=BROKER,
                                        resource_name="" if broker == -1 else str(broker),
                                        name=name, value=value))
            summary.configs += 1
    records.extend(_entity_records(state, summary))
    for acl in state.acls:
        # ZooKeeper keeps no ACL ids; Kafka's migration gave each a new one too.
        records.append(AccessControlEntryRecord(
            id=uuid.uuid4(), resource_type=acl.resource_type,
            resource_name=acl.resource_name, pattern_type=acl.pattern_type,
            principal=acl.principal, host=acl.host, operation=acl.operation,
            permission_type=acl.permission_type))
        summary.acls += 1
    if state.producer_id_block is not None:
        broker, block_end = state.producer_id_block
        summary.next_producer_id = block_end + 1
        records.append(ProducerIdsRecord(broker_id=broker, broker_epoch=-1,
                                         next_producer_id=block_end + 1))
    if state.delegation_tokens:
        summary.warnings.append(f"{state.delegation_tokens} delegation tokens not "
                                "migrated: create them again")
    summary.records = len(records)
    return records


def _entity_records(state: ZkClusterState, summary: Summary) -> list[Message]:
    """SCRAM credentials and client quotas, from the /config/users, clients and ips
    entities (a user's znode holds both)."""
    records: list[Message] = []
    users: set[str] = set()
    for entity, configs in sorted(state.entity_configs.items(),
                                  key=lambda e: [(k, n or "") for k, n in e[0]]):
        for key, text in sorted(configs.items()):
            if key in SCRAM_MECHANISMS and len(entity) == 1 and entity[0][1] is not None:
                user = entity[0][1]
                records.append(_scram_record(user, SCRAM_MECHANISMS[key], text))
                users.add(user)
            elif key in QUOTA_KEYS:
                try:
                    value = float(text)
                except ValueError:
                    raise ZkMigrationError(
                        f"quota {key}={text!r} of {entity} is not a number") from None
                records.append(ClientQuotaRecord(
                    entity=tuple(EntityData(entity_type=k, entity_name=n) for k, n in entity),
                    key=key, value=value, remove=False))
                summary.quotas += 1
    summary.users = len(users)
    return records


def _scram_record(user: str, mechanism: int, text: str) -> UserScramCredentialRecord:
    """Kafka's ScramCredentialUtils.credentialFromString."""
    fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    try:
        return UserScramCredentialRecord(
            name=user, mechanism=mechanism, salt=base64.b64decode(fields["salt"]),
            stored_key=base64.b64decode(fields["stored_key"]),
            server_key=base64.b64decode(fields["server_key"]),
            iterations=int(fields["iterations"]))
    except (KeyError, ValueError, binascii.Error):
        raise ZkMigrationError(f"the SCRAM credential of user {user!r} is malformed") from None


def write_log(metadata_dir: Path, node_id: int, records: Sequence[Message]) -> None:
    """Write the log in a temporary directory beside its place, then rename it in: a
    failure or a crash leaves the old state, never half a log."""
    metadata_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".migrate-", dir=metadata_dir))
    try:
        log = MetadataLog(tmp, node_id, _QuietLogger())
        log.open()
        try:
            log.begin_epoch()
            for i in range(0, len(records), BATCH_RECORDS):
                log.append_blocking([versioned(r) for r in records[i:i + BATCH_RECORDS]])
        finally:
            log.close()
        target = metadata_dir / METADATA_PARTITION_DIR
        if target.exists():
            shutil.rmtree(target)  # --force: checked by check_directories
        (tmp / METADATA_PARTITION_DIR).rename(target)
        fsync_directory(metadata_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _QuietLogger:
    """MetadataLog logs only a truncated tail, which a new log never has."""

    def warning(self, *_args: Any, **_kwargs: Any) -> None:
        pass


def read_zookeeper(connect: str, timeout_s: float) -> ZkClusterState:
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    # kazoo logs each failed connection attempt and warns of a missing chroot: the
    # command says it in one line instead (a Logger of its own, outside logging's tree).
    quiet = logging.Logger("kazoo", logging.CRITICAL)
    zk = KazooClient(hosts=connect, timeout=timeout_s, connection_retry=None, logger=quiet)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zk.start(timeout=timeout_s)
    except KazooTimeoutError:
        zk.close()
        raise ZkMigrationError(f"ZooKeeper at {connect} is unreachable "
                               f"(no session within {timeout_s:g} s)") from None
    try:
        return ZkReader(zk).read()
    except KazooException as e:  # the session lost mid-read, say
        raise ZkMigrationError(f"ZooKeeper at {connect}: {type(e).__name__} {e}") from None
    finally:
        zk.stop()
        zk.close()


def migrate(connect: str, nodes: Sequence[Node], metadata_dir: Path, *, force: bool = False,
            timeout_s: float = 10.0) -> Summary:
    """The whole migration; raises ZkMigrationError before writing anything when the
    cluster or the directories cannot be migrated."""
    state = read_zookeeper(connect, timeout_s)
    if state.live_brokers:
        raise ZkMigrationError(
            f"brokers {state.live_brokers} are still registered in ZooKeeper: stop every "
            "broker (and wait for its session to expire) before migrating")
    check_directories(nodes, metadata_dir, state.cluster_id, force)
    summary = Summary()
    records = build_records(state, nodes, summary)
    write_log(metadata_dir, nodes[0].node_id if nodes else 1, records)
    for node in nodes:
        for directory, dir_id in node.dir_ids.items():
            directory.mkdir(parents=True, exist_ok=True)
            write_meta_properties(directory, state.cluster_id, node.node_id, dir_id)
    return summary


def add_parsers(subparsers: Any, load_config: Callable[..., BrokerConfig]) -> None:
    metadata = subparsers.add_parser("metadata", help="metadata tools")
    metadata_sub = metadata.add_subparsers(dest="metadata_command", required=True)
    p = metadata_sub.add_parser(
        "migrate", help="turn a stopped ZooKeeper-mode cluster's metadata into a KRaft "
                        "metadata log")
    p.add_argument("--zookeeper-connect", required=True, metavar="HOST:PORT[/CHROOT]")
    p.add_argument("--config", "-c", action="append", default=[],
                   help="a broker's KRaft-mode TOML (repeatable): its log.dirs get "
                        "KRaft's meta.properties and its registration goes into the log; "
                        "the first one's metadata.log.dir (else first log dir) holds "
                        "the log")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting of every --config")
    p.add_argument("--metadata-log-dir", help="where to write the metadata log")
    p.add_argument("--force", action="store_true",
                   help="replace a KRaft metadata log already in the metadata dir")
    p.add_argument("--zookeeper-timeout-ms", type=int, default=10000)
    p.set_defaults(func=lambda args: _cmd_migrate(args, load_config))


def _cmd_migrate(args: argparse.Namespace, load_config: Callable[..., BrokerConfig]) -> int:
    configs = [load_config(path, args.override) for path in args.config]
    if not configs and not args.metadata_log_dir:
        raise ConfigError("give --config (the KRaft node's TOML) or --metadata-log-dir")
    nodes = [node_of(c) for c in configs]
    if args.metadata_log_dir:
        metadata_dir = Path(args.metadata_log_dir)
    else:
        metadata_dir = Path(configs[0].metadata_log_dir or configs[0].log_dirs[0])
    try:
        summary = migrate(args.zookeeper_connect, nodes, metadata_dir, force=args.force,
                          timeout_s=args.zookeeper_timeout_ms / 1000)
    except (ZkMigrationError, OSError) as e:  # OSError: a dir that cannot be written
        print(f"migrate: {e}", file=sys.stderr)
        return 1
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"migrated {summary.topics} topics, {summary.partitions} partitions, "
          f"{summary.configs} configs, {summary.acls} ACLs, {summary.users} SCRAM users, "
          f"{summary.quotas} quotas; next producer id {summary.next_producer_id}; brokers "
          f"registered {summary.brokers}; {summary.records} records into "
          f"{metadata_dir / METADATA_PARTITION_DIR}")
    return 0
