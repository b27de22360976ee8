"""A plugin as third parties ship it: the README's example copied out of the tree and
enabled under a name of the user's choosing, and the same file packaged as a
distribution, installed with pip and enabled by its entry point. Each runs in a broker
process of its own, and answers the API it adds with a value from its own table."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.describe_delegation_token.v3.request import DescribeDelegationTokenRequest
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.integration.wire import connect, decode_response, encode_request, recv_frame

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "plugin_fixtures" / "hello_plugin.py"
DISTRIBUTION = "kafkernel-hello-example"


def _token_lifetime(bootstrap: str) -> int:
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(DescribeDelegationTokenRequest(owners=None)))
        frame = recv_frame(sock)
        assert frame is not None
        _, body = decode_response(frame, 41, 3)
    assert body.error_code == ErrorCode.none
    token = body.tokens[0]
    return int(token.expiry_timestamp - token.issue_timestamp)


def _with_table(broker: BrokerProcess, table: str, lines: str) -> BrokerProcess:
    config = broker.workdir / "kafkernel.toml"
    config.write_text(config.read_text() + f"\n[plugins.{table}]\n{lines}\n")
    return broker


def test_the_example_copied_out_and_enabled_under_another_name_gets_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before the kernel handed plugins their settings, the example asked for the table
    of the name in its source and got None: every request then failed with
    UNKNOWN_SERVER_ERROR."""
    plugins = tmp_path / "mine"
    plugins.mkdir()
    (plugins / "hello_plugin.py").write_text(EXAMPLE.read_text())
    monkeypatch.setenv("PYTHONPATH", str(plugins))
    name = "hello_plugin:HelloPlugin"
    broker = _with_table(
        BrokerProcess(tmp_path, plugins=("metadata_kraft", "coordinator", "txn", name)),
        f'"{name}"', "token_lifetime_ms = 4096")
    with broker.start():
        assert _token_lifetime(broker.bootstrap) == 4096


def test_a_bad_value_is_reported_under_the_table_the_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugins = tmp_path / "mine"
    plugins.mkdir()
    (plugins / "hello_plugin.py").write_text(EXAMPLE.read_text())
    config = tmp_path / "kafkernel.toml"
    config.write_text(textwrap.dedent(f"""
        log.dirs = "{tmp_path / 'data'}"
        [plugins]
        enabled = ["metadata_kraft", "hello_plugin:HelloPlugin"]
        [plugins."hello_plugin:HelloPlugin"]
        token_lifetime_ms = "long"
    """))
    monkeypatch.setenv("PYTHONPATH", str(plugins))
    result = subprocess.run([sys.executable, "-m", "kernel", "config", "check", str(config)],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode != 0
    assert 'plugins."hello_plugin:HelloPlugin".token_lifetime_ms' in result.stdout + \
        result.stderr
    assert "tests.plugin_fixtures" not in result.stdout + result.stderr


@pytest.fixture
def installed_example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The example as a distribution of its own, pip-installed into this environment
    (and uninstalled afterwards); yields its entry point name."""
    source = tmp_path_factory.mktemp("dist")
    (source / "hello_example.py").write_text(EXAMPLE.read_text())
    (source / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{DISTRIBUTION}"
        version = "1.0.0"

        [project.entry-points."kafkernel.plugins"]
        hello = "hello_example:HelloPlugin"

        [tool.setuptools]
        py-modules = ["hello_example"]
    """))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", str(source)],
                   check=True, timeout=300, capture_output=True)
    try:
        yield "hello"
    finally:
        subprocess.run([*pip, "uninstall", "-y", DISTRIBUTION], check=True, timeout=120,
                       capture_output=True)


def test_a_pip_installed_plugin_is_enabled_by_its_entry_point(
    tmp_path: Path, installed_example: str,
) -> None:
    broker = _with_table(
        BrokerProcess(tmp_path, plugins=("metadata_kraft", "coordinator", "txn",
                                         installed_example)),
        installed_example, "token_lifetime_ms = 1234")
    with broker.start():
        assert _token_lifetime(broker.bootstrap) == 1234
    listed = subprocess.run([sys.executable, "-m", "kernel", "plugins", "list"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert DISTRIBUTION in listed.stdout
