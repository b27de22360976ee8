"""What the controller's rules read: the image, the registrations and the finalized
features, committed plus pending (appended, not yet committed)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kernel.api.cluster import ClusterImage

from ..image import MetadataDelta, RegisteredBroker
from ..log import versioned
from ..records.schema import BrokerRegistrationChangeRecord, Message
from ..records.serde import ApiMessageAndVersion

R = TypeVar("R")

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"


@dataclass(frozen=True, slots=True)
class ControllerState:
    image: ClusterImage
    registrations: Mapping[int, RegisteredBroker] = field(default_factory=dict)
    # Finalized feature levels (metadata.version, eligible.leader.replicas.version...).
    features: Mapping[str, int] = field(default_factory=dict)
    next_producer_id: int = 0

    @classmethod
    def of(cls, delta: MetadataDelta, features: Mapping[str, int]) -> ControllerState:
        """The state after ``delta``; features are passed whole (a delta holds only
        the FeatureLevelRecords it replayed)."""
        return cls(delta.apply(), dict(delta.broker_registrations),
                   {**features, **delta.features}, delta.next_producer_id)

    def is_active(self, broker_id: int) -> bool:
        """ClusterControlManager.isActive: registered, unfenced, not shutting down, the
        brokers an election may choose."""
        r = self.registrations.get(broker_id)
        return r is not None and not r.fenced and not r.in_controlled_shutdown

    def active_brokers(self) -> frozenset[int]:
        return frozenset(b for b in self.registrations if self.is_active(b))

    def unclean_election(self, topic: str) -> bool:
        """ConfigurationControlManager.uncleanLeaderElectionEnabledForTopic: the
        topic's setting, else the cluster default, else false."""
        t = self.image.topics.get(topic)
        value = None if t is None else t.configs.get(UNCLEAN_LEADER_ELECTION)
        if value is None:
            value = self.image.broker_configs.get(-1, {}).get(UNCLEAN_LEADER_ELECTION)
        return (value or "false").lower() == "true"


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """Kafka's ControllerResult: records to append (atomically, in one batch) and the
    answer, sent once they are committed."""

    records: tuple[Message, ...]
    response: R


def as_written(record: Message) -> ApiMessageAndVersion:
    """The record at the version Kafka 4.3.1's controller writes it:
    BrokerRegistrationChangeRecord at the lowest version holding its change (v0
    fencing, v1 controlled shutdown, v2 log dirs, v3 cordoned dirs: handleBrokerFenced,
    handleBrokerInControlledShutdown, handleDirectoriesOffline,
    handleDirectoriesCordoned), every other record at its highest (``log.versioned``)."""
    if isinstance(record, BrokerRegistrationChangeRecord):
        version = 3 if record.cordoned_log_dirs is not None else 2 if record.log_dirs \
            else 1 if record.in_controlled_shutdown else 0
        return ApiMessageAndVersion(record, version)
    return versioned(record)
