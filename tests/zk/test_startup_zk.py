"""Start-up failures of a broker on metadata_zk, run as a user runs ``kafkernel serve``:
one stderr line naming the file and the key, a non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kernel.testing.embedded import EmbeddedBroker
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
