"""The cluster image and the contract every metadata backend fulfils.

The image is an immutable snapshot (brokers, topics with ids, partitions with leader,
ISR and epochs, topic and broker configs). A backend owns the authoritative state
(a metadata log for KRaft, znodes for ZooKeeper), publishes a new image after every
change and tells its listeners. Everything else in the broker reads the current
image and never mutates it; changes go through the backend's async methods, which
raise ``KafkaError`` with Kafka's error code when a request is invalid.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One advertised listener of a broker, as Kafka's RegisterBrokerRecord endpoints."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker. ``host``/``port``/``listener_name`` are its first endpoint;
    ``endpoints`` holds every advertised listener (the first one alone when not given),
    so each client is answered with the listener it came in on."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    listener_name: str = "PLAINTEXT"
    endpoints: tuple[BrokerEndpoint, ...] = ()

    def __post_init__(self) -> None:
        if not self.endpoints:
            object.__setattr__(self, "endpoints", (
                BrokerEndpoint(self.listener_name, self.host, self.port),))

    @classmethod
    def of(cls, node_id: int, endpoints: tuple[BrokerEndpoint, ...],
           rack: str | None = None) -> BrokerRegistration:
        first = endpoints[0]
        return cls(node_id, first.host, first.port, rack, first.listener_name, endpoints)

    def endpoint(self, listener_name: str) -> BrokerEndpoint | None:
        """The endpoint of ``listener_name``, or None: Kafka leaves a broker without the
        client's listener out of its answers."""
        for e in self.endpoints:
            if e.listener_name == listener_name:
                return e
        return None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Replica assignment and leadership of one partition."""

    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    # Bumped on every change of this record (leader, ISR, replicas): KIP-497's
    # partition epoch, used to fence stale AlterPartition requests.
    partition_epoch: int = 0
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionState]
    # Only the configs set explicitly for this topic; defaults come from the broker.
    configs: Mapping[str, str] = field(default_factory=dict)
    internal: bool = False


@dataclass(frozen=True, slots=True)
class ClusterImage:
    cluster_id: str
    controller_id: int
    brokers: Mapping[int, BrokerRegistration]
    topics: Mapping[str, TopicImage]
    topics_by_id: Mapping[uuid.UUID, TopicImage]
    # Dynamic broker configs: broker id -> {name: value}; key -1 holds cluster defaults.
    broker_configs: Mapping[int, Mapping[str, str]] = field(default_factory=dict)

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)


ImageListener = Callable[[ClusterImage, ClusterImage], None]
"""Called with (previous image, new image) after every change, on the event loop."""


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    # partition -> replica broker ids; when given, overrides partitions/RF.
    assignments: Mapping[int, tuple[int, ...]] | None = None
    internal: bool = False


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """One user's credential for one SCRAM mechanism, as Kafka's
    UserScramCredentialRecord keeps it: salted and iterated, never the password."""

    name: str
    mechanism: int  # Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One access control entry, as Kafka's AccessControlEntryRecord keeps it, with
    Kafka's codes: AclResourceType (2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID, ...),
    PatternType (3 LITERAL, 4 PREFIXED), AclOperation, AclPermissionType (2 DENY,
    3 ALLOW). The authorizer gives them meaning; the backend only stores them."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@runtime_checkable
class MetadataBackend(Protocol):
    """What the kernel needs from a metadata plugin (KRaft-style, ZooKeeper, ...).

    All mutating methods validate, persist durably, publish the new image, notify
    listeners and only then return. They raise ``KafkaError``: TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, INVALID_PARTITIONS,
    INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, ...
    """

    @property
    def image(self) -> ClusterImage: ...

    async def start(self) -> None:
        """Load durable state (replay), register this broker, publish the first image."""

    async def stop(self) -> None: ...

    def add_listener(self, listener: ImageListener) -> None: ...

    async def create_topics(self, topics: list[NewTopic]) -> list[TopicImage]:
        """Create all topics or none; the caller validated names and configs."""

    async def delete_topics(self, names: list[str]) -> None: ...

    async def create_partitions(
        self, topic: str, new_total: int, assignments: list[tuple[int, ...]] | None = None
    ) -> TopicImage: ...

    async def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """Replace the topic's explicit configs with ``configs``."""

    async def set_broker_configs(self, broker_id: int, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of one broker (-1: cluster-wide defaults)."""

    async def alter_partition(
        self, topic: str, partition: int, isr: tuple[int, ...], leader_epoch: int,
        partition_epoch: int,
    ) -> PartitionState:
        """Leader-driven ISR change (KIP-497); fenced by the epochs."""

    async def allocate_producer_ids(self) -> range:
        """A block of producer ids for this broker that no broker was given before,
        restarts included (Kafka's AllocateProducerIds)."""

    def scram_credentials(self) -> Mapping[tuple[str, int], ScramCredential]:
        """(user, mechanism type) -> the SCRAM credential the metadata log holds."""
        ...

    async def alter_scram_credentials(
        self, upsertions: Sequence[ScramCredential], deletions: Sequence[tuple[str, int]],
    ) -> None:
        """Store and remove SCRAM credentials in one metadata change, as Kafka's
        ScramControlManager writes (Remove)UserScramCredentialRecords."""

    def acls(self) -> Mapping[uuid.UUID, AclBinding]:
        """ACL id -> binding, as the metadata log holds them. The mapping is replaced,
        never changed in place, so a reader can tell a change by identity."""
        ...

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[uuid.UUID]:
        """Store ``bindings`` in one metadata change (Kafka's AclControlManager writes
        AccessControlEntryRecords); returns their new ids. A binding already stored is
        not stored twice: its existing id is returned."""
        ...

    async def remove_acls(self, ids: Sequence[uuid.UUID]) -> None:
        """Remove the ACLs of ``ids`` (unknown ids are skipped) in one metadata change."""


MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def topic_name_problem(name: str | None) -> str | None:
    """Kafka's topic name rules (Topic.validate) and its texts; None when the name is
    legal."""
    if not name:
        return "Topic name is invalid: the empty string is not allowed"
    if name in (".", ".."):
        return f"Topic name is invalid: '{name}' is not allowed"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (f"Topic name is invalid: the length of '{name}' is longer than the max "
                f"allowed length {MAX_TOPIC_NAME_LENGTH}")
    if not set(name) <= _LEGAL_TOPIC_CHARS:
        return (f"Topic name is invalid: '{name}' contains one or more characters other "
                "than ASCII alphanumerics, '.', '_' and '-'")
    return None


# The metadata log's partition, __cluster_metadata-0, lives in a log directory beside
# the topics' partitions: no topic may take this name (Kafka refuses it too).
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
CLUSTER_METADATA_PROHIBITED = (
    f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")


def is_internal_topic(name: str) -> bool:
    """Kafka's Topic.isInternal: Metadata marks these internal even while absent."""
    return name in ("__consumer_offsets", "__transaction_state")


# Replica placement, which every metadata backend's controller uses: Kafka's rack-unaware
# assignment (AdminUtils). The first replica of partition p goes to broker
# (p + start_index) mod n, so leaders spread round-robin; followers follow at a shift
# that grows every n partitions, so the replicas of one broker's partitions do not all
# land on the same other broker. A random start index and shift keep broker 0 from
# leading partition 0 of every topic.

def assign_replicas(
    broker_ids: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int,
    replica_shift: int,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists of partitions ``first_partition ..``; ``broker_ids`` sorted, at
    least ``replication_factor`` of them."""
    n = len(broker_ids)
    if not 0 < replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} with {n} brokers")
    shift = replica_shift
    assignment: list[tuple[int, ...]] = []
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        followers = (
            broker_ids[(first + 1 + (shift + j) % (n - 1)) % n]
            for j in range(replication_factor - 1)
        )
        assignment.append((broker_ids[first], *followers))
    return assignment
