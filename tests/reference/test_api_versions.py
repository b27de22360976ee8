"""ApiVersions (key 18) of Kafka and Kafkernel, at every version; the advertised table
of tests/reference/conformance.py against the live answer; the README's compatibility
table against both brokers' live answers; an unsupported version of every key."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema
from kio.schema.errors import ErrorCode

from tests.reference.conformance import (
    ADVERTISED,
    CLOSED,
    DIFFERENCES,
    body,
    header_only_frame,
    known,
    outcome,
    outcome_of_frame,
    versions,
)
from tests.reference.diff import Answers, Pair

API_VERSIONS = 18
README = Path(__file__).resolve().parents[2] / "README.md"
# Fields of ApiVersions that describe the feature levels (KIP-584): compared in
# test_feature_levels.py, where the differences are on purpose (D1).
FEATURES = known("D1", "supported_features", "finalized_features_epoch",
                 "finalized_features", "zk_migration_ready")

# Why Kafkernel's range of a key Kafka serves is narrower, or absent: the README's last
# column. A key Kafka serves that is missing here fails test_readme_compatibility_table.
GAPS: dict[int, str] = {
    8: "v10 (KIP-848's topic ids in commits) is planned with the KIP-848 consumer groups",
    9: "v10 (KIP-848's topic ids in fetches) is planned with the KIP-848 consumer groups",
    17: ("served by the auth_sasl plugin (v0: raw SASL tokens follow; v1: "
         "SaslAuthenticate), not enabled by default"),
    26: ("the txn plugin; v5 (KIP-890's epoch bump at the end of a transaction, "
         "transaction.version 2) is not served"),
    27: "the kernel's; v2 (KIP-1228's transaction version per marker) is not served yet",
    28: ("the coordinator plugin; v5 (KIP-890 part 2: the commit adds the offsets partition "
         "to the transaction) is not served yet"),
    29: "served by the acl plugin, not enabled by default",
    30: "served by the acl plugin, not enabled by default",
    31: "served by the acl plugin, not enabled by default",
    34: "not planned: one log dir per broker holds every replica",
    36: "served by the auth_sasl plugin, not enabled by default",
    38: "not planned: delegation tokens",
    39: "not planned: delegation tokens",
    40: "not planned: delegation tokens",
    41: "not planned: delegation tokens (tests' hello plugin serves it as an example)",
    50: "served by the auth_sasl plugin, not enabled by default",
    51: "served by the auth_sasl plugin, not enabled by default",
    55: "not served: KRaft controller API (the metadata quorum is embedded)",
    64: "not served: KRaft controller API",
    66: "the txn plugin; v2 (a transactional id pattern) is not served",
    68: "not planned yet: KIP-848 consumer groups (the classic protocol is served)",
    69: "not planned yet: KIP-848 consumer groups",
    74: "not planned yet: listing config resources (KIP-1142)",
    76: "not planned: share groups (KIP-932)",
    77: "not planned: share groups (KIP-932)",
    78: "not planned: share groups (KIP-932)",
    79: "not planned: share groups (KIP-932)",
    80: "not served: KRaft controller API",
    81: "not served: KRaft controller API",
    83: "not served: share-group state (inter-broker, KIP-932)",
    84: "not served: share-group state (inter-broker, KIP-932)",
    85: "not served: share-group state (inter-broker, KIP-932)",
    86: "not served: share-group state (inter-broker, KIP-932)",
    87: "not served: share-group state (inter-broker, KIP-932)",
    88: "not planned: Kafka Streams groups (KIP-1071)",
    89: "not planned: Kafka Streams groups (KIP-1071)",
    90: "not planned: share groups (KIP-932)",
    91: "not planned: share groups (KIP-932)",
    92: "not planned: share groups (KIP-932)",
}
TABLE_START = "<!-- compatibility table: checked by tests/reference/test_api_versions.py -->"


def ranges(answer: Any) -> dict[int, tuple[int, int]]:
    assert answer.error_code == ErrorCode.none, answer
    return {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}


def api_versions(version: int) -> Any:
    return body(API_VERSIONS, version, client_software_name="conformance",
                client_software_version="1.0")


def only_keys(answer: Any, keys: set[int]) -> Any:
    return dataclasses.replace(answer, api_keys=tuple(a for a in answer.api_keys
                                                      if a.api_key in keys))


@pytest.mark.parametrize("version", versions(API_VERSIONS))
def test_api_versions(shared: Pair, version: int) -> None:
    """Every key Kafkernel advertises Kafka serves with the same range, but for the gaps
    of GAPS; the rest of the answer is equal but Kafka's features (D1)."""
    answers = shared.send(api_versions(version))
    kafka, kafkernel = ranges(answers.kafka), ranges(answers.kafkernel)
    assert kafkernel == ADVERTISED, "update ADVERTISED in tests/reference/conformance.py"
    for key, served in kafkernel.items():
        assert key in kafka, f"Kafkernel advertises key {key}, which Kafka does not"
        if served != kafka[key]:
            assert key in GAPS, f"key {key}: Kafka {kafka[key]}, Kafkernel {served}"
    common = {k for k in kafkernel if kafkernel[k] == kafka[k]}
    shared.assert_same(Answers(only_keys(answers.kafka, common),
                               only_keys(answers.kafkernel, common)), ignore=FEATURES)


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("software", [("", "1.0"), ("-bad", "1.0"), ("ok", "bad!")])
def test_api_versions_with_an_invalid_client_software(shared: Pair, version: int,
                                                      software: tuple[str, str]) -> None:
    name, release = software
    answers = shared.send(body(API_VERSIONS, version, client_software_name=name,
                               client_software_version=release))
    assert answers.kafka.error_code == ErrorCode.invalid_request
    shared.assert_same(answers, ignore=FEATURES)


def test_api_versions_at_an_unknown_version(shared: Pair) -> None:
    """Kafka answers a v0 body with UNSUPPORTED_VERSION and ApiVersions' own range."""
    frame = header_only_frame(API_VERSIONS, 99, flexible=True)
    answers = Answers(*(outcome_of_frame(side, frame, API_VERSIONS, 0)
                        for side in (shared.kafka, shared.kafkernel)))
    assert answers.kafka.error_code == ErrorCode.unsupported_version
    shared.assert_same(answers)


@pytest.mark.parametrize("api_key", sorted(set(ADVERTISED) - {API_VERSIONS}))
def test_a_version_above_the_advertised_range(shared: Pair, api_key: int) -> None:
    """Kafka closes the connection on a version it does not serve (ApiVersions aside);
    where Kafka serves the version (a gap of GAPS), Kafkernel still closes it."""
    version = ADVERTISED[api_key][1] + 1
    try:
        request = body(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        frame = header_only_frame(api_key, version)
        got = [outcome_of_frame(side, frame, api_key, ADVERTISED[api_key][1])
               for side in (shared.kafka, shared.kafkernel)]
    else:
        got = [outcome(side, request) for side in (shared.kafka, shared.kafkernel)]
    assert got[0] == CLOSED or api_key in GAPS
    assert got[1] == CLOSED


# -- the README's compatibility table -----------------------------------------------------

def api_name(api_key: int, version: int) -> str:
    return load_request_schema(api_key, version).__name__.removesuffix("Request")


def compatibility_table(kafka: dict[int, tuple[int, int]],
                        kafkernel: dict[int, tuple[int, int]]) -> str:
    def span(r: tuple[int, int] | None) -> str:
        return f"{r[0]}-{r[1]}" if r else "-"
    rows = [TABLE_START, "| key | API | Kafka 4.3 | Kafkernel | gap: reason or plan |",
            "|---|---|---|---|---|"]
    for key in sorted(kafka):
        ours = kafkernel.get(key)
        gap = "" if ours == kafka[key] else GAPS[key]
        rows.append(f"| {key} | {api_name(key, kafka[key][1])} | {span(kafka[key])} | "
                    f"{span(ours)} | {gap} |")
    return "\n".join(rows) + "\n"


def test_readme_compatibility_table(shared: Pair) -> None:
    """The README's table is what both brokers answer now, with a reason for each gap."""
    kafka = ranges(shared.kafka.send(api_versions(4)))
    kafkernel = ranges(shared.kafkernel.send(api_versions(4)))
    missing = [k for k in kafka if kafkernel.get(k) != kafka[k] and k not in GAPS]
    assert not missing, f"give GAPS a reason for keys {missing}"
    table = compatibility_table(kafka, kafkernel)
    readme = README.read_text()
    assert TABLE_START in readme, "README lacks the compatibility table"
    current = readme[readme.index(TABLE_START):]
    current = current[:re.search(r"\n(?!\|)", current[len(TABLE_START) + 1:]).start()
                      + len(TABLE_START) + 2]
    assert current == table, "README's compatibility table differs; the live one:\n" + table



# -- coverage of the conformance tests ------------------------------------------------------

def test_every_advertised_key_has_conformance_cases() -> None:
    """Each key Kafkernel advertises has cases, which run at each advertised version."""
    from tests.reference import (
        test_conformance_cluster,
        test_conformance_groups,
        test_conformance_log,
        test_conformance_markers,
        test_conformance_quotas,
        test_conformance_topics,
        test_conformance_txn,
        test_feature_levels,
    )
    modules = (test_conformance_cluster, test_conformance_groups, test_conformance_log,
               test_conformance_markers, test_conformance_topics, test_conformance_txn)
    covered = {API_VERSIONS, *test_conformance_quotas.KEYS, *test_feature_levels.KEYS} | {
        key for module in modules for key, _ in module.CASES}
    assert covered >= set(ADVERTISED)


def test_every_listed_difference_is_shown_by_a_test() -> None:
    """An entry of DIFFERENCES.md no test names is stale (fixed, or never checked)."""
    entries = re.findall(r"^### (D\d+)\b", DIFFERENCES.read_text(), re.M)
    assert len(entries) == len(set(entries)), "DIFFERENCES.md repeats an entry"
    tests = "".join(p.read_text() for p in DIFFERENCES.parent.glob("test_*.py"))
    unnamed = [e for e in entries if f'"{e}"' not in tests]
    assert not unnamed, f"no test names {unnamed}"
