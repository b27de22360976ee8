"""Feature levels (KIP-584): what this node supports, and UpdateFeatures checked as
Kafka 4.3.1's FeatureControlManager checks it.

A supported range claims behaviour: Kafkernel serves none of what group.version 1
(KIP-848), share.version 1 (share groups), streams.version 1 (KIP-1071),
transaction.version 1-2 (KIP-890's flexible log values and epoch bumps),
eligible.leader.replicas.version 1 (KIP-966) or kraft.version 1 (KIP-853) turn on, so
each stays at 0 here where Kafka 4.3.1 supports 1 or 2; and it writes every record at
4.3's versions, so metadata.version is 30 (4.3-IV0) only. The single node finalizes
metadata.version alone at its first start (levels of 0 are not finalized).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from kernel.api.errors import ErrorCode, KafkaError

from .records.schema import FeatureLevelRecord

METADATA_VERSION = "metadata.version"
# metadata.version a new cluster is bootstrapped at: 4.3-IV0, as Kafka 4.3.1's
# `kafka-storage format` finalizes it.
METADATA_VERSION_LEVEL = 30

# Feature name -> (min, max) level this node supports: its ApiVersions SupportedFeatures
# and its RegisterBrokerRecord's features.
SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {
    METADATA_VERSION: (METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    "kraft.version": (0, 0),
    "eligible.leader.replicas.version": (0, 0),
    "group.version": (0, 0),
    "share.version": (0, 0),
    "streams.version": (0, 0),
    "transaction.version": (0, 0),
}
# Kafka's Features.PRODUCTION_FEATURES and metadata.version: a name outside these is
# "not found" even at level 0.
KNOWN_FEATURES = frozenset(SUPPORTED_FEATURES)
DISABLED = (0, 0)

FAILED_PREFIX = "The update failed for all features since the following feature had an error: "


class UpgradeType(enum.IntEnum):
    """FeatureUpdate.UpgradeType codes of UpdateFeatures v1+ (v0 is always UPGRADE:
    Kafka 4.3.1 ignores v0's AllowDowngrade)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


def _reason_not_supported(level: int, what: str, supported: tuple[int, int]) -> str | None:
    """QuorumFeatures.reasonNotSupported."""
    low, high = supported
    if low <= level <= high:
        return None
    if high == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {low}-{high}"


def feature_level_records(
    finalized: Mapping[str, int],
    updates: Mapping[str, tuple[int, int]],
    *,
    node_id: int,
    supported: Mapping[str, tuple[int, int]],
    brokers: Mapping[int, Mapping[str, tuple[int, int]]],
) -> list[FeatureLevelRecord]:
    """The FeatureLevelRecords of ``updates`` (name -> (level, upgrade type)) over the
    ``finalized`` levels, as FeatureControlManager.updateFeatures: all or none, the
    first refusal raised as INVALID_UPDATE_VERSION in Kafka's words (without the
    prefix QuorumController adds). ``brokers``: each registered broker's supported
    ranges, which must all allow the new level."""
    records: list[FeatureLevelRecord] = []
    for name, (level, upgrade_type) in updates.items():
        def invalid(message: str, name: str = name, level: int = level) -> KafkaError:
            return KafkaError(ErrorCode.invalid_update_version,
                              f"Invalid update version {level} for feature {name}. {message}")

        if upgrade_type not in tuple(UpgradeType):
            raise invalid("The controller does not support the given upgrade type.")
        current = finalized.get(name, 0)
        if level < 0:
            raise invalid("A feature version cannot be less than 0.")
        reason = _reason_not_supported(level, f"Local controller {node_id}",
                                       supported.get(name, DISABLED))
        for broker_id, ranges in sorted(brokers.items()):
            if reason is not None:
                break
            reason = _reason_not_supported(level, f"Broker {broker_id}",
                                           ranges.get(name, DISABLED))
        if reason is not None:
            raise invalid(reason)
        if level < current and upgrade_type == UpgradeType.UPGRADE:
            raise invalid("Can't downgrade the version of this feature without setting "
                          "the upgrade type to either safe or unsafe downgrade.")
        if level > current and upgrade_type != UpgradeType.UPGRADE:
            raise invalid("Can't downgrade to a newer version.")
        if name not in KNOWN_FEATURES:
            raise invalid(f"Feature {name} not found.")
        # metadata.version supports one level here, so neither of Kafka's downgrade
        # refusals of it can be reached; no level above 0 we support has dependencies.
        records.append(FeatureLevelRecord(name=name, feature_level=level))
    return records
