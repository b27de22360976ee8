"""Kafka 4.3's whole topic-config table, key by key: a topic created on the reference
Kafka and on Kafkernel, described by DescribeConfigs v4 with synonyms and documentation,
compared entry by entry (name, value, source, read_only, sensitive, config type,
synonyms). The differences Kafkernel keeps are the allow-list below, each with its reason
(and its DIFFERENCES.md entry); nothing else is left out.

Also: every key overridden at once, bad values of each key refused alike, and the
timestamp bounds refusing the same record."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.config import TOPIC_CONFIGS
from kernel.protocol.records import SimpleRecord, build_batch
from tests.reference.conformance import (
    TIMEOUT,
    TOPIC_RESOURCE,
    body,
    create_topic,
    documented,
    part,
    unique,
)
from tests.reference.diff import Answers, Pair
from tests.reference.test_conformance_log import each, produce
from tests.reference.test_conformance_topics import describe_configs

DESCRIBE_CONFIGS, CREATE_TOPICS = 32, 19

# The allow-list: (config, field) -> the reason Kafkernel answers otherwise.
ALLOWED: dict[tuple[str, str], str] = {
    # D3: `kafka-storage format` writes a cluster-level min.insync.replicas in KRaft
    # (KIP-966), so Kafka's source is DYNAMIC_DEFAULT_BROKER_CONFIG with that synonym
    # first; the value is the same.
    ("min.insync.replicas", "source"): documented("D3"),
    ("min.insync.replicas", "synonyms"): documented("D3"),
}
# D5: the documentation is Kafkernel's own words; that there is one is compared.
DOCUMENTATION = documented("D5")

# Every key set away from its default (on a CreateTime topic: the bounds are checked).
OVERRIDES = {
    "cleanup.policy": "compact,delete", "compression.gzip.level": "9",
    "compression.lz4.level": "4", "compression.type": "gzip",
    "compression.zstd.level": "-5", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "1000", "flush.messages": "1000", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1", "index.interval.bytes": "1000",
    "leader.replication.throttled.replicas": "*", "local.retention.bytes": "1000",
    "local.retention.ms": "1000", "max.compaction.lag.ms": "100000",
    "max.message.bytes": "100000", "message.timestamp.after.max.ms": "1000",
    "message.timestamp.before.max.ms": "1000", "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.25", "min.compaction.lag.ms": "1000",
    "min.insync.replicas": "1", "preallocate": "true", "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true", "remote.storage.enable": "false",
    "retention.bytes": "1000000", "retention.ms": "3600000", "segment.bytes": "2000000",
    "segment.index.bytes": "100000", "segment.jitter.ms": "1000", "segment.ms": "100000",
    "unclean.leader.election.enable": "true",
}

# Values each broker refuses (INVALID_CONFIG), a few per key that has a check.
BAD_VALUES = (
    ("compression.gzip.level", "0"), ("compression.gzip.level", "10"),
    ("compression.gzip.level", "2147483648"), ("compression.lz4.level", "0"),
    ("compression.lz4.level", "18"), ("compression.zstd.level", "23"),
    ("compression.zstd.level", "-131073"), ("segment.jitter.ms", "-1"),
    ("segment.jitter.ms", "soon"), ("preallocate", "yes"), ("local.retention.ms", "-3"),
    ("local.retention.bytes", "-3"), ("message.timestamp.after.max.ms", "-1"),
    ("message.timestamp.before.max.ms", "-1"), ("remote.storage.enable", "true"),
    ("remote.log.copy.disable", "maybe"), ("retention.ms", ""), ("segment.ms", "0"),
    ("flush.ms", "-1"),
)


def entries(answer: Any) -> dict[str, Any]:
    (result,) = answer.results
    assert result.error_code == ErrorCode.none, result
    return {c.name: c for c in result.configs}


def fields(entry: Any) -> dict[str, Any]:
    return {
        "value": entry.value, "source": entry.config_source, "read_only": entry.read_only,
        "sensitive": entry.is_sensitive, "config_type": entry.config_type,
        "synonyms": [(s.name, s.value, s.source) for s in entry.synonyms],
    }


def key_by_key(answers: Answers) -> list[str]:
    """Every difference of the two describes not in ALLOWED, one line each."""
    kafka, kafkernel = entries(answers.kafka), entries(answers.kafkernel)
    problems = [f"{name}: only Kafka describes it" for name in sorted(kafka.keys()
                                                                       - kafkernel.keys())]
    problems += [f"{name}: only Kafkernel describes it"
                 for name in sorted(kafkernel.keys() - kafka.keys())]
    for name in sorted(kafka.keys() & kafkernel.keys()):
        ours, theirs = fields(kafkernel[name]), fields(kafka[name])
        problems += [f"{name}.{f}: Kafka {theirs[f]!r}, Kafkernel {ours[f]!r}"
                     for f in theirs if theirs[f] != ours[f] and (name, f) not in ALLOWED]
        if bool(kafka[name].documentation) != bool(kafkernel[name].documentation):
            problems.append(f"{name}: documentation on one side only ({DOCUMENTATION})")
    return problems


def describe(pair: Pair, name: str) -> Answers:
    return pair.send(describe_configs(4, TOPIC_RESOURCE, name, synonyms=True,
                                      documentation=True))


def test_the_table_is_kafkas_whole_table(shared: Pair) -> None:
    name = unique("tc-default")
    create_topic(shared, name)
    answers = describe(shared, name)
    assert key_by_key(answers) == []
    assert set(entries(answers.kafkernel)) == {tc.name for tc in TOPIC_CONFIGS}
    # The allow-list is still needed: each entry is a difference that is there.
    mis = entries(answers.kafka)["min.insync.replicas"]
    assert fields(mis)["source"] != fields(entries(answers.kafkernel)[mis.name])["source"]


def test_every_key_overridden(shared: Pair) -> None:
    assert set(OVERRIDES) == {tc.name for tc in TOPIC_CONFIGS}
    name = unique("tc-all")
    create_topic(shared, name, configs=OVERRIDES)
    assert key_by_key(describe(shared, name)) == []


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_a_bad_value_is_refused_alike(shared: Pair, key: str, value: str) -> None:
    request = body(CREATE_TOPICS, 7, timeout=TIMEOUT, validate_only=True, topics=(part(
        CREATE_TOPICS, 7, "CreatableTopic", name=unique("tc-bad"), num_partitions=1,
        replication_factor=1, assignments=(), configs=(part(
            CREATE_TOPICS, 7, "CreatableTopicConfig", name=key, value=value),)),))
    answers = shared.send(request)
    (kafka,), (kafkernel,) = answers.kafka.topics, answers.kafkernel.topics
    assert kafka.error_code == ErrorCode.invalid_config, kafka
    assert kafkernel.error_code == kafka.error_code, kafkernel


def test_records_outside_the_timestamp_bounds_are_refused_alike(shared: Pair) -> None:
    name = unique("tc-ts")
    create_topic(shared, name, configs={"message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    for timestamps, expected in (([now, now + 10_000], ErrorCode.none),
                                 ([now, now + 7_200_000], ErrorCode.invalid_timestamp),
                                 ([now - 3_600_000, now], ErrorCode.invalid_timestamp)):
        records = build_batch([SimpleRecord(key=b"k", value=b"v", timestamp=t)
                               for t in timestamps])
        answers = each(shared, produce(9, name, records))
        (kafka,) = answers.kafka.responses[0].partition_responses
        (kafkernel,) = answers.kafkernel.responses[0].partition_responses
        assert kafka.error_code == expected, kafka
        assert kafkernel.error_code == expected, kafkernel
        assert [e.batch_index for e in kafkernel.record_errors] == \
            [e.batch_index for e in kafka.record_errors]
