"""Plugins chosen in the config: a plugin adds an API (advertised only while enabled),
and bad plugin configurations stop startup with one clear line."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.describe_delegation_token.v3.request import DescribeDelegationTokenRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

from kernel.cluster import NewTopic
from kernel.config import ConfigError
from kernel.services import BrokerServices, PluginServices, RequestServices
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import (
    connect,
    decode_response,
    encode_request,
    recv_frame,
    request,
)
from tests.plugin_fixtures.coordinators import (
    SECOND_GROUP_COORDINATOR,
    TOPIC,
    TRANSACTION_COORDINATOR,
)
from tests.plugin_fixtures.hello_plugin import NAME

HELLO = NAME


def _advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(ApiVersionsRequest()))
        frame = recv_frame(sock)
        assert frame is not None
        _, body = decode_response(frame, 18, 0)
        return {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}


def test_plugin_adds_an_api_and_reads_its_table(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory(plugins=["metadata_kraft", HELLO],
                       plugin_settings={HELLO: {"token_lifetime_ms": 2048}})
    assert _advertised(b.bootstrap)[41] == (1, 3)
    with connect(b.bootstrap) as sock:
        sock.sendall(encode_request(DescribeDelegationTokenRequest(owners=None)))
        frame = recv_frame(sock)
        assert frame is not None
        _, body = decode_response(frame, 41, 3)
    token = body.tokens[0]
    assert token.token_id == "hello-token"
    assert token.expiry_timestamp - token.issue_timestamp == 2048


def _members(protocol: type) -> set[str]:
    return {name for cls in protocol.__mro__ if Protocol in cls.__bases__
            for name in vars(cls) if not name.startswith("_")}


def test_the_broker_is_what_handlers_and_plugins_are_promised(
        broker: EmbeddedBroker) -> None:
    """Handlers and hooks are given the Broker typed as these Protocols: it has every
    member they name. Plugins' view shares the request handlers' base and lacks the
    kernel's components (the replica and log managers)."""
    assert broker.broker is not None
    shared = _members(RequestServices)
    kernel, plugin = _members(BrokerServices), _members(PluginServices)
    assert shared < kernel and shared < plugin
    assert {"replicas", "logs"} <= kernel - plugin
    assert {"registration", "partition_writer", "partition"} <= plugin - kernel
    members = kernel | plugin
    assert [m for m in sorted(members) if not hasattr(broker.broker, m)] == []
    assert broker.broker.partition("no-such-topic", 0) is None


def test_disabled_plugin_is_not_advertised(broker: EmbeddedBroker) -> None:
    versions = _advertised(broker.bootstrap)
    assert 41 not in versions
    assert 18 in versions and 3 in versions


def test_two_plugins_claiming_one_api_key_stop_startup() -> None:
    with pytest.raises(ConfigError,
                       match=r"API key 3 is claimed by both plugin 'kernel' and plugin "
                             r"'tests.plugin_fixtures.hello_plugin:ClashingPlugin'"):
        EmbeddedBroker(plugins=["metadata_kraft",
                                "tests.plugin_fixtures.hello_plugin:ClashingPlugin"]).start()


def _find(bootstrap: str, key_type: int, key: str) -> tuple[ErrorCode, int, int]:
    (found,) = request(bootstrap, FindCoordinatorRequest(key_type=key_type,
                                                         coordinator_keys=(key,))).coordinators
    return found.error_code, found.node_id, found.port


def test_find_coordinator_asks_the_plugin_that_registered_the_key_type(broker_factory) -> None:  # type: ignore[no-untyped-def]
    b = broker_factory(plugins=["metadata_kraft", TRANSACTION_COORDINATOR])
    assert _advertised(b.bootstrap)[10] == (0, 6)
    # The coordinator's partition has no leader until its topic exists.
    assert _find(b.bootstrap, 1, "txn-a")[0] == ErrorCode.coordinator_not_available
    kernel = b.broker
    assert kernel is not None
    b.call(kernel.metadata.create_topics([NewTopic(TOPIC, 1, 1)]))
    deadline = time.monotonic() + 10
    while (found := _find(b.bootstrap, 1, "txn-b"))[0] != ErrorCode.none \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert found == (ErrorCode.none, kernel.config.broker_id, int(b.bootstrap.rsplit(":", 1)[1]))
    plugin = kernel.plugins.pm.get_plugin(TRANSACTION_COORDINATOR)
    assert set(plugin.asked) == {"txn-a", "txn-b"}
    # No plugin runs a group coordinator here.
    assert _find(b.bootstrap, 0, "group")[0] == ErrorCode.coordinator_not_available


def test_without_a_coordinator_find_coordinator_is_not_advertised(broker_factory) -> None:  # type: ignore[no-untyped-def]
    assert 10 not in _advertised(broker_factory(plugins=["metadata_kraft"]).bootstrap)


def test_two_plugins_claiming_one_coordinator_stop_startup() -> None:
    with pytest.raises(ConfigError, match=r"the GROUP coordinator is claimed by both plugin "
                                          r"'coordinator' and plugin "
                                          r"'tests.plugin_fixtures.coordinators:SecondGroupCoordinator'"):
        EmbeddedBroker(plugins=["metadata_kraft", "coordinator",
                                SECOND_GROUP_COORDINATOR]).start()


def test_unknown_plugin_names_what_is_installed() -> None:
    with pytest.raises(ConfigError, match=r"plugin 'nosuch' can't be found, is the plugin "
                                          r"not installed\? Installed plugins: .*metadata_kraft"):
        EmbeddedBroker(plugins=["metadata_kraft", "nosuch"]).start()


def test_plugin_table_is_validated_by_its_schema() -> None:
    with pytest.raises(ConfigError, match=r"token_lifetime_ms: expected an integer"):
        EmbeddedBroker(plugins=["metadata_kraft", HELLO],
                       plugin_settings={HELLO: {"token_lifetime_ms": "long"}}).start()
    with pytest.raises(ConfigError, match=r"unknown key; allowed keys: token_lifetime_ms"):
        EmbeddedBroker(plugins=["metadata_kraft", HELLO],
                       plugin_settings={HELLO: {"consumer_byte_rate": 1}}).start()


def test_no_metadata_plugin_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="no metadata plugin is enabled"):
        EmbeddedBroker(plugins=[]).start()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernel", *args], capture_output=True,
                          text=True, timeout=60)


def test_config_check_cli(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('broker.id = 3\nlog.dirs = "data"\n[plugins]\nenabled = ["metadata_kraft"]\n')
    result = _cli("config", "check", str(good))
    assert result.returncode == 0, result.stderr
    # The room the open files limit leaves clients, under the limit serve runs with.
    ok, room = result.stdout.splitlines()
    assert ok == f"{good}: ok"
    assert re.fullmatch(rf"{re.escape(str(good))}: the open files limit \(RLIMIT_NOFILE "
                        r"\d+\) leaves room for \d+ client connections .*of its 0 partitions.*",
                        room), room
    bad = tmp_path / "bad.toml"
    bad.write_text('num.partitions = "many"\n[plugins]\nenabled = ["metadata_kraft"]\n')
    result = _cli("config", "check", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"{bad}:1: num.partitions: expected an integer, got 'many'"
    )
    result = _cli("config", "check", str(good), "--override", "broker.idd=1")
    assert result.returncode == 2 and "broker.idd: unknown key" in result.stderr


def test_plugins_list_cli(tmp_path: Path) -> None:
    cfg = tmp_path / "k.toml"
    cfg.write_text('[plugins]\nenabled = ["metadata_kraft"]\n')
    result = _cli("plugins", "list", "--config", str(cfg))
    assert result.returncode == 0
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("metadata_kraft"))
    assert "enabled" in line
