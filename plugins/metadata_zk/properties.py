"""``meta.properties`` of a ZooKeeper-mode broker: every log directory says which
cluster (``cluster.id``, from /cluster/id) and broker (``broker.id``) it belongs to,
``version=0`` as Kafka 3.x wrote it, so a directory pointed at another ensemble or
chroot, or moved to another broker id, is refused instead of mixing two clusters' data.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

META_PROPERTIES = "meta.properties"
ZK_VERSION = "0"


class MetaPropertiesMismatch(Exception):
    """A log directory of another cluster, broker or mode: one line naming it."""


def _parse(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and line[0] not in "#!":
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props


def check_meta_properties(directories: Sequence[Path], broker_id: int,
                          cluster_id: str) -> None:
    """Kafka's checks of each directory's meta.properties, written where missing
    (blocking: run it off the event loop)."""
    for directory in dict.fromkeys(Path(d) for d in directories):
        path = directory / META_PROPERTIES
        try:
            props = _parse(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            _write(directory, broker_id, cluster_id)
            continue
        if props.get("version") != ZK_VERSION:
            raise MetaPropertiesMismatch(
                f"{path}: version={props.get('version')} is not a ZooKeeper-mode directory "
                f"(version={ZK_VERSION}); it belongs to a KRaft-mode broker")
        if props.get("broker.id") != str(broker_id):
            raise MetaPropertiesMismatch(
                f"{path}: configured broker.id {broker_id} doesn't match stored broker.id "
                f"{props.get('broker.id')}; if you moved your data, make sure broker.id "
                "matches it, else use empty log.dirs for a new broker")
        if props.get("cluster.id") != cluster_id:
            raise MetaPropertiesMismatch(
                f"{path}: the cluster id {cluster_id} in ZooKeeper doesn't match the stored "
                f"cluster.id {props.get('cluster.id')}: the broker is trying to join the "
                "wrong cluster (is zookeeper.connect, with its chroot, right?)")


def _write(directory: Path, broker_id: int, cluster_id: str) -> None:
    """Atomically: a temporary file, fsynced, renamed, the directory fsynced."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    text = (f"#\n#{stamp}\ncluster.id={cluster_id}\nversion={ZK_VERSION}\n"
            f"broker.id={broker_id}\n")
    tmp = directory / (META_PROPERTIES + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / META_PROPERTIES)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
