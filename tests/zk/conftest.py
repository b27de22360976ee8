"""A real ZooKeeper for the session, and brokers on metadata_zk, each test under its
own chroot path (so tests share the server, never znodes)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from kernel.testing.embedded import EmbeddedBroker
from tests import zookeeper as zookeeper_launcher

ZK_PLUGINS = ("metadata_zk", "coordinator", "txn")


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[zookeeper_launcher.ZooKeeper]:
    """Debian's ZooKeeper, started once per session; not installed fails the test (it
    is never skipped silently)."""
    try:
        zk = zookeeper_launcher.start()
    except zookeeper_launcher.ZooKeeperNotInstalled as e:
        missing = str(e)
    else:
        yield zk
        zk.stop()
        return
    pytest.fail(missing, pytrace=False)


@pytest.fixture
def chroot() -> str:
    return f"/kafkernel-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def zk_connect(zookeeper: zookeeper_launcher.ZooKeeper, chroot: str) -> str:
    return zookeeper.connect + chroot


@pytest.fixture
def zk_broker_factory(broker_factory: Callable[..., EmbeddedBroker], zk_connect: str,
                      ) -> Callable[..., EmbeddedBroker]:
    """Brokers on metadata_zk under this test's chroot (broker_factory stops them and
    fails the test on a logged error)."""

    def factory(settings: dict[str, Any] | None = None, *, zk: dict[str, Any] | None = None,
                **kwargs: Any) -> EmbeddedBroker:
        kwargs.setdefault("plugins", ZK_PLUGINS)
        tables = dict(kwargs.pop("plugin_settings", {}))
        tables["metadata_zk"] = {"zookeeper.connect": zk_connect, **(zk or {})}
        return broker_factory(settings, plugin_settings=tables, **kwargs)

    return factory


@pytest.fixture
def zk_broker(zk_broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    return zk_broker_factory()


@pytest.fixture
def kazoo(zookeeper: zookeeper_launcher.ZooKeeper, chroot: str, zk_connect: str,
          ) -> Iterator[KazooClient]:
    """A client of the test's chroot, to read the znodes as Kafka's tools would (the
    chroot made first, as a broker started later would)."""
    root = KazooClient(hosts=zookeeper.connect)
    root.start(timeout=30)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()
