"""Replaying metadata records into immutable cluster images.

``MetadataDelta`` plays records on top of one image and builds the next one, as KRaft's
MetadataDelta does. Only the topics a change touches are copied, so an image costs the
size of the change plus one shallow copy of the topic maps, and images already handed
out never change. The same code replays the log at startup and applies every change
before it is written, so a batch on disk is always one that replays cleanly.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kernel.api.cluster import (
    AclBinding,
    BrokerEndpoint,
    BrokerRegistration,
    ClusterImage,
    PartitionState,
    QuotaEntity,
    QuotaValues,
    ScramCredential,
    TopicImage,
    entity_of,
    is_internal_topic,
)

from .log import MetadataLogError
from .records.schema import (
    NO_LEADER_CHANGE,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    Message,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)

CLUSTER_DEFAULT_BROKER = -1  # ClusterImage.broker_configs key of cluster-wide defaults


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type codes, as ConfigRecord stores them."""

    TOPIC = 2
    BROKER = 4


class SecurityProtocol(enum.IntEnum):
    """Kafka's SecurityProtocol ids, as RegisterBrokerRecord's endpoints store them."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


def empty_image(cluster_id: str, controller_id: int) -> ClusterImage:
    return ClusterImage(
        cluster_id=cluster_id,
        controller_id=controller_id,
        brokers=MappingProxyType({}),
        topics=MappingProxyType({}),
        topics_by_id=MappingProxyType({}),
        broker_configs=MappingProxyType({}),
    )


def _protocol_name(code: int) -> str:
    try:
        return SecurityProtocol(code).name
    except ValueError:
        raise MetadataLogError(f"RegisterBrokerRecord: unknown security protocol {code}") from None


def broker_resource_name(broker_id: int) -> str:
    """ConfigRecord's resource name of a broker: "" is the cluster-wide default."""
    return "" if broker_id == CLUSTER_DEFAULT_BROKER else str(broker_id)


@dataclass(frozen=True, slots=True)
class RegisteredBroker:
    """The controller's view of one broker registration (KRaft's
    ``org.apache.kafka.metadata.BrokerRegistration``): what the kernel's
    ``BrokerRegistration`` leaves out. ``registered_offset`` is the offset of its latest
    RegisterBrokerRecord (ClusterControlManager.registerBrokerRecordOffset), which the
    broker's metadata offset must reach before it is unfenced."""

    broker_id: int
    incarnation_id: uuid.UUID
    epoch: int
    fenced: bool
    in_controlled_shutdown: bool
    features: Mapping[str, tuple[int, int]]
    log_dirs: tuple[uuid.UUID, ...]
    cordoned_log_dirs: tuple[uuid.UUID, ...] | None
    rack: str | None
    registered_offset: int


@dataclass
class _TopicBuilder:
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, topic: TopicImage) -> _TopicBuilder:
        return cls(topic.name, topic.topic_id, topic.internal, dict(topic.partitions),
                   dict(topic.configs))

    def build(self) -> TopicImage:
        return TopicImage(
            name=self.name,
            topic_id=self.topic_id,
            partitions=MappingProxyType(dict(sorted(self.partitions.items()))),
            configs=MappingProxyType(dict(self.configs)),
            internal=self.internal,
        )


class MetadataDelta:
    """Records replayed on top of ``base``; ``apply()`` returns the next image.

    ``replay`` raises MetadataLogError for a record that contradicts the state (a
    partition of an unknown topic, a second topic of one name): applied before a write,
    that is a controller bug caught before it reaches the log.

    ``next_producer_id`` is the first producer id no block has taken (KRaft's
    ProducerIdsImage); it is the controller's, not the brokers', so it stays out of the
    ``ClusterImage``.
    """

    def __init__(
        self, base: ClusterImage, next_producer_id: int = 0,
        scram_credentials: Mapping[tuple[str, int], ScramCredential] | None = None,
        acls: Mapping[uuid.UUID, AclBinding] | None = None,
        client_quotas: Mapping[QuotaEntity, QuotaValues] | None = None,
        *,
        broker_registrations: Mapping[int, RegisteredBroker] | None = None,
        features: Mapping[str, int] | None = None,
        broker_records: Mapping[int, RegisterBrokerRecord] | None = None,
    ) -> None:
        self._base = base
        self.next_producer_id = next_producer_id
        # (user, mechanism) -> credential (KRaft's ScramImage), like next_producer_id
        # outside the ClusterImage: only the SASL plugin reads it.
        self.scram_credentials = dict(scram_credentials or {})
        # ACL id -> binding (KRaft's AclsImage), outside the ClusterImage too: only the
        # authorizer reads it. Copied on the first ACL record, so a delta without one
        # hands the same mapping on (readers tell a change by identity).
        self._base_acls: Mapping[uuid.UUID, AclBinding] = acls or MappingProxyType({})
        self._acls: dict[uuid.UUID, AclBinding] | None = None
        # Quota entity -> key -> value (KRaft's ClientQuotasImage), handed on like the
        # ACLs: the kernel's quota lookups read it, and tell a change by identity.
        self._base_quotas: Mapping[QuotaEntity, QuotaValues] = (
            client_quotas or MappingProxyType({}))
        self._quotas: dict[QuotaEntity, dict[str, float]] | None = None
        self._brokers: dict[int, BrokerRegistration] | None = None
        # Broker id -> the controller's registration (KRaft's ClusterImage of
        # BrokerRegistrations): epoch, fencing, controlled shutdown, features. Outside
        # the ClusterImage like next_producer_id: the controller reads it.
        self.broker_registrations: dict[int, RegisteredBroker] = dict(
            broker_registrations or {})
        self._broker_configs: dict[int, dict[str, str]] | None = None
        self._topics: dict[uuid.UUID, _TopicBuilder] = {}
        self._removed: set[uuid.UUID] = set()
        # Names created or removed in this delta (None: removed), over base.topics.
        self._names: dict[str, uuid.UUID | None] = {}
        # Finalized feature levels (KRaft's FeaturesImage): metadata.version first.
        self.features: dict[str, int] = dict(features or {})
        # Each broker's latest registration as recorded (incarnation, epoch, log dirs):
        # a snapshot writes it back whole.
        self.broker_records: dict[int, RegisterBrokerRecord] = dict(broker_records or {})

    # -- lookups over base + delta -------------------------------------------

    def _topic_id(self, name: str) -> uuid.UUID | None:
        if name in self._names:
            return self._names[name]
        topic = self._base.topics.get(name)
        return None if topic is None else topic.topic_id

    def _topic(self, topic_id: uuid.UUID, what: str) -> _TopicBuilder:
        builder = self._topics.get(topic_id)
        if builder is None:
            base = None if topic_id in self._removed else self._base.topics_by_id.get(topic_id)
            if base is None:
                raise MetadataLogError(f"{what} for unknown topic id {topic_id}")
            builder = self._topics[topic_id] = _TopicBuilder.of(base)
        return builder

    # -- replay ---------------------------------------------------------------

    def replay(self, record: Message, offset: int | None = None) -> None:
        """``offset``: where the record sits in the metadata log, when known (a
        RegisterBrokerRecord's offset is what its broker must catch up to; without it,
        its broker epoch, which Kafka's controller sets to that offset)."""
        match record:
            case RegisterBrokerRecord():
                self._replay_register_broker(record)
                self._track_registration(record, offset)
            case BrokerRegistrationChangeRecord():
                self._replay_registration_change(
                    record, record.broker_id, record.broker_epoch,
                    fenced=record.fenced, in_controlled_shutdown=record.in_controlled_shutdown,
                    cordoned_log_dirs=record.cordoned_log_dirs,
                    log_dirs=record.log_dirs or None)
            case FenceBrokerRecord():
                self._replay_registration_change(record, record.id, record.epoch, fenced=1)
            case UnfenceBrokerRecord():
                self._replay_registration_change(record, record.id, record.epoch, fenced=-1)
            case UnregisterBrokerRecord():
                self._replay_unregister_broker(record)
            case TopicRecord():
                self._replay_topic(record)
            case PartitionRecord():
                self._replay_partition(record)
            case PartitionChangeRecord():
                self._replay_partition_change(record)
            case RemoveTopicRecord():
                self._replay_remove_topic(record)
            case ConfigRecord():
                self._replay_config(record)
            case ProducerIdsRecord():
                self._replay_producer_ids(record)
            case UserScramCredentialRecord():
                self.scram_credentials[(record.name, record.mechanism)] = ScramCredential(
                    record.name, record.mechanism, record.salt, record.stored_key,
                    record.server_key, record.iterations)
            case RemoveUserScramCredentialRecord():
                if self.scram_credentials.pop((record.name, record.mechanism), None) is None:
                    raise MetadataLogError(
                        f"RemoveUserScramCredentialRecord for {record.name!r} mechanism "
                        f"{record.mechanism}, which has no credential")
            case AccessControlEntryRecord():
                self._changed_acls()[record.id] = AclBinding(
                    record.resource_type, record.resource_name, record.pattern_type,
                    record.principal, record.host, record.operation, record.permission_type)
            case RemoveAccessControlEntryRecord():
                if self._changed_acls().pop(record.id, None) is None:
                    raise MetadataLogError(
                        f"RemoveAccessControlEntryRecord for ACL {record.id}, which is not stored")
            case ClientQuotaRecord():
                self._replay_client_quota(record)
            case FeatureLevelRecord():
                self.features[record.name] = record.feature_level
            case NoOpRecord() | BeginTransactionRecord() | EndTransactionRecord():
                pass  # a single node writes each operation as one atomic batch
            case _:
                raise MetadataLogError(f"cannot replay {record!r}")

    def _replay_client_quota(self, record: ClientQuotaRecord) -> None:
        if self._quotas is None:
            self._quotas = {e: dict(v) for e, v in self._base_quotas.items()}
        entity = entity_of((e.entity_type, e.entity_name) for e in record.entity)
        values = self._quotas.setdefault(entity, {})
        if record.remove:
            values.pop(record.key, None)
            if not values:
                del self._quotas[entity]
        else:
            values[record.key] = record.value

    @property
    def client_quotas(self) -> Mapping[QuotaEntity, QuotaValues]:
        """The quotas after this delta: the base's own mapping when no record changed them."""
        if self._quotas is None:
            return self._base_quotas
        return MappingProxyType({e: MappingProxyType(v) for e, v in self._quotas.items()})

    def _changed_acls(self) -> dict[uuid.UUID, AclBinding]:
        if self._acls is None:
            self._acls = dict(self._base_acls)
        return self._acls

    @property
    def acls(self) -> Mapping[uuid.UUID, AclBinding]:
        """The ACLs after this delta: the base's own mapping when no record changed them."""
        return self._base_acls if self._acls is None else MappingProxyType(self._acls)

    def _replay_register_broker(self, record: RegisterBrokerRecord) -> None:
        if self._brokers is None:
            self._brokers = dict(self._base.brokers)
        if not record.end_points:
            raise MetadataLogError(f"RegisterBrokerRecord of broker {record.broker_id} "
                                   "has no endpoints")
        self.broker_records[record.broker_id] = record
        self._brokers[record.broker_id] = BrokerRegistration.of(
            record.broker_id,
            tuple(BrokerEndpoint(e.name, e.host, e.port, _protocol_name(e.security_protocol))
                  for e in record.end_points),
            record.rack, fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
        )

    def _track_registration(self, record: RegisterBrokerRecord, offset: int | None) -> None:
        self.broker_registrations[record.broker_id] = RegisteredBroker(
            broker_id=record.broker_id, incarnation_id=record.incarnation_id,
            epoch=record.broker_epoch, fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            features=MappingProxyType({f.name: (f.min_supported_version,
                                                f.max_supported_version)
                                       for f in record.features}),
            log_dirs=record.log_dirs, cordoned_log_dirs=record.cordoned_log_dirs,
            rack=record.rack,
            registered_offset=record.broker_epoch if offset is None else offset)

    def _registration(self, record: Message, broker_id: int, epoch: int) -> RegisteredBroker:
        # As ClusterControlManager.replay: a change of an unknown registration, or of
        # another incarnation's epoch, is a log the controller could not have written.
        current = self.broker_registrations.get(broker_id)
        if current is None:
            raise MetadataLogError(f"{type(record).__name__} for broker {broker_id}, "
                                   "which has no registration")
        if current.epoch != epoch:
            raise MetadataLogError(f"{type(record).__name__} for broker {broker_id} at "
                                   f"epoch {epoch}, but its registration has epoch "
                                   f"{current.epoch}")
        return current

    def _replay_registration_change(
        self, record: Message, broker_id: int, epoch: int, *, fenced: int = 0,
        in_controlled_shutdown: int = 0,
        cordoned_log_dirs: tuple[uuid.UUID, ...] | None = None,
        log_dirs: tuple[uuid.UUID, ...] | None = None,
    ) -> None:
        current = self._registration(record, broker_id, epoch)
        if fenced not in (-1, 0, 1) or in_controlled_shutdown not in (0, 1):
            raise MetadataLogError(f"{record!r}: invalid fencing or shutdown change")
        # BrokerRegistrationFencingChange: 1 fence, -1 unfence, 0 none; controlled
        # shutdown is only ever entered (BrokerRegistration.cloneWith).
        now_fenced = current.fenced if fenced == 0 else fenced == 1
        shutting_down = current.in_controlled_shutdown or in_controlled_shutdown == 1
        self.broker_registrations[broker_id] = dataclasses.replace(
            current, fenced=now_fenced, in_controlled_shutdown=shutting_down,
            cordoned_log_dirs=(current.cordoned_log_dirs if cordoned_log_dirs is None
                               else cordoned_log_dirs),
            log_dirs=current.log_dirs if log_dirs is None else log_dirs)
        self._set_broker_flags(broker_id, now_fenced, shutting_down)

    def _set_broker_flags(self, broker_id: int, fenced: bool,
                          in_controlled_shutdown: bool) -> None:
        """The kernel image's copy of a registration's fencing and shutdown flags."""
        if self._brokers is None:
            self._brokers = dict(self._base.brokers)
        registered = self._brokers.get(broker_id)
        if registered is not None and (
                registered.fenced, registered.in_controlled_shutdown) != (
                fenced, in_controlled_shutdown):
            self._brokers[broker_id] = dataclasses.replace(
                registered, fenced=fenced, in_controlled_shutdown=in_controlled_shutdown)

    def _replay_unregister_broker(self, record: UnregisterBrokerRecord) -> None:
        self._registration(record, record.broker_id, record.broker_epoch)
        del self.broker_registrations[record.broker_id]
        if self._brokers is None:
            self._brokers = dict(self._base.brokers)
        self._brokers.pop(record.broker_id, None)

    def _replay_topic(self, record: TopicRecord) -> None:
        if self._topic_id(record.name) is not None:
            raise MetadataLogError(f"TopicRecord for existing topic {record.name!r}")
        if record.topic_id in self._topics or record.topic_id in self._base.topics_by_id:
            raise MetadataLogError(f"TopicRecord reuses topic id {record.topic_id}")
        # Kafka derives "internal" from the name (Topic.isInternal).
        self._topics[record.topic_id] = _TopicBuilder(record.name, record.topic_id,
                                                      is_internal_topic(record.name))
        self._names[record.name] = record.topic_id

    def _replay_partition(self, record: PartitionRecord) -> None:
        topic = self._topic(record.topic_id, "PartitionRecord")
        topic.partitions[record.partition_id] = PartitionState(
            partition=record.partition_id,
            replicas=record.replicas,
            isr=record.isr,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
        )

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        topic = self._topic(record.topic_id, "PartitionChangeRecord")
        current = topic.partitions.get(record.partition_id)
        if current is None:
            raise MetadataLogError(
                f"PartitionChangeRecord for unknown partition {topic.name}-{record.partition_id}"
            )
        leader_changed = record.leader != NO_LEADER_CHANGE
        topic.partitions[record.partition_id] = PartitionState(
            partition=record.partition_id,
            replicas=current.replicas if record.replicas is None else record.replicas,
            isr=current.isr if record.isr is None else record.isr,
            leader=record.leader if leader_changed else current.leader,
            leader_epoch=current.leader_epoch + 1 if leader_changed else current.leader_epoch,
            partition_epoch=current.partition_epoch + 1,
            offline_replicas=current.offline_replicas,
        )

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        topic = self._topic(record.topic_id, "RemoveTopicRecord")
        del self._topics[record.topic_id]
        self._names[topic.name] = None
        if record.topic_id in self._base.topics_by_id:
            self._removed.add(record.topic_id)

    def _replay_producer_ids(self, record: ProducerIdsRecord) -> None:
        # As KRaft's ProducerIdControlManager.replay: the next block only moves forward.
        if record.next_producer_id <= self.next_producer_id:
            raise MetadataLogError(
                f"ProducerIdsRecord moves the next producer id back from "
                f"{self.next_producer_id} to {record.next_producer_id}"
            )
        self.next_producer_id = record.next_producer_id

    def _replay_config(self, record: ConfigRecord) -> None:
        if record.resource_type == ConfigResourceType.TOPIC:
            topic_id = self._topic_id(record.resource_name)
            if topic_id is None:
                raise MetadataLogError(f"ConfigRecord for unknown topic {record.resource_name!r}")
            configs = self._topic(topic_id, "ConfigRecord").configs
        else:
            try:
                broker_id = int(record.resource_name) if record.resource_name else -1
            except ValueError:
                raise MetadataLogError(
                    f"ConfigRecord for broker {record.resource_name!r}: not a broker id"
                ) from None
            if self._broker_configs is None:
                self._broker_configs = {
                    b: dict(c) for b, c in self._base.broker_configs.items()
                }
            configs = self._broker_configs.setdefault(broker_id, {})
        if record.value is None:
            configs.pop(record.name, None)
        else:
            configs[record.name] = record.value

    # -- the next image -------------------------------------------------------

    def apply(self) -> ClusterImage:
        base = self._base
        brokers = base.brokers
        if self._brokers is not None:
            brokers = MappingProxyType(dict(sorted(self._brokers.items())))
        broker_configs = base.broker_configs
        if self._broker_configs is not None:
            broker_configs = MappingProxyType({
                b: MappingProxyType(dict(c)) for b, c in sorted(self._broker_configs.items()) if c
            })
        topics, topics_by_id = base.topics, base.topics_by_id
        if self._topics or self._removed:
            by_name = dict(base.topics)
            by_id = dict(base.topics_by_id)
            for topic_id in self._removed:
                del by_name[by_id.pop(topic_id).name]
            for topic_id, builder in self._topics.items():
                image = builder.build()
                by_id[topic_id] = image
                by_name[image.name] = image
            topics, topics_by_id = MappingProxyType(by_name), MappingProxyType(by_id)
        features = base.finalized_features
        if self.features:
            # As KRaft's FeaturesDelta: a level of 0 removes the feature.
            changed = {**features, **self.features}
            features = MappingProxyType(
                {name: level for name, level in sorted(changed.items()) if level > 0})
        return ClusterImage(
            cluster_id=base.cluster_id,
            controller_id=base.controller_id,
            brokers=brokers,
            topics=topics,
            topics_by_id=topics_by_id,
            broker_configs=broker_configs,
            finalized_features=features,
            metadata_offset=base.metadata_offset,
        )
