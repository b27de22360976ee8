"""Metadata in ZooKeeper, as Kafka 3.x kept it (issue 16): the broker registry, topics,
partition state, configs, SCRAM credentials and the controller election are Kafka's
znodes (``znodes``) in a real ZooKeeper ensemble, spoken to with kazoo (the ``zk``
extra). Enable it instead of ``metadata_kraft``::

    [plugins]
    enabled = ["metadata_zk", "coordinator", "txn"]
    [plugins.metadata_zk]
    "zookeeper.connect" = "127.0.0.1:2181/kafka"
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernel.api.config import ConfigError, ConfigSchema, StartupError, int_at_least, setting
from kernel.api.hooks import hookimpl

from .backend import BrokerIdInUse, ZkMetadataBackend, ZkUnreachable
from .controller import Rebalance
from .properties import MetaPropertiesMismatch

if TYPE_CHECKING:
    from kernel.api.services import PluginServices

__all__ = ["MetadataZkPlugin", "ZkMetadataBackend", "ZkSettings"]

PLUGIN_NAME = "metadata_zk"


def _connect_string(value: str | None) -> str | None:
    if value is None:
        return None
    hosts, _, chroot = value.partition("/")
    if not hosts or any(not h.rpartition(":")[2].isdigit() for h in hosts.split(",")):
        return f"host:port[,host:port...][/chroot]; {value!r} is not one"
    if "//" in f"/{chroot}" or chroot.endswith("/"):
        return f"a chroot path without empty segments; {value!r} is not one"
    return None


@dataclass(frozen=True, slots=True)
class ZkSettings:
    zookeeper_connect: str | None = setting(
        "zookeeper.connect", None,
        "ZooKeeper's host:port pairs, then an optional chroot path (created if missing), "
        "as Kafka's: 127.0.0.1:2181,127.0.0.1:2182/kafka. Required.",
        check=_connect_string,
    )
    zookeeper_session_timeout_ms: int = setting(
        "zookeeper.session.timeout.ms", 18000,
        "ZooKeeper session timeout: a broker silent this long loses its registration "
        "(and the controller role).",
        check=int_at_least(1),
    )
    zookeeper_connection_timeout_ms: int | None = setting(
        "zookeeper.connection.timeout.ms", None,
        "How long start-up waits for a ZooKeeper session; null: the session timeout.",
        check=lambda v: None if v is None or v >= 1 else "a value >= 1",
    )


def new_cluster_id() -> str:
    """Kafka's Uuid.randomUuid().toString(), skipping ids that start with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


class MetadataZkPlugin:
    """Instantiated once per broker: provides the ZooKeeper metadata backend."""

    def __init__(self) -> None:
        self._settings = ZkSettings()

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{PLUGIN_NAME}", ZkSettings)

    @hookimpl
    def kafkernel_configure(self, settings: ZkSettings) -> None:
        self._settings = settings

    @hookimpl
    def kafkernel_metadata_backend(self, broker: PluginServices) -> ZkMetadataBackend:
        return _backend(broker, self._settings)


def _backend(broker: PluginServices, settings: ZkSettings) -> ZkMetadataBackend:
    source = broker.loaded.source
    if not settings.zookeeper_connect:
        raise ConfigError(f"{source}: plugins.{PLUGIN_NAME}.zookeeper.connect: required "
                          "(host:port[/chroot] of the ZooKeeper ensemble)")
    registration = broker.registration
    if registration is None:
        raise RuntimeError("the broker's registration is resolved after listeners bind")
    session_ms = settings.zookeeper_session_timeout_ms
    return _StartupErrors(
        settings.zookeeper_connect, session_ms,
        settings.zookeeper_connection_timeout_ms or session_ms,
        broker.config.broker_id, registration, new_cluster_id=new_cluster_id,
        log_dirs=[Path(d) for d in broker.config.log_dirs], logger=broker.log, source=source,
        # The effective (dynamic) broker default, read when the controller elects.
        unclean_default=lambda: broker.config.unclean_leader_election_enable,
        rebalance=Rebalance(broker.config.auto_leader_rebalance_enable,
                            broker.config.leader_imbalance_check_interval_seconds,
                            broker.config.leader_imbalance_per_broker_percentage))


class _StartupErrors(ZkMetadataBackend):
    """The backend, whose start-up failures are one line naming the setting."""

    def __init__(self, *args: object, source: str, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._source = source

    async def start(self) -> None:
        key = f"{self._source}: plugins.{PLUGIN_NAME}.zookeeper.connect"
        try:
            await super().start()
        except ZkUnreachable as e:
            raise StartupError(f"{key}: {e}") from None
        except BrokerIdInUse as e:
            raise StartupError(f"{self._source}: broker.id: {e}") from None
        except MetaPropertiesMismatch as e:
            raise StartupError(f"{self._source}: log.dirs: {e}") from None
