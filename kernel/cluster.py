"""The cluster image and the contract every metadata backend fulfils.

The image is an immutable snapshot (brokers, topics with ids, partitions with leader,
ISR and epochs, topic and broker configs). A backend owns the authoritative state
(a metadata log for KRaft, znodes for ZooKeeper), publishes a new image after every
change and tells its listeners. Everything else in the broker reads the current
image and never mutates it; changes go through the backend's async methods, which
raise ``KafkaError`` with Kafka's error code when a request is invalid.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from kernel.client_quotas import QuotaEntity, QuotaValues
from kernel.protocol.errors import ErrorCode, KafkaError

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
    so each client is answered with the listener it came in on.

    ``fenced`` and ``in_controlled_shutdown`` are KRaft's BrokerRegistration flags (a
    ZooKeeper broker is never either): a fenced broker stays registered but is left out
    of Metadata and DescribeCluster (KRaftMetadataCache.getAliveBrokerNodes), and only an
    *active* broker, unfenced and not shutting down, may lead or join an ISR
    (ClusterControlManager.isActive)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    listener_name: str = "PLAINTEXT"
    endpoints: tuple[BrokerEndpoint, ...] = ()
    fenced: bool = False
    in_controlled_shutdown: bool = False

    def __post_init__(self) -> None:
        if not self.endpoints:
            object.__setattr__(self, "endpoints", (
                BrokerEndpoint(self.listener_name, self.host, self.port),))

    @classmethod
    def of(cls, node_id: int, endpoints: tuple[BrokerEndpoint, ...],
           rack: str | None = None, *, fenced: bool = False,
           in_controlled_shutdown: bool = False) -> BrokerRegistration:
        first = endpoints[0]
        return cls(node_id, first.host, first.port, rack, first.listener_name, endpoints,
                   fenced, in_controlled_shutdown)

    @property
    def active(self) -> bool:
        """Unfenced and not in controlled shutdown: may be elected or placed as leader."""
        return not self.fenced and not self.in_controlled_shutdown

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
    # A reassignment in progress (KIP-455): ``replicas`` is then the full set, the
    # targets first; ``adding_replicas`` join it, ``removing_replicas`` leave it once
    # every target is in the ISR.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """Where a reassignment goes (the replicas when none is in progress)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """Where a reassignment started (the replicas when none is in progress)."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


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
    # Finalized feature levels (KIP-584: metadata.version, group.version...), levels
    # above 0 only, as KRaft's FeaturesImage; ZooKeeper finalizes none.
    finalized_features: Mapping[str, int] = field(default_factory=dict)
    # The metadata log offset this image reflects (KRaft's image provenance), which
    # ApiVersions answers as FinalizedFeaturesEpoch; -1 without a metadata log.
    metadata_offset: int = -1

    @property
    def alive_brokers(self) -> Mapping[int, BrokerRegistration]:
        """The unfenced brokers: those Metadata and DescribeCluster list."""
        if not any(b.fenced for b in self.brokers.values()):
            return self.brokers
        return {i: b for i, b in self.brokers.items() if not b.fenced}

    @property
    def active_brokers(self) -> frozenset[int]:
        """Ids of the brokers an election or a new partition may choose as leader or
        ISR member: unfenced and not in controlled shutdown."""
        return frozenset(i for i, b in self.brokers.items() if b.active)

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    def offline_partitions(self) -> int:
        """Partitions without a leader clients can reach: none elected, or one that is
        not a registered broker (Metadata answers LEADER_NOT_AVAILABLE for both).
        Kafka's controller metric OfflinePartitionsCount."""
        return sum(1 for t in self.topics.values() for p in t.partitions.values()
                   if p.leader == NO_LEADER or p.leader not in self.brokers)


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


TopicPartition = tuple[str, int]


class ElectionType(enum.IntEnum):
    """ElectLeaders' election_type, Kafka's ElectionType."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """One partition's answer to an election or a reassignment (Kafka's ApiError)."""

    error_code: ErrorCode = ErrorCode.none
    message: str | None = None

    @classmethod
    def of(cls, error: KafkaError) -> PartitionOutcome:
        return cls(error.error_code, error.message)


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

    async def elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition],
        timeout_ms: int,
    ) -> dict[TopicPartition, PartitionOutcome]:
        """Kafka's ElectLeaders for ``partitions``: each is answered once the image shows
        its new leader (REQUEST_TIMED_OUT when it does not within ``timeout_ms``), or
        with ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
        ELIGIBLE_LEADERS_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION."""
        ...

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, tuple[int, ...] | None],
    ) -> dict[TopicPartition, PartitionOutcome]:
        """Start (target replicas), replace or cancel (None) reassignments (KIP-455);
        each partition is answered once the image shows the reassignment started (or
        done). INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS and
        UNKNOWN_TOPIC_OR_PARTITION per partition. The image's PartitionState carries
        the reassignments in progress."""
        ...

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

    def client_quotas(self) -> Mapping[QuotaEntity, QuotaValues]:
        """Quota entity -> its quotas (key -> value), as the metadata holds them. The
        mapping is replaced, never changed in place, so a reader can tell a change by
        identity."""
        ...

    async def alter_client_quotas(
        self, changes: Mapping[QuotaEntity, Mapping[str, float | None]],
    ) -> None:
        """Set (a value) or remove (None) quota keys of entities the caller checked, in
        one metadata change (Kafka's ClientQuotaControlManager writes ClientQuotaRecords;
        on ZooKeeper, the entities' /config znodes)."""

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
