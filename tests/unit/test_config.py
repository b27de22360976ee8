from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernel.config import (
    BrokerConfig,
    ConfigError,
    load_config,
    parse_override,
    resolve_topic_configs,
    schema_keys,
    to_kafka_string,
    validate_topic_configs,
)
from kernel.log.log_config import LogConfig


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "k.toml"
    p.write_text(text)
    return p


def test_dotted_and_quoted_keys_and_plugin_tables(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, """
broker.id = 7
"log.segment.bytes" = 2097152
log.dirs = ["a", "b"]
listeners = "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0"
[plugins]
enabled = ["metadata_kraft", "metadata_kraft"]
[plugins.metadata_kraft]
x = 1
"""))
    assert cfg.broker.broker_id == 7
    assert cfg.broker.log_segment_bytes == 2097152
    assert cfg.broker.log_dirs == ["a", "b"]
    assert cfg.broker.listeners == ["PLAINTEXT://127.0.0.1:0", "OTHER://127.0.0.1:0"]
    assert cfg.enabled_plugins == ("metadata_kraft",)
    assert cfg.plugin_tables == {"metadata_kraft": {"x": 1}}
    assert "broker.id" in cfg.explicit_keys and "num.partitions" not in cfg.explicit_keys


def test_kafka_defaults() -> None:
    b = load_config(None).broker
    assert b.num_partitions == 1
    assert b.message_max_bytes == 1048588
    assert b.log_segment_bytes == 1073741824
    assert b.log_retention_ms_resolved == 168 * 3600 * 1000
    assert b.socket_request_max_bytes == 104857600
    assert b.auto_create_topics_enable is True


@pytest.mark.parametrize(("text", "message"), [
    ("num.partitionz = 1", "num.partitionz: unknown key; did you mean 'num.partitions'?"),
    ("num.partitions = 'x'", "num.partitions: expected an integer, got 'x'"),
    ("num.partitions = 0", "num.partitions: 0 is not allowed; expected a value >= 1"),
    ("auto.create.topics.enable = 1", "expected true or false"),
    ("log.message.timestamp.type = 'Other'", "expected one of CreateTime, LogAppendTime"),
    ("[plugins]\nenabled = 'x'", "plugins.enabled: expected a list of plugin names"),
    ("[plugins]\nfoo = 1", "plugins.foo: expected a table"),
    ("num.partitions = ", "not valid TOML"),
])
def test_errors_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(str(path) + ": ")
    assert message in str(e.value)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config("/nonexistent/kafkernel.toml")


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "broker.id = 1\n[plugins]\nenabled = ['a']\n")
    cfg = load_config(path, ["broker.id=2", "log.dirs=[\"x\"]", "plugins.enabled=b,c",
                             "plugins.b.key=v"])
    assert cfg.broker.broker_id == 2
    assert cfg.broker.log_dirs == ["x"]
    assert cfg.enabled_plugins == ("b", "c")
    assert cfg.plugin_tables == {"b": {"key": "v"}}
    assert parse_override("listeners=PLAINTEXT://h:1") == ("listeners", "PLAINTEXT://h:1")
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_override("novalue")


def test_topic_configs_validate_and_resolve() -> None:
    assert validate_topic_configs({"retention.ms": "1000", "cleanup.policy": "compact,delete"}) \
        == {"retention.ms": "1000", "cleanup.policy": "compact,delete"}
    with pytest.raises(ConfigError, match="unknown topic config 'retention.mss'"):
        validate_topic_configs({"retention.mss": "1"})
    with pytest.raises(ConfigError, match="cleanup.policy"):
        validate_topic_configs({"cleanup.policy": "forever"})
    broker = load_config(None, ["log.retention.hours=1", "message.max.bytes=100"]).broker
    resolved = resolve_topic_configs(broker, {"segment.bytes": "4096"})
    assert resolved["retention.ms"] == 3_600_000
    assert resolved["max.message.bytes"] == 100
    assert resolved["segment.bytes"] == 4096


def test_every_numeric_setting_is_range_checked() -> None:
    """Kafka's ConfigDef gives each number a validator; a number without one is how
    metrics.port=99999 once passed ``config check`` and failed ``serve``."""
    from plugins.coordinator.settings import CoordinatorSettings

    for settings_type in (BrokerConfig, CoordinatorSettings):
        for key in schema_keys(settings_type).values():
            if key.type_name in ("long", "double"):
                assert key.check is not None, key.name


@pytest.mark.parametrize(("key", "bad", "good"), [
    ("metrics.port", 65536, 65535), ("metrics.port", -2, -1),
    ("broker.id", 2**31, 2**31 - 1), ("message.max.bytes", -1, 0),
    ("log.retention.ms", -2, -1), ("log.retention.bytes", -2, -1),
    ("fetch.max.bytes", 1023, 1024), ("log.index.size.max.bytes", 3, 4),
])
def test_ranges_follow_kafka(key: str, bad: int, good: int) -> None:
    with pytest.raises(ConfigError, match=rf"<defaults>: {key}: {bad} is not allowed"):
        load_config(None, [f"{key}={bad}"])
    load_config(None, [f"{key}={good}"])


def test_log_dirs_are_named_once() -> None:
    with pytest.raises(ConfigError, match="log.dirs: .* expected a list without duplicates"):
        load_config(None, ['log.dirs=["data", "./data/"]'])


def test_negative_retention_keeps_forever() -> None:
    assert load_config(None, ["log.retention.hours=-1"]).broker.log_retention_ms_resolved == -1
    assert load_config(None, ["log.retention.minutes=-1"]).broker.log_retention_ms_resolved == -1


@pytest.mark.parametrize(("value", "java"), [
    (sys.float_info.max, "1.7976931348623157E308"), (0.5, "0.5"), (1e7, "1.0E7"),
    (12345678.0, "1.2345678E7"), (9999999.0, "9999999.0"), (1e-3, "0.001"),
    (1e-4, "1.0E-4"), (-2.5e-10, "-2.5E-10"), (1.0, "1.0"), (0.0, "0.0"),
    (float("inf"), "Infinity"),
])
def test_doubles_are_described_as_java_prints_them(value: float, java: str) -> None:
    """DescribeConfigs renders a DOUBLE as Kafka does, with Java's Double.toString."""
    assert to_kafka_string(value) == java


def test_segment_bytes_minimum_and_the_internal_segment_size() -> None:
    """KIP-1030: segment.bytes and log.segment.bytes are at least 1 MiB; Kafka's
    internal.segment.bytes (for tests) has no minimum and is the segment size when set;
    a config stored before the minimum still resolves."""
    with pytest.raises(ConfigError, match="segment.bytes: 14 is not allowed"):
        validate_topic_configs({"segment.bytes": "14"})
    with pytest.raises(ConfigError, match="log.segment.bytes"):
        load_config(None, ["log.segment.bytes=1048575"])
    assert validate_topic_configs({"segment.bytes": "1048576"}) == {"segment.bytes": "1048576"}
    assert validate_topic_configs({"internal.segment.bytes": "100"}) == {
        "internal.segment.bytes": "100"}
    config = LogConfig.from_broker(BrokerConfig(), {"internal.segment.bytes": "100",
                                                    "segment.bytes": "14"})
    assert config.segment_bytes == 100
    assert LogConfig.from_broker(BrokerConfig(), {"segment.bytes": "14"}).segment_bytes == 14
