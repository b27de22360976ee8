"""Start-up failures of a broker on metadata_zk, run as a user runs ``kafkernel serve``:
one stderr line naming the file and the key, a non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.config import StartupError
from kernel.testing.embedded import EmbeddedBroker
from tests.zk.conftest import ZK_PLUGINS
from tests.zookeeper import free_port

TIMEOUT_S = 90


def _serve(tmp_path: Path, zk: str | None, extra: str = "") -> tuple[Path, list[str], int]:
    cfg = tmp_path / "k.toml"
    connect = f'"zookeeper.connect" = "{zk}"\n' if zk is not None else ""
    cfg.write_text(
        'listeners = "PLAINTEXT://127.0.0.1:0"\n'
        f'log.dirs = "{tmp_path / "data"}"\n'
        '[plugins]\nenabled = ["metadata_zk", "coordinator"]\n'
        f'[plugins.metadata_zk]\n{connect}{extra}')
    result = subprocess.run([sys.executable, "-m", "kernel", "serve", "--config", str(cfg)],
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert "Traceback" not in result.stderr
    return cfg, result.stderr.splitlines(), result.returncode


def test_a_broker_id_already_registered_is_refused(
        zk_broker: EmbeddedBroker, zk_connect: str, tmp_path: Path) -> None:
    cfg, lines, code = _serve(tmp_path, zk_connect)  # broker.id 1, as zk_broker's
    assert code != 0
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{cfg}: broker.id: broker.id 1 is already registered in "
                               "ZooKeeper at /brokers/ids/1 by another session"), lines[0]
    # The broker that holds the id goes on unharmed.
    assert 1 in zk_broker.broker.metadata.image.brokers


def test_zookeeper_unreachable_at_startup_is_one_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    cfg, lines, code = _serve(tmp_path, f"127.0.0.1:{port}/kafka",
                              '"zookeeper.connection.timeout.ms" = 1500\n')
    assert code != 0
    assert lines == [f"{cfg}: plugins.metadata_zk.zookeeper.connect: no ZooKeeper session "
                     f"with 127.0.0.1:{port} within 1500 ms"]


def test_zookeeper_connect_is_required(tmp_path: Path) -> None:
    cfg, lines, code = _serve(tmp_path, None)
    assert code != 0
    assert lines == [f"{cfg}: plugins.metadata_zk.zookeeper.connect: required "
                     "(host:port[/chroot] of the ZooKeeper ensemble)"]


def test_a_second_broker_id_joins_the_same_cluster(
        zk_broker: EmbeddedBroker, zk_broker_factory: Callable[..., EmbeddedBroker]) -> None:
    """Not a cluster yet (no replication), but two brokers share the registry, the
    cluster id and one controller."""
    other = zk_broker_factory({"broker.id": 2})
    first, second = zk_broker.broker.metadata, other.broker.metadata
    assert first.image.cluster_id == second.image.cluster_id
    assert second.image.controller_id == 1
    assert set(second.image.brokers) == {1, 2}
    deadline = time.monotonic() + 15
    while set(first.image.brokers) != {1, 2}:  # through its /brokers/ids watch
        assert time.monotonic() < deadline, first.image.brokers
        time.sleep(0.1)


def test_log_dirs_of_another_cluster_are_refused(
        zookeeper: Any, zk_connect: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    tables = {"metadata_zk": {"zookeeper.connect": zk_connect}}
    first = EmbeddedBroker(plugins=ZK_PLUGINS, data_dir=data, plugin_settings=tables).start()
    cluster_id = first.broker.metadata.image.cluster_id
    first.stop()
    props = (data / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}\n" in props and "version=0\n" in props
    assert "broker.id=1\n" in props

    # Another chroot is another cluster.
    elsewhere = {"metadata_zk": {"zookeeper.connect": zookeeper.connect + "/other-cluster"}}
    with pytest.raises(StartupError, match=(
            r"log.dirs: .*meta.properties: the cluster id \S+ in ZooKeeper doesn't match "
            f"the stored cluster.id {cluster_id}: the broker is trying to join the wrong "
            "cluster")):
        EmbeddedBroker(plugins=ZK_PLUGINS, data_dir=data, plugin_settings=elsewhere).start()
    with pytest.raises(StartupError, match="doesn't match stored broker.id 1"):
        EmbeddedBroker({"broker.id": 2}, plugins=ZK_PLUGINS, data_dir=data,
                       plugin_settings=tables).start()
    # The same directory and cluster start again.
    EmbeddedBroker(plugins=ZK_PLUGINS, data_dir=data, plugin_settings=tables).start().stop()


def test_a_kraft_mode_log_dir_is_refused(zk_connect: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    EmbeddedBroker(data_dir=data).start().stop()  # metadata_kraft writes version=1
    with pytest.raises(StartupError, match="version=1 is not a ZooKeeper-mode directory"):
        EmbeddedBroker(plugins=ZK_PLUGINS, data_dir=data, plugin_settings={
            "metadata_zk": {"zookeeper.connect": zk_connect}}).start()
