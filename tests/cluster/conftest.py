"""Fixtures for the cluster tests: a real ZooKeeper for the session and, per test, three
``kafkernel serve`` brokers on metadata_zk under a chroot of their own
(tests/cluster/harness.py). A missing ZooKeeper fails the test: never skipped silently."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import zookeeper as zookeeper_launcher
from tests.cluster import harness


def _start_zookeeper() -> zookeeper_launcher.ZooKeeper:
    try:
        return zookeeper_launcher.start()
    except zookeeper_launcher.ZooKeeperNotInstalled as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def cluster_zookeeper() -> Iterator[zookeeper_launcher.ZooKeeper]:
    zk = _start_zookeeper()
    yield zk
    zk.stop()


def _finish(request: pytest.FixtureRequest, cluster: harness.Cluster) -> None:
    """Stop the cluster; a broker that logged an error fails the test unless it is
    marked ``broker_errors`` (a failure only logged is still a failure). The brokers'
    logs stay in the test's tmp_path."""
    cluster.stop()
    errors = [f"broker {b.broker_id}: {e}" for b in cluster.brokers.values()
              for e in b.errors()]
    if errors and request.node.get_closest_marker("broker_errors") is None:
        pytest.fail("brokers logged errors (logs in "
                    f"{cluster.work_dir}):\n" + "\n".join(errors[:30]), pytrace=False)


@pytest.fixture
def cluster(request: pytest.FixtureRequest, cluster_zookeeper: zookeeper_launcher.ZooKeeper,
            tmp_path: Path) -> Iterator[harness.Cluster]:
    """Three brokers, ids 1..3, on the session's ZooKeeper."""
    c = harness.start_cluster(3, zookeeper=cluster_zookeeper, work_dir=tmp_path / "cluster")
    yield c
    _finish(request, c)


@pytest.fixture
def cluster_own_zookeeper(request: pytest.FixtureRequest, tmp_path: Path,
                          ) -> Iterator[harness.Cluster]:
    """Three brokers on a ZooKeeper of their own, which the test may restart."""
    zk = _start_zookeeper()
    try:
        c = harness.start_cluster(3, zookeeper=zk, work_dir=tmp_path / "cluster")
    except BaseException:
        zk.stop()
        raise
    c.own_zookeeper = True
    yield c
    _finish(request, c)
