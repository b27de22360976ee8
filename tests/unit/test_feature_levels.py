"""Fenced brokers and finalized features in the image (metadata_kraft's replay), where
new replicas go while brokers are fenced, UpdateFeatures' checks in Kafka's words, and
the single node's feature levels across a restart."""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path
from types import MappingProxyType

import pytest

from kernel.cluster import BrokerRegistration, ClusterImage, NewTopic, PartitionState, TopicImage
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.replication_control import (
    added_partitions_assignment,
    check_alter_partition,
    new_topic_assignment,
)
from plugins.metadata_kraft import KRaftMetadataBackend
from plugins.metadata_kraft.features import (
    SUPPORTED_FEATURES,
    UpgradeType,
    feature_level_records,
)
from plugins.metadata_kraft.image import MetadataDelta, empty_image
from plugins.metadata_kraft.records.schema import (
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from plugins.metadata_kraft.records.serde import decode_batches, iter_metadata_records

UPGRADE, SAFE = UpgradeType.UPGRADE, UpgradeType.SAFE_DOWNGRADE
UNSAFE = UpgradeType.UNSAFE_DOWNGRADE


def register(broker_id: int, *, fenced: bool = False) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=uuid.uuid4(), broker_epoch=broker_id * 10,
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="h", port=9000 + broker_id,
                                   security_protocol=0),),
        fenced=fenced)


def image_of(*records: object) -> tuple[ClusterImage, MetadataDelta]:
    delta = MetadataDelta(empty_image("c", 1))
    for r in records:
        delta.replay(r)  # type: ignore[arg-type]
    return delta.apply(), delta


# -- the image ---------------------------------------------------------------------------

def test_registration_fencing_and_shutdown_reach_the_kernel_image() -> None:
    image, delta = image_of(register(1), register(2, fenced=True), register(3))
    assert [b.fenced for b in image.brokers.values()] == [False, True, False]
    assert sorted(image.alive_brokers) == [1, 3]
    assert image.active_brokers == {1, 3}

    # Kafka 4.3.1 unfences with BrokerRegistrationChangeRecord fenced -1, and marks a
    # controlled shutdown with inControlledShutdown 1.
    nxt = MetadataDelta(image, broker_registrations=delta.broker_registrations)
    nxt.replay(BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=20, fenced=-1))
    nxt.replay(BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=30,
                                              in_controlled_shutdown=1))
    image = nxt.apply()
    assert sorted(image.alive_brokers) == [1, 2, 3]
    assert image.brokers[3].in_controlled_shutdown
    assert image.active_brokers == {1, 2}

    # The older Fence/UnfenceBrokerRecords too.
    nxt = MetadataDelta(image, broker_registrations=nxt.broker_registrations)
    nxt.replay(FenceBrokerRecord(id=1, epoch=10))
    nxt.replay(UnfenceBrokerRecord(id=2, epoch=20))
    image = nxt.apply()
    assert sorted(image.alive_brokers) == [2, 3]
    assert image.active_brokers == {2}


def test_feature_level_records_finalize_and_level_zero_removes() -> None:
    image, _ = image_of(FeatureLevelRecord(name="metadata.version", feature_level=30),
                        FeatureLevelRecord(name="group.version", feature_level=1))
    assert dict(image.finalized_features) == {"group.version": 1, "metadata.version": 30}
    nxt = MetadataDelta(image)
    nxt.replay(FeatureLevelRecord(name="group.version", feature_level=0))
    assert dict(nxt.apply().finalized_features) == {"metadata.version": 30}
    # A delta without FeatureLevelRecords hands the same mapping on.
    assert MetadataDelta(image).apply().finalized_features is image.finalized_features


# -- placement ---------------------------------------------------------------------------

def brokers(fenced: set[int], shutting_down: frozenset[int] = frozenset(),
            n: int = 4) -> ClusterImage:
    image = empty_image("c", 1)
    regs = {i: BrokerRegistration(i, "h", 9000 + i, fenced=i in fenced,
                                  in_controlled_shutdown=i in shutting_down)
            for i in range(1, n + 1)}
    return ClusterImage("c", 1, MappingProxyType(regs), image.topics, image.topics_by_id)


@pytest.mark.parametrize("seed", range(5))
def test_new_replicas_avoid_fenced_brokers_while_enough_are_active(seed: int) -> None:
    image = brokers({2}, frozenset({4}))
    topic = NewTopic("t", 12, 2)
    for replicas in new_topic_assignment(topic, image, random.Random(seed)):
        assert set(replicas) <= {1, 3}
    added = added_partitions_assignment(12, 20, (1, 3), None, image, random.Random(seed))
    assert all(set(r) <= {1, 3} for r in added)


@pytest.mark.parametrize("seed", range(5))
def test_fenced_brokers_only_follow_when_too_few_are_active(seed: int) -> None:
    image = brokers({2, 3})
    for replicas in new_topic_assignment(NewTopic("t", 8, 3), image, random.Random(seed)):
        assert len(set(replicas)) == 3
        assert replicas[0] in {1, 4}, "a fenced broker must not be the preferred leader"


def test_no_active_broker_is_invalid_replication_factor() -> None:
    with pytest.raises(KafkaError) as info:
        new_topic_assignment(NewTopic("t", 1, 1), brokers({1, 2}, n=2), random.Random(1))
    assert info.value.error_code == ErrorCode.invalid_replication_factor
    assert info.value.message == ("Unable to replicate the partition 1 time(s): All "
                                  "brokers are currently fenced.")
    with pytest.raises(KafkaError) as info:
        new_topic_assignment(NewTopic("t", 1, 1, assignments={0: (2,)}), brokers({2}, n=2),
                             random.Random(1))
    assert info.value.error_code == ErrorCode.invalid_replica_assignment
    assert info.value.message == ("All brokers specified in the manual partition "
                                  "assignment for partition 0 are fenced or in controlled "
                                  "shutdown.")


def test_an_isr_may_not_take_a_fenced_or_shutting_down_broker() -> None:
    image = brokers({2}, frozenset({3}))
    t = TopicImage("t", uuid.uuid4(), {0: PartitionState(0, (1, 2, 3), (1,), 1)})
    image = ClusterImage("c", 1, image.brokers, {"t": t}, {t.topic_id: t})
    assert check_alter_partition(image, "t", 0, (1,), 0, 0).isr == (1,)
    for isr in ((1, 2), (1, 3)):
        with pytest.raises(KafkaError) as info:
            check_alter_partition(image, "t", 0, isr, 0, 0)
        assert info.value.error_code == ErrorCode.ineligible_replica


# -- UpdateFeatures' checks (messages as Kafka 4.3.1's reference answered them) ------------

FINALIZED = {"metadata.version": 30, "group.version": 1}
WIDE = {**SUPPORTED_FEATURES, "group.version": (0, 1)}


def refusal(updates: dict[str, tuple[int, int]], supported: object = WIDE,
            brokers: object = None) -> str:
    with pytest.raises(KafkaError) as info:
        feature_level_records(FINALIZED, updates, node_id=1,
                              supported=supported,  # type: ignore[arg-type]
                              brokers=brokers or {})  # type: ignore[arg-type]
    assert info.value.error_code == ErrorCode.invalid_update_version
    return info.value.message or ""


def test_update_refusals_in_kafkas_words() -> None:
    prefix = "Invalid update version "
    assert refusal({"foo.bar": (1, UPGRADE)}) == (
        prefix + "1 for feature foo.bar. Local controller 1 does not support this feature.")
    assert refusal({"group.version": (5, UPGRADE)}) == (
        prefix + "5 for feature group.version. Local controller 1 only supports versions 0-1")
    assert refusal({"foo": (0, SAFE)}) == prefix + "0 for feature foo. Feature foo not found."
    assert refusal({"group.version": (-2, SAFE)}) == (
        prefix + "-2 for feature group.version. A feature version cannot be less than 0.")
    assert refusal({"group.version": (0, UPGRADE)}) == (
        prefix + "0 for feature group.version. Can't downgrade the version of this feature "
        "without setting the upgrade type to either safe or unsafe downgrade.")
    assert refusal({"share.version": (0, 7)}) == (
        prefix + "0 for feature share.version. The controller does not support the given "
        "upgrade type.")
    assert refusal({"metadata.version": (31, SAFE)}) == (
        prefix + "31 for feature metadata.version. Local controller 1 only supports "
        "versions 30-30")
    assert refusal({"group.version": (1, UPGRADE)}, supported=WIDE,
                   brokers={2: {"group.version": (0, 0)}}) == (
        prefix + "1 for feature group.version. Broker 2 does not support this feature.")


def test_updates_are_all_or_nothing_and_keep_same_levels() -> None:
    # Kafka writes a record even for the level already finalized.
    records = feature_level_records(
        FINALIZED, {"metadata.version": (30, UPGRADE), "group.version": (0, UNSAFE)},
        node_id=1, supported=WIDE, brokers={})
    assert [(r.name, r.feature_level) for r in records] == [
        ("metadata.version", 30), ("group.version", 0)]
    assert refusal({"metadata.version": (30, UPGRADE), "group.version": (2, UPGRADE)})


# -- the single node ---------------------------------------------------------------------

def backend(data: Path, supported: dict[str, tuple[int, int]]) -> KRaftMetadataBackend:
    return KRaftMetadataBackend(data, [data], 1, BrokerRegistration(1, "127.0.0.1", 9092),
                                supported_features=supported)


def test_feature_levels_are_committed_and_survive_restarts(tmp_path: Path) -> None:
    """Upgrade, validate-only, downgrade on a node that supports group.version 0-1 (a
    future Kafkernel's range): each level is in the image after the commit and after a
    restart, the epoch is the log's offset, and the default node refuses it."""

    async def life(supported: dict[str, tuple[int, int]],
                   updates: dict[str, tuple[int, int]] | None = None,
                   validate_only: bool = False) -> tuple[ClusterImage, ClusterImage]:
        b = backend(tmp_path, supported)
        await b.start()
        try:
            before = b.image
            if updates is not None:
                await b.update_features(updates, validate_only)
            return before, b.image
        finally:
            await b.stop()

    def run(*args: object, **kwargs: object) -> tuple[ClusterImage, ClusterImage]:
        return asyncio.run(life(*args, **kwargs))  # type: ignore[arg-type]

    first, _ = run(SUPPORTED_FEATURES)
    assert dict(first.finalized_features) == {"metadata.version": 30}
    assert first.metadata_offset >= 2
    _, checked = run(WIDE, {"group.version": (1, UPGRADE)}, validate_only=True)
    assert "group.version" not in checked.finalized_features
    before, upgraded = run(WIDE, {"group.version": (1, UPGRADE)})
    assert upgraded.finalized_features["group.version"] == 1
    assert upgraded.metadata_offset == before.metadata_offset + 1
    restarted, downgraded = run(WIDE, {"group.version": (0, SAFE)})
    assert restarted.finalized_features["group.version"] == 1
    assert "group.version" not in downgraded.finalized_features
    again, _ = run(WIDE)
    assert dict(again.finalized_features) == {"metadata.version": 30}

    with pytest.raises(KafkaError) as info:
        run(SUPPORTED_FEATURES, {"group.version": (1, UPGRADE)})
    assert info.value.message == ("Invalid update version 1 for feature group.version. "
                                  "Local controller 1 does not support this feature.")


def test_single_node_health_and_registration_features(tmp_path: Path) -> None:
    async def main() -> None:
        b = backend(tmp_path, dict(SUPPORTED_FEATURES))
        await b.start()
        try:
            health = b.metadata_health()
            assert (health.connected, health.active_controller, health.fenced_brokers) == (
                True, True, 0)
            assert not b.image.brokers[1].fenced
        finally:
            await b.stop()
        assert not b.metadata_health().connected

    asyncio.run(main())
    log = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    batches = decode_batches(log.read_bytes(), allow_partial_tail=False)
    registered = [r.message for r in iter_metadata_records(batches)
                  if isinstance(r.message, RegisterBrokerRecord)]
    assert {f.name: (f.min_supported_version, f.max_supported_version)
            for f in registered[-1].features} == SUPPORTED_FEATURES

