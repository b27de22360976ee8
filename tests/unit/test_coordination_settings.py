"""The coordinator plugin's table: Kafka's names and defaults, as the README lists them,
checked like the broker's own keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel.config import ConfigError, ConfigSchema, schema_keys, to_kafka_string
from plugins.coordinator.settings import CoordinatorSettings

ROOT = Path(__file__).resolve().parents[2]


def test_readme_lists_every_setting_with_its_default() -> None:
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `coordinator` |"))
    documented = dict(re.findall(r"`([a-z.]+)` \((\d+)", row))
    keys = schema_keys(CoordinatorSettings)
    assert set(documented) == set(keys)
    for name, key in keys.items():
        assert documented[name] == to_kafka_string(key.default), name


def test_table_is_validated_with_kafka_names() -> None:
    schema = ConfigSchema("plugins.coordinator", CoordinatorSettings)
    settings = schema.build({"offsets.topic.num.partitions": 3,
                             "group.initial.rebalance.delay.ms": 0}, "k.toml")
    config = settings  # the table is the state machine's config too
    assert settings.offsets_topic_num_partitions == 3
    assert config.group_initial_rebalance_delay_ms == 0
    with pytest.raises(ConfigError, match="offsets.topic.num.partitions: 0 is not allowed"):
        schema.build({"offsets.topic.num.partitions": 0}, "k.toml")
    with pytest.raises(ConfigError, match="unknown key"):
        schema.build({"group.max.sise": 3}, "k.toml")
    with pytest.raises(ConfigError, match="must not exceed group.max.session.timeout.ms"):
        schema.build({"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5},
                     "k.toml")
