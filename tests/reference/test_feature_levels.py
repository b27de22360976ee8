"""Feature levels (KIP-584) on Kafka 4.3.1 and on Kafkernel's metadata_kraft node: the
ApiVersions feature fields (their differences are D1 in DIFFERENCES.md), UpdateFeatures'
refusals, and Kafka's own `kafka-features` tool against both. Nothing here changes the
reference's levels: its UpdateFeatures are validate-only or refused."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from plugins.metadata_kraft.features import SUPPORTED_FEATURES, UpgradeType
from reference import tools
from tests.reference.conformance import body, part
from tests.reference.diff import Pair, Side

API_VERSIONS = 18
UPDATE_FEATURES = 57
KEYS = (UPDATE_FEATURES,)  # what test_api_versions counts as covered here


def ranges(answer: Any) -> dict[str, tuple[int, int]]:
    return {f.name: (int(f.min_version), int(f.max_version))
            for f in answer.supported_features}


def finalized(answer: Any) -> dict[str, tuple[int, int]]:
    return {f.name: (int(f.min_version_level), int(f.max_version_level))
            for f in answer.finalized_features}


def api_versions(pair: Pair, version: int) -> tuple[Any, Any]:
    answers = pair.send(body(API_VERSIONS, version, client_software_name="kafkernel-tests",
                             client_software_version="1.0"))
    assert answers.kafka.error_code == answers.kafkernel.error_code == ErrorCode.none
    return answers.kafka, answers.kafkernel


def test_api_versions_v4_features(shared: Pair) -> None:
    kafka, ours = api_versions(shared, 4)
    # The same features, each of ours within Kafka's range (D1: ours stop at 0 where
    # Kafkernel does not serve the behaviour, metadata.version at 30 alone).
    assert ranges(ours) == dict(SUPPORTED_FEATURES)
    assert ranges(ours).keys() == ranges(kafka).keys()
    for name, (low, high) in ranges(ours).items():
        k_low, k_high = ranges(kafka)[name]
        assert k_low <= low <= high <= k_high, name
    # Levels of 0 are never listed as finalized; metadata.version is 4.3-IV0 on both.
    assert finalized(ours) == {"metadata.version": (30, 30)}
    assert finalized(kafka)["metadata.version"] == (30, 30)
    assert all(level > 0 for level, _ in finalized(kafka).values())
    # The epoch is each one's metadata offset: Kafka's grows with its NoOpRecords.
    assert ours.finalized_features_epoch > 0 and kafka.finalized_features_epoch > 0
    assert ours.zk_migration_ready is kafka.zk_migration_ready is False


def test_api_versions_v3_leaves_out_features_of_minimum_0(shared: Pair) -> None:
    kafka3, ours3 = api_versions(shared, 3)
    kafka4, ours4 = api_versions(shared, 4)
    for v3, v4 in ((kafka3, kafka4), (ours3, ours4)):
        assert ranges(v3) == {n: r for n, r in ranges(v4).items() if r[0] > 0}
        assert finalized(v3) == finalized(v4)
    assert ranges(ours3) == {"metadata.version": (30, 30)}


def update(version: int, name: str, level: int, upgrade_type: int = UpgradeType.UPGRADE,
           ) -> Any:
    key: dict[str, Any] = {"feature": name, "max_version_level": level}
    extra: dict[str, Any] = {}
    if version >= 1:
        key["upgrade_type"] = upgrade_type
        extra["validate_only"] = True
    return body(UPDATE_FEATURES, version, timeout=datetime.timedelta(seconds=30),
                feature_updates=(part(UPDATE_FEATURES, version, "FeatureUpdateKey", **key),),
                **extra)


def own_words(message: str | None, side: Side) -> str | None:
    return None if message is None else message.replace(
        f"controller {side.node_id} ", "controller <node> ")


REFUSED = [
    # (versions, feature, level, upgrade type, Kafka's message after its prefix)
    ((0, 1, 2), "foo.bar", 1, UpgradeType.UPGRADE,
     "Invalid update version 1 for feature foo.bar. Local controller <node> does not "
     "support this feature."),
    ((0, 1, 2), "foo", 0, UpgradeType.SAFE_DOWNGRADE,
     "Invalid update version 0 for feature foo. Feature foo not found."),
    ((0, 1, 2), "group.version", -2, UpgradeType.SAFE_DOWNGRADE,
     "Invalid update version -2 for feature group.version. A feature version cannot be "
     "less than 0."),
    ((1, 2), "share.version", 0, 7,
     "Invalid update version 0 for feature share.version. The controller does not "
     "support the given upgrade type."),
]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_update_features_refusals_match_kafka(shared: Pair, version: int) -> None:
    prefix = "The update failed for all features since the following feature had an error: "
    for versions, name, level, upgrade_type, message in REFUSED:
        if version not in versions:
            continue
        answers = shared.compare(update(version, name, level, upgrade_type))
        assert answers.kafka.error_code == ErrorCode.invalid_update_version
        for answer, side in ((answers.kafka, shared.kafka), (answers.kafkernel,
                                                              shared.kafkernel)):
            assert own_words(answer.error_message, side) == prefix + message, side.label


@pytest.mark.parametrize("version", [1, 2])
def test_update_features_validate_only_matches_kafka(shared: Pair, version: int) -> None:
    before = api_versions(shared, 4)[1].finalized_features_epoch
    answers = shared.compare(update(version, "metadata.version", 30))
    assert answers.kafkernel.error_code == ErrorCode.none
    assert api_versions(shared, 4)[1].finalized_features_epoch == before  # nothing written


FEATURE_LINE = re.compile(
    r"Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: (\S+)\s+"
    r"FinalizedVersionLevel: (\S+)\s+Epoch: (\d+)")


def described(bootstrap: str) -> dict[str, tuple[str, ...]]:
    result = tools.features("describe", bootstrap_server=bootstrap).check()
    lines = result.stdout.strip().splitlines()
    parsed = [FEATURE_LINE.fullmatch(line.strip()) for line in lines]
    assert all(parsed), result.stdout
    return {m.group(1): m.groups()[1:] for m in parsed if m}


def test_kafka_features_tool_against_both(shared: Pair) -> None:
    kafka, ours = described(shared.kafka.bootstrap), described(shared.kafkernel.bootstrap)
    assert list(ours) == list(kafka)
    assert ours["metadata.version"][:3] == ("4.3-IV0", "4.3-IV0", "4.3-IV0")
    assert kafka["metadata.version"][1:3] == ("4.3-IV0", "4.3-IV0")
    assert ours["group.version"][:3] == ("0", "0", "0")

    # On ours: an upgrade to the level already finalized is written (as Kafka does) and
    # moves the epoch; a level outside what the node supports is refused, framed by the
    # tool as Kafka's refusals are (the same refusals on both: the UpdateFeatures tests).
    done = tools.features("upgrade", "--feature", "metadata.version=30",
                          bootstrap_server=shared.kafkernel.bootstrap).check()
    assert done.stdout.strip() == "metadata.version was upgraded to 30."
    after = api_versions(shared, 4)[1]
    assert after.finalized_features_epoch > int(ours["metadata.version"][3])
    assert finalized(after) == {"metadata.version": (30, 30)}
    down = tools.features("downgrade", "--feature", "metadata.version=29",
                          bootstrap_server=shared.kafkernel.bootstrap)
    assert down.returncode == 1
    assert own_words(down.stdout, shared.kafkernel) == (
        "Could not downgrade metadata.version to 29. The update failed for all features "
        "since the following feature had an error: Invalid update version 29 for feature "
        "metadata.version. Local controller <node> only supports versions 30-30\n")
