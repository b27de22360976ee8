"""Kafka 4.3.1's metadata record schemas (``common/metadata/*.json`` in kafka-metadata),
written by hand as frozen dataclasses: kio models the RPCs and the control records but not
these.

Each dataclass field carries its Kafka schema in ``metadata["kafka"]`` (a
:class:`FieldSpec`: Kafka's name, type, versions, nullable versions, tag), and its
dataclass default is Kafka's default for the field. ``codec.py`` encodes and decodes by
these tables; ``tests/unit/test_kraft_record_schema.py`` checks them against the jar field
by field. Every metadata record version is flexible (compact strings and arrays, tagged
fields), so the tables need no flexible-versions column.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

ZERO_UUID = uuid.UUID(int=0)
# The pseudo-versions of a field that exists in no version ("none" in Kafka's schemas).
NO_VERSIONS = (0, -1)
MAX_VERSION = 0x7FFF


def parse_versions(text: str | None) -> tuple[int, int]:
    """Kafka's version range notation: "0+", "1-3", "2", "none" -> (low, high)."""
    if text is None or text == "none":
        return NO_VERSIONS
    if text.endswith("+"):
        return int(text[:-1]), MAX_VERSION
    low, _, high = text.partition("-")
    return int(low), int(high or low)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field as Kafka's schema declares it."""

    name: str  # Kafka's name (PascalCase)
    type: str  # Kafka's type: int32, string, uuid, []int32, []BrokerEndpoint...
    versions: str
    nullable: str | None = None  # nullableVersions
    tag: int | None = None
    tagged: str | None = None  # taggedVersions
    struct: type[Message] | None = None  # the element type of a []Struct field

    def present(self, version: int) -> bool:
        low, high = parse_versions(self.versions)
        return low <= version <= high

    def is_nullable(self, version: int) -> bool:
        low, high = parse_versions(self.nullable)
        return low <= version <= high

    def is_tagged(self, version: int) -> bool:
        low, high = parse_versions(self.tagged)
        return low <= version <= high

    @property
    def element(self) -> str | None:
        """The element type of an array field, None for any other."""
        return self.type[2:] if self.type.startswith("[]") else None


# Kafka's implicit defaults (a schema's "default" overrides them).
_IMPLICIT: Mapping[str, Any] = MappingProxyType({
    "bool": False, "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0,
    "float64": 0.0, "string": "", "bytes": b"", "uuid": ZERO_UUID,
})
_UNSET = object()


def kafka(name: str, type_: str, versions: str, *, nullable: str | None = None,
          tag: int | None = None, default: Any = _UNSET,
          struct: type[Message] | None = None) -> Any:
    """A dataclass field with its Kafka schema; the default is Kafka's implicit one
    unless the schema names another. Tagged fields are tagged in every version they
    exist in, as in every 4.3.1 metadata record. (Ruff cannot see that this returns a
    ``dataclasses.field``: uuid fields carry ``noqa: RUF009``.)"""
    spec = FieldSpec(name, type_, versions, nullable, tag,
                     versions if tag is not None else None, struct)
    if default is _UNSET:
        default = () if type_.startswith("[]") else _IMPLICIT[type_]
    return dataclasses.field(default=default, metadata={"kafka": spec})


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A metadata record or one of its nested structs. ``unknown_tags`` keeps tagged
    fields this table does not know (tag, raw bytes), written back as read, as Kafka's
    generated messages keep ``unknownTaggedFields``."""

    API_KEY: ClassVar[int] = -1
    VERSIONS: ClassVar[tuple[int, int]] = (0, 0)

    unknown_tags: tuple[tuple[int, bytes], ...] = ()


def kafka_fields(cls: type[Message]) -> tuple[tuple[str, FieldSpec], ...]:
    """(attribute, spec) of a message's schema fields in declaration order."""
    return tuple((f.name, f.metadata["kafka"]) for f in dataclasses.fields(cls)
                 if "kafka" in f.metadata)


# --- nested structs -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEndpoint(Message):
    name: str = kafka("Name", "string", "0+")
    host: str = kafka("Host", "string", "0+")
    port: int = kafka("Port", "uint16", "0+")
    security_protocol: int = kafka("SecurityProtocol", "int16", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerFeature(Message):
    name: str = kafka("Name", "string", "0+")
    min_supported_version: int = kafka("MinSupportedVersion", "int16", "0+")
    max_supported_version: int = kafka("MaxSupportedVersion", "int16", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerEndpoint(Message):
    name: str = kafka("Name", "string", "0+")
    host: str = kafka("Host", "string", "0+")
    port: int = kafka("Port", "uint16", "0+")
    security_protocol: int = kafka("SecurityProtocol", "int16", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerFeature(Message):
    name: str = kafka("Name", "string", "0+")
    min_supported_version: int = kafka("MinSupportedVersion", "int16", "0+")
    max_supported_version: int = kafka("MaxSupportedVersion", "int16", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class EntityData(Message):
    entity_type: str = kafka("EntityType", "string", "0+")
    entity_name: str | None = kafka("EntityName", "string", "0+", nullable="0+")


# --- records, by api key ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRecord(Message):
    API_KEY = 0
    VERSIONS = (0, 4)
    broker_id: int = kafka("BrokerId", "int32", "0+")
    is_migrating_zk_broker: bool = kafka("IsMigratingZkBroker", "bool", "2+")
    incarnation_id: uuid.UUID = kafka("IncarnationId", "uuid", "0+")
    broker_epoch: int = kafka("BrokerEpoch", "int64", "0+")
    end_points: tuple[BrokerEndpoint, ...] = kafka(
        "EndPoints", "[]BrokerEndpoint", "0+", struct=BrokerEndpoint)
    features: tuple[BrokerFeature, ...] = kafka(
        "Features", "[]BrokerFeature", "0+", struct=BrokerFeature)
    rack: str | None = kafka("Rack", "string", "0+", nullable="0+")
    fenced: bool = kafka("Fenced", "bool", "0+", default=True)
    in_controlled_shutdown: bool = kafka("InControlledShutdown", "bool", "1+")
    log_dirs: tuple[uuid.UUID, ...] = kafka("LogDirs", "[]uuid", "3+", tag=0)
    cordoned_log_dirs: tuple[uuid.UUID, ...] | None = kafka(
        "CordonedLogDirs", "[]uuid", "4+", nullable="4+", tag=1, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRecord(Message):
    API_KEY = 1
    broker_id: int = kafka("BrokerId", "int32", "0+")
    broker_epoch: int = kafka("BrokerEpoch", "int64", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord(Message):
    API_KEY = 2
    name: str = kafka("Name", "string", "0+")
    topic_id: uuid.UUID = kafka("TopicId", "uuid", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRecord(Message):
    API_KEY = 3
    VERSIONS = (0, 2)
    partition_id: int = kafka("PartitionId", "int32", "0+", default=-1)
    topic_id: uuid.UUID = kafka("TopicId", "uuid", "0+")
    replicas: tuple[int, ...] = kafka("Replicas", "[]int32", "0+")
    isr: tuple[int, ...] = kafka("Isr", "[]int32", "0+")
    removing_replicas: tuple[int, ...] = kafka("RemovingReplicas", "[]int32", "0+")
    adding_replicas: tuple[int, ...] = kafka("AddingReplicas", "[]int32", "0+")
    leader: int = kafka("Leader", "int32", "0+", default=-1)
    leader_recovery_state: int = kafka("LeaderRecoveryState", "int8", "0+", tag=0)
    leader_epoch: int = kafka("LeaderEpoch", "int32", "0+", default=-1)
    partition_epoch: int = kafka("PartitionEpoch", "int32", "0+", default=-1)
    directories: tuple[uuid.UUID, ...] = kafka("Directories", "[]uuid", "1+")
    eligible_leader_replicas: tuple[int, ...] | None = kafka(
        "EligibleLeaderReplicas", "[]int32", "2+", nullable="2+", tag=1, default=None)
    last_known_elr: tuple[int, ...] | None = kafka(
        "LastKnownElr", "[]int32", "2+", nullable="2+", tag=2, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord(Message):
    API_KEY = 4
    resource_type: int = kafka("ResourceType", "int8", "0+")
    resource_name: str = kafka("ResourceName", "string", "0+")
    name: str = kafka("Name", "string", "0+")
    value: str | None = kafka("Value", "string", "0+", nullable="0+")


# PartitionChangeRecord.leader: -2 means the leader did not change, -1 no leader.
NO_LEADER_CHANGE = -2


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChangeRecord(Message):
    """Tagged fields at their defaults (None, -2, -1) mean "unchanged"."""

    API_KEY = 5
    VERSIONS = (0, 2)
    partition_id: int = kafka("PartitionId", "int32", "0+", default=-1)
    topic_id: uuid.UUID = kafka("TopicId", "uuid", "0+")
    isr: tuple[int, ...] | None = kafka(
        "Isr", "[]int32", "0+", nullable="0+", tag=0, default=None)
    leader: int = kafka("Leader", "int32", "0+", tag=1, default=NO_LEADER_CHANGE)
    replicas: tuple[int, ...] | None = kafka(
        "Replicas", "[]int32", "0+", nullable="0+", tag=2, default=None)
    removing_replicas: tuple[int, ...] | None = kafka(
        "RemovingReplicas", "[]int32", "0+", nullable="0+", tag=3, default=None)
    adding_replicas: tuple[int, ...] | None = kafka(
        "AddingReplicas", "[]int32", "0+", nullable="0+", tag=4, default=None)
    leader_recovery_state: int = kafka("LeaderRecoveryState", "int8", "0+", tag=5, default=-1)
    directories: tuple[uuid.UUID, ...] | None = kafka(
        "Directories", "[]uuid", "1+", nullable="1+", tag=8, default=None)
    eligible_leader_replicas: tuple[int, ...] | None = kafka(
        "EligibleLeaderReplicas", "[]int32", "2+", nullable="2+", tag=6, default=None)
    last_known_elr: tuple[int, ...] | None = kafka(
        "LastKnownElr", "[]int32", "2+", nullable="2+", tag=7, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBrokerRecord(Message):
    API_KEY = 7
    id: int = kafka("Id", "int32", "0+")
    epoch: int = kafka("Epoch", "int64", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfenceBrokerRecord(Message):
    API_KEY = 8
    id: int = kafka("Id", "int32", "0+")
    epoch: int = kafka("Epoch", "int64", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveTopicRecord(Message):
    API_KEY = 9
    topic_id: uuid.UUID = kafka("TopicId", "uuid", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class DelegationTokenRecord(Message):
    API_KEY = 10
    owner: str = kafka("Owner", "string", "0+")
    requester: str = kafka("Requester", "string", "0+")
    renewers: tuple[str, ...] = kafka("Renewers", "[]string", "0+")
    issue_timestamp: int = kafka("IssueTimestamp", "int64", "0+")
    max_timestamp: int = kafka("MaxTimestamp", "int64", "0+")
    expiration_timestamp: int = kafka("ExpirationTimestamp", "int64", "0+")
    token_id: str = kafka("TokenId", "string", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialRecord(Message):
    API_KEY = 11
    name: str = kafka("Name", "string", "0+")
    mechanism: int = kafka("Mechanism", "int8", "0+")
    salt: bytes = kafka("Salt", "bytes", "0+")
    stored_key: bytes = kafka("StoredKey", "bytes", "0+")
    server_key: bytes = kafka("ServerKey", "bytes", "0+")
    iterations: int = kafka("Iterations", "int32", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureLevelRecord(Message):
    API_KEY = 12
    name: str = kafka("Name", "string", "0+")
    feature_level: int = kafka("FeatureLevel", "int16", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotaRecord(Message):
    API_KEY = 14
    entity: tuple[EntityData, ...] = kafka("Entity", "[]EntityData", "0+", struct=EntityData)
    key: str = kafka("Key", "string", "0+")
    value: float = kafka("Value", "float64", "0+")
    remove: bool = kafka("Remove", "bool", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsRecord(Message):
    API_KEY = 15
    broker_id: int = kafka("BrokerId", "int32", "0+")
    broker_epoch: int = kafka("BrokerEpoch", "int64", "0+", default=-1)
    next_producer_id: int = kafka("NextProducerId", "int64", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationChangeRecord(Message):
    """``fenced``: -1 unfenced, 0 no change, 1 fenced; ``in_controlled_shutdown``: 0 no
    change, 1 in controlled shutdown; ``cordoned_log_dirs`` None: no change."""

    API_KEY = 17
    VERSIONS = (0, 3)
    broker_id: int = kafka("BrokerId", "int32", "0+")
    broker_epoch: int = kafka("BrokerEpoch", "int64", "0+")
    fenced: int = kafka("Fenced", "int8", "0+", tag=0)
    in_controlled_shutdown: int = kafka("InControlledShutdown", "int8", "1+", tag=1)
    log_dirs: tuple[uuid.UUID, ...] = kafka("LogDirs", "[]uuid", "2+", tag=2)
    cordoned_log_dirs: tuple[uuid.UUID, ...] | None = kafka(
        "CordonedLogDirs", "[]uuid", "3+", nullable="3+", tag=3, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntryRecord(Message):
    API_KEY = 18
    id: uuid.UUID = kafka("Id", "uuid", "0+")
    resource_type: int = kafka("ResourceType", "int8", "0+")
    resource_name: str = kafka("ResourceName", "string", "0+")
    pattern_type: int = kafka("PatternType", "int8", "0+")
    principal: str = kafka("Principal", "string", "0+")
    host: str = kafka("Host", "string", "0+")
    operation: int = kafka("Operation", "int8", "0+")
    permission_type: int = kafka("PermissionType", "int8", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveAccessControlEntryRecord(Message):
    API_KEY = 19
    id: uuid.UUID = kafka("Id", "uuid", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class NoOpRecord(Message):
    API_KEY = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class ZkMigrationStateRecord(Message):
    API_KEY = 21
    zk_migration_state: int = kafka("ZkMigrationState", "int8", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveUserScramCredentialRecord(Message):
    API_KEY = 22
    name: str = kafka("Name", "string", "0+")
    mechanism: int = kafka("Mechanism", "int8", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class BeginTransactionRecord(Message):
    API_KEY = 23
    name: str | None = kafka("Name", "string", "0+", nullable="0+", tag=0, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionRecord(Message):
    API_KEY = 24


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortTransactionRecord(Message):
    API_KEY = 25
    reason: str | None = kafka("Reason", "string", "0+", nullable="0+", tag=0, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveDelegationTokenRecord(Message):
    API_KEY = 26
    token_id: str = kafka("TokenId", "string", "0+")


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterControllerRecord(Message):
    API_KEY = 27
    controller_id: int = kafka("ControllerId", "int32", "0+")
    incarnation_id: uuid.UUID = kafka("IncarnationId", "uuid", "0+")
    zk_migration_ready: bool = kafka("ZkMigrationReady", "bool", "0+")
    end_points: tuple[ControllerEndpoint, ...] = kafka(
        "EndPoints", "[]ControllerEndpoint", "0+", struct=ControllerEndpoint)
    features: tuple[ControllerFeature, ...] = kafka(
        "Features", "[]ControllerFeature", "0+", struct=ControllerFeature)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClearElrRecord(Message):
    API_KEY = 28
    topic_name: str = kafka("TopicName", "string", "0+")


# Every metadata record type of Kafka 4.3.1, by api key (6, 13 and 16 were retired).
METADATA_RECORDS: Mapping[int, type[Message]] = MappingProxyType({
    cls.API_KEY: cls for cls in (
        RegisterBrokerRecord, UnregisterBrokerRecord, TopicRecord, PartitionRecord,
        ConfigRecord, PartitionChangeRecord, FenceBrokerRecord, UnfenceBrokerRecord,
        RemoveTopicRecord, DelegationTokenRecord, UserScramCredentialRecord,
        FeatureLevelRecord, ClientQuotaRecord, ProducerIdsRecord,
        BrokerRegistrationChangeRecord, AccessControlEntryRecord,
        RemoveAccessControlEntryRecord, NoOpRecord, ZkMigrationStateRecord,
        RemoveUserScramCredentialRecord, BeginTransactionRecord, EndTransactionRecord,
        AbortTransactionRecord, RemoveDelegationTokenRecord, RegisterControllerRecord,
        ClearElrRecord,
    )
})
