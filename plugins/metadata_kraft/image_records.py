"""The committed metadata state, and the records that rebuild it (a snapshot's body).

``MetadataState`` is everything replaying the log builds: the ``ClusterImage`` brokers
and handlers read, and what only the controller and plugins read (features, broker
registrations as recorded, the next producer id, SCRAM credentials, ACLs, quotas).
``image_records`` writes it back as Kafka's ``MetadataImage.write`` does, in its order:
features (metadata.version first), brokers, topics and partitions, configs, client
quotas, producer ids, ACLs, SCRAM credentials. Replaying them on an empty image gives an
equal state.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kernel.api.cluster import AclBinding, ClusterImage, QuotaEntity, QuotaValues, ScramCredential

from .image import (
    ConfigResourceType,
    MetadataDelta,
    RegisteredBroker,
    broker_resource_name,
    empty_image,
)
from .records.schema import (
    AccessControlEntryRecord,
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

METADATA_VERSION_FEATURE = "metadata.version"


@dataclass(frozen=True, slots=True)
class MetadataState:
    image: ClusterImage
    features: Mapping[str, int]
    broker_records: Mapping[int, RegisterBrokerRecord]
    next_producer_id: int
    scram_credentials: Mapping[tuple[str, int], ScramCredential]
    acls: Mapping[uuid.UUID, AclBinding]
    client_quotas: Mapping[QuotaEntity, QuotaValues]
    # broker id -> the controller's view of its registration (fencing, epochs): rebuilt
    # from the RegisterBrokerRecords a snapshot holds, so not written itself.
    broker_registrations: Mapping[int, RegisteredBroker] = field(
        default_factory=lambda: MappingProxyType({}))

    @classmethod
    def empty(cls, cluster_id: str, controller_id: int) -> MetadataState:
        return cls(empty_image(cluster_id, controller_id), MappingProxyType({}),
                   MappingProxyType({}), 0, MappingProxyType({}), MappingProxyType({}),
                   MappingProxyType({}))

    def delta(self) -> MetadataDelta:
        """A delta whose records are replayed on top of this state."""
        return MetadataDelta(self.image, self.next_producer_id, self.scram_credentials,
                             self.acls, self.client_quotas, features=self.features,
                             broker_records=self.broker_records,
                             broker_registrations=self.broker_registrations)

    @classmethod
    def of(cls, delta: MetadataDelta, image: ClusterImage) -> MetadataState:
        """The state after ``delta``, whose ``apply()`` gave ``image``."""
        return cls(image, MappingProxyType(dict(delta.features)),
                   MappingProxyType(dict(delta.broker_records)), delta.next_producer_id,
                   MappingProxyType(dict(delta.scram_credentials)), delta.acls,
                   delta.client_quotas, MappingProxyType(dict(delta.broker_registrations)))


def replay(state: MetadataState, records: Iterable[Message]) -> MetadataState:
    delta = state.delta()
    for record in records:
        delta.replay(record)
    return MetadataState.of(delta, delta.apply())


def image_records(state: MetadataState,
                  default_dir: Callable[[int], uuid.UUID]) -> list[Message]:
    """Records that rebuild ``state`` from an empty image, in MetadataImage.write's
    order. ``default_dir`` gives a replica's directory (the image does not keep
    PartitionRecord's ``Directories``)."""
    image = state.image
    records: list[Message] = []
    features = state.features
    if METADATA_VERSION_FEATURE in features:
        records.append(FeatureLevelRecord(name=METADATA_VERSION_FEATURE,
                                          feature_level=features[METADATA_VERSION_FEATURE]))
    records.extend(FeatureLevelRecord(name=name, feature_level=level)
                   for name, level in sorted(features.items())
                   if name != METADATA_VERSION_FEATURE)
    records.extend(state.broker_records[b] for b in sorted(state.broker_records))
    configs: list[Message] = []
    for topic in sorted(image.topics.values(), key=lambda t: t.name):
        records.append(TopicRecord(name=topic.name, topic_id=topic.topic_id))
        records.extend(PartitionRecord(
            partition_id=p.partition, topic_id=topic.topic_id, replicas=p.replicas,
            isr=p.isr, removing_replicas=p.removing_replicas,
            adding_replicas=p.adding_replicas, leader=p.leader,
            leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
            directories=tuple(default_dir(r) for r in p.replicas),
        ) for p in topic.partitions.values())
        configs.extend(ConfigRecord(resource_type=ConfigResourceType.TOPIC,
                                    resource_name=topic.name, name=k, value=v)
                       for k, v in sorted(topic.configs.items()))
    for broker_id, values in sorted(image.broker_configs.items()):
        records.extend(ConfigRecord(resource_type=ConfigResourceType.BROKER,
                                    resource_name=broker_resource_name(broker_id),
                                    name=k, value=v) for k, v in sorted(values.items()))
    records.extend(configs)
    for entity, quota in state.client_quotas.items():
        data = tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity)
        records.extend(ClientQuotaRecord(entity=data, key=k, value=v, remove=False)
                       for k, v in sorted(quota.items()))
    if state.next_producer_id > 0:
        # ProducerIdsImage.write: the broker fields are not kept
        records.append(ProducerIdsRecord(broker_id=-1, broker_epoch=-1,
                                         next_producer_id=state.next_producer_id))
    records.extend(AccessControlEntryRecord(
        id=acl_id, resource_type=b.resource_type, resource_name=b.resource_name,
        pattern_type=b.pattern_type, principal=b.principal, host=b.host,
        operation=b.operation, permission_type=b.permission_type)
        for acl_id, b in state.acls.items())
    records.extend(UserScramCredentialRecord(
        name=c.name, mechanism=c.mechanism, salt=c.salt, stored_key=c.stored_key,
        server_key=c.server_key, iterations=c.iterations)
        for _, c in sorted(state.scram_credentials.items()))
    return records
