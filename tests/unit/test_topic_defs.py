"""Each topic config is declared once (kernel/config/topic_defs.py): the broker's synonym
fields, the topic keys and LogConfig's fields carry that declaration's default, and a
topic's default follows its broker synonyms in Kafka's order of precedence."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from kernel.config import (
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    broker_synonyms,
    load_config,
    resolve_topic_configs,
    schema_keys,
    topic_config_keys,
    validate_topic_configs,
)
from kernel.log.log_config import LogConfig


def test_every_derived_place_has_the_declared_default() -> None:
    broker_keys = schema_keys(BrokerConfig)
    log_fields = {f.name: f.default for f in dataclasses.fields(LogConfig)}
    for tc in TOPIC_CONFIGS:
        for synonym in tc.synonyms:
            key = broker_keys[synonym.name]
            assert (key.default, key.doc, key.dynamic) == (
                synonym.default, synonym.doc, synonym.dynamic), synonym.name
        assert topic_config_keys()[tc.name].key.default == tc.static_default
        if tc.in_log:
            listed = typing.get_origin(tc.type) is list
            expected = tuple(tc.static_default) if listed else tc.static_default
            assert log_fields.pop(tc.attr) == expected, tc.name
    assert set(log_fields) == {"max_inflated_bytes"}  # the one field not a topic config


def test_log_config_fields_are_plain_slots() -> None:
    """Read per append: slot attributes, no dict or property in between."""
    config = LogConfig()
    assert not hasattr(config, "__dict__")
    assert "segment_jitter_ms" in LogConfig.__slots__
    assert "segment_bytes" in LogConfig.__slots__


def test_a_topic_default_follows_its_synonyms_in_order() -> None:
    def resolved(*overrides: str) -> dict[str, typing.Any]:
        return resolve_topic_configs(load_config(None, list(overrides)).broker, {})

    assert resolved()["segment.jitter.ms"] == 0
    assert resolved("log.roll.jitter.hours=2")["segment.jitter.ms"] == 7_200_000
    assert resolved("log.roll.jitter.hours=2", "log.roll.jitter.ms=5")["segment.jitter.ms"] == 5
    assert resolved("log.retention.minutes=-1")["retention.ms"] == -1  # not -60000
    assert resolved("log.preallocate=true")["preallocate"] is True
    assert resolved("compression.zstd.level=-7")["compression.zstd.level"] == -7
    assert resolved("log.flush.scheduler.interval.ms=9")["flush.ms"] == 9
    topic = resolve_topic_configs(BrokerConfig(), {"segment.jitter.ms": "12"})
    assert topic["segment.jitter.ms"] == 12


def test_kafkas_broker_synonym_groups() -> None:
    assert broker_synonyms("log.roll.jitter.hours") == ("log.roll.jitter.ms",
                                                        "log.roll.jitter.hours")
    assert broker_synonyms("log.retention.hours") == (
        "log.retention.ms", "log.retention.minutes", "log.retention.hours")
    assert broker_synonyms("log.flush.interval.ms") == (
        "log.flush.interval.ms", "log.flush.scheduler.interval.ms")
    assert broker_synonyms("log.flush.scheduler.interval.ms") == (
        "log.flush.scheduler.interval.ms",)
    assert broker_synonyms("log.preallocate") == ("log.preallocate",)


@pytest.mark.parametrize(("name", "value"), [
    ("remote.storage.enable", "true"), ("compression.gzip.level", "0"),
    ("compression.lz4.level", "18"), ("segment.jitter.ms", "-1"), ("retention.ms", ""),
    ("local.retention.ms", "-3"), ("message.timestamp.after.max.ms", "-1"),
])
def test_bad_topic_values_are_refused(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name if name != "remote.storage.enable"
                       else "Tiered Storage functionality is disabled"):
        validate_topic_configs({name: value})


def test_tiered_storage_keys_are_accepted_off() -> None:
    assert validate_topic_configs({"remote.storage.enable": "false",
                                   "remote.log.copy.disable": "true",
                                   "local.retention.ms": "-2"}) == {
        "remote.storage.enable": "false", "remote.log.copy.disable": "true",
        "local.retention.ms": "-2"}
