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
from typing import TYPE_CHECKING

from kernel.api.config import ConfigSchema, StartupError, setting
from kernel.api.hooks import hookimpl
from kernel.api.services import LogDirError, lock_log_dir

from .backend import KRaftMetadataBackend

if TYPE_CHECKING:
    from kernel.api.services import PluginServices

__all__ = ["KRaftMetadataBackend", "KRaftSettings", "MetadataKraftPlugin"]

PLUGIN_NAME = "metadata_kraft"


@dataclass(frozen=True, slots=True)
class KRaftSettings:
    metadata_log_dir: str | None = setting(
        "metadata.log.dir", None,
        "Directory of the metadata log (__cluster_metadata-0); defaults to the first of "
        "log.dirs.",
    )


class MetadataKraftPlugin:
    """Instantiated once per broker: provides the KRaft metadata backend."""

    def __init__(self) -> None:
        self._settings = KRaftSettings()

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{PLUGIN_NAME}", KRaftSettings)

    @hookimpl
    def kafkernel_configure(self, settings: KRaftSettings) -> None:
        self._settings = settings

    @hookimpl
    def kafkernel_metadata_backend(self, broker: PluginServices) -> KRaftMetadataBackend:
        return _backend(broker, self._settings)


def _backend(broker: PluginServices, settings: KRaftSettings) -> KRaftMetadataBackend:
    config = broker.config
    registration = broker.registration
    if registration is None:
        raise RuntimeError("the broker's registration is resolved after listeners bind")
    log_dirs = [Path(d) for d in config.log_dirs]
    metadata_log_dir = (
        Path(settings.metadata_log_dir) if settings.metadata_log_dir else log_dirs[0]
    )
    lock_fd = None
    if metadata_log_dir not in log_dirs:  # those are the log manager's, locked already
        try:
            lock_fd = lock_log_dir(metadata_log_dir)
        except LogDirError as e:
            raise StartupError(
                f"{broker.loaded.source}: plugins.{PLUGIN_NAME}.metadata.log.dir: {e}"
            ) from None
    try:
        return KRaftMetadataBackend(
            metadata_log_dir, log_dirs, config.broker_id, registration, logger=broker.log,
            lock_fd=lock_fd,
        )
    except BaseException:
        if lock_fd is not None:
            os.close(lock_fd)
        raise
