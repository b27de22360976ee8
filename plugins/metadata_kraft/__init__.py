"""KRaft-style metadata, the embedded default: no external service.

The cluster's metadata is Kafka's metadata log: Kafka's metadata records (``records/``)
in segments of ``<metadata.log.dir>/__cluster_metadata-0/`` (``log.py``), fsynced on
every append and replayed at startup to rebuild the cluster image. This node is the only
voter of the quorum, so it is always the active controller. ``meta.properties`` in
every log directory ties the directories to one cluster id and node id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel.api.config import (
    BrokerConfig,
    ConfigError,
    ConfigProblem,
    ConfigSchema,
    StartupError,
    parse_voters,
    setting,
)
from kernel.api.handlers import ApiRegistry, register_handler_modules
from kernel.api.hooks import hookimpl
from kernel.api.log import PluginLogConfig
from kernel.api.services import LogDirError, lock_log_dir

from . import migrate, storage, update_features
from .backend import KRaftMetadataBackend
from .controller import apis as controller_apis
from .raft import rpc
from .raft.quorum import QuorumNode
from .raft.state import RaftConfig
from .snapshotter import SnapshotPolicy

if TYPE_CHECKING:
    from kernel.api.services import PluginServices

__all__ = ["KRaftMetadataBackend", "KRaftSettings", "MetadataKraftPlugin"]

PLUGIN_NAME = "metadata_kraft"


DEPRECATED_LOG_DIR = f"plugins.{PLUGIN_NAME}.metadata.log.dir"


@dataclass(frozen=True, slots=True)
class KRaftSettings:
    metadata_log_dir: str | None = setting(
        "metadata.log.dir", None,
        "Deprecated: the top-level metadata.log.dir (Kafka's name) says the same.",
    )


class MetadataKraftPlugin:
    """Instantiated once per broker: provides the KRaft metadata backend."""

    def __init__(self) -> None:
        self._settings = KRaftSettings()
        self._metadata_log_dir: str | None = None
        # process.roles=controller with static voters: this node runs the Raft quorum.
        self._controller_only = False
        self._quorum: QuorumNode | None = None
        self._backend: KRaftMetadataBackend | None = None

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{PLUGIN_NAME}", KRaftSettings)

    @hookimpl
    def kafkernel_commands(self, subparsers: Any, load_config: Any) -> None:
        storage.add_parsers(subparsers, load_config)
        migrate.add_parsers(subparsers, load_config)

    @hookimpl
    def kafkernel_configure(self, settings: KRaftSettings, config: BrokerConfig) -> None:
        self._settings = settings
        self._controller_only = set(config.process_roles) == {"controller"}
        check_single_voter(config)
        old, new = settings.metadata_log_dir, config.metadata_log_dir
        if old and new and old != new:
            raise ConfigError(problems=[ConfigProblem(
                f"{DEPRECATED_LOG_DIR}: {old!r} differs from metadata.log.dir {new!r}; "
                "set only metadata.log.dir", DEPRECATED_LOG_DIR)])
        self._metadata_log_dir = new or old

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        if self._controller_only:
            rpc.register(registry, lambda: self._quorum)
            controller_apis.register(
                registry, lambda: None if self._quorum is None else self._quorum.controller)
            return
        # UpdateFeatures is the controller's: served only where this plugin is (the
        # single node; a controller quorum does not take it yet).
        register_handler_modules(registry, [update_features], self.feature_updater)

    @hookimpl
    def kafkernel_metadata_backend(
            self, broker: PluginServices) -> KRaftMetadataBackend | QuorumNode:
        if self._settings.metadata_log_dir:
            broker.log.warning(f"{DEPRECATED_LOG_DIR} is deprecated: set the top-level "
                               "metadata.log.dir (Kafka's name) instead")
        if self._controller_only:
            self._quorum = _quorum_node(broker, self._metadata_log_dir)
            return self._quorum
        self._backend = _backend(broker, self._metadata_log_dir)
        return self._backend

    def feature_updater(self) -> update_features.UpdateFeatures:
        """The backend's UpdateFeatures; a method (pluggy reads a plugin's attributes),
        called per request, once listeners serve, so after the backend exists."""
        if self._backend is None:
            raise RuntimeError("the metadata_kraft backend has not been created")
        return self._backend.update_features


def check_single_voter(config: BrokerConfig) -> None:
    """A node is either the only voter of its metadata log (broker and controller), or
    a controller-only voter of a static quorum (process.roles=controller); what is not
    served yet (a broker-only node, a combined node among other voters, a dynamic
    quorum) is refused in one line rather than ignored."""
    roles = set(config.process_roles)
    problems: list[ConfigProblem] = []
    controller_only = roles == {"controller"}
    if roles and roles != {"broker", "controller"} and not controller_only:
        problems.append(ConfigProblem(
            f"process.roles: {','.join(config.process_roles)} is not supported yet: the "
            f"{PLUGIN_NAME} plugin runs controller-only nodes (process.roles=controller) "
            "or one node that is broker and controller (process.roles=broker,controller "
            "or unset)", "process.roles"))
    others = sorted(set(parse_voters(config.controller_quorum_voters)) - {config.node_id})
    if others and not controller_only:
        problems.append(ConfigProblem(
            f"controller.quorum.voters: a quorum of several voters (also {others}) is not "
            f"supported yet on a broker: the {PLUGIN_NAME} plugin runs a quorum of "
            "controller-only nodes (process.roles=controller), or one node, the only voter",
            "controller.quorum.voters"))
    if config.controller_quorum_bootstrap_servers:
        problems.append(ConfigProblem(
            "controller.quorum.bootstrap.servers: a dynamic quorum is not supported yet: "
            f"the {PLUGIN_NAME} plugin runs one node, the only voter (set "
            "controller.quorum.voters to this node alone)",
            "controller.quorum.bootstrap.servers"))
    if problems:
        raise ConfigError(problems=problems)


def _quorum_node(broker: PluginServices, metadata_log_dir_set: str | None) -> QuorumNode:
    config = broker.config
    directory = Path(metadata_log_dir_set or config.log_dirs[0])
    raft = RaftConfig(
        election_timeout_ms=config.controller_quorum_election_timeout_ms,
        fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
        election_backoff_max_ms=config.controller_quorum_election_backoff_max_ms,
        request_timeout_ms=config.controller_quorum_request_timeout_ms,
        retry_backoff_ms=config.controller_quorum_retry_backoff_ms,
        fetch_max_bytes=config.controller_quorum_fetch_max_bytes,
        fetch_snapshot_max_bytes=config.controller_quorum_fetch_snapshot_max_bytes)
    return QuorumNode(
        node_id=config.node_id, voters=parse_voters(config.controller_quorum_voters),
        listener_name=config.controller_listener_names[0].strip().upper(),
        metadata_log_dir=directory, raft_config=raft,
        idle_interval_ms=config.metadata_max_idle_interval_ms, logger=broker.log,
        session_timeout_ms=config.broker_session_timeout_ms,
        heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
        max_record_bytes_between_snapshots=(
            config.metadata_log_max_record_bytes_between_snapshots))


def _backend(broker: PluginServices, metadata_log_dir_set: str | None) -> KRaftMetadataBackend:
    config = broker.config
    registration = broker.registration
    if registration is None:
        raise RuntimeError("the broker's registration is resolved after listeners bind")
    log_dirs = [Path(d) for d in config.log_dirs]
    metadata_log_dir = Path(metadata_log_dir_set) if metadata_log_dir_set else log_dirs[0]
    key = DEPRECATED_LOG_DIR if metadata_log_dir_set and not config.metadata_log_dir \
        else "metadata.log.dir"
    lock_fd = None
    if metadata_log_dir not in log_dirs:  # those are the log manager's, locked already
        try:
            lock_fd = lock_log_dir(metadata_log_dir)
        except LogDirError as e:
            raise StartupError(
                f"{broker.loaded.source}: {key}: {e}"
            ) from None
    try:
        return KRaftMetadataBackend(
            metadata_log_dir, log_dirs, config.broker_id, registration, logger=broker.log,
            lock_fd=lock_fd,
            snapshot_policy=SnapshotPolicy(
                config.metadata_log_max_record_bytes_between_snapshots,
                config.metadata_log_max_snapshot_interval_ms,
                config.metadata_max_retention_bytes, config.metadata_max_retention_ms),
            log_config=PluginLogConfig(segment_bytes=config.metadata_log_segment_bytes,
                                       segment_ms=config.metadata_log_segment_ms),
        )
    except BaseException:
        if lock_fd is not None:
            os.close(lock_fd)
        raise
