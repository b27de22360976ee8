"""``meta.properties``: which cluster and node a directory belongs to.

Written as Kafka writes it in KRaft mode (a java.util.Properties file with ``cluster.id``,
``node.id`` and ``version=1``) into every log directory and the metadata log directory.
The cluster id is generated once, on the first start, and read back on every later one,
so a directory moved to another broker or cluster is refused instead of silently mixing
two clusters' data.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from kernel.api.config import ConfigError

META_PROPERTIES = "meta.properties"
KRAFT_VERSION = "1"  # version 0 is a ZooKeeper-mode directory (broker.id, no node.id)


def new_cluster_id() -> str:
    """A random id as Kafka's ``Uuid.randomUuid().toString()``: 22 characters of URL-safe
    base64 without padding. Like Kafka, skip ids starting with "-", which command-line
    tools would read as an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def parse_properties(text: str) -> dict[str, str]:
    """The subset of java.util.Properties that meta.properties uses: ``key=value`` lines
    and ``#``/``!`` comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        props[key.strip()] = value.strip()
    return props


def read_meta_properties(directory: Path) -> dict[str, str] | None:
    try:
        text = (directory / META_PROPERTIES).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return parse_properties(text)


def write_meta_properties(directory: Path, cluster_id: str, node_id: int) -> None:
    """Write atomically (temporary file, fsync, rename, fsync of the directory): a crash
    leaves the old file or the new one, never half of one."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    text = f"#\n#{stamp}\ncluster.id={cluster_id}\nnode.id={node_id}\nversion={KRAFT_VERSION}\n"
    target = directory / META_PROPERTIES
    tmp = directory / (META_PROPERTIES + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    fsync_directory(directory)


def fsync_directory(directory: Path) -> None:
    """Make a created or renamed entry of ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_meta_properties(directories: Sequence[Path], node_id: int) -> str:
    """Check (and where missing, write) meta.properties of every directory; returns the
    cluster id. Blocking: run it off the event loop.

    Raises ConfigError when a directory belongs to another node or cluster, or is a
    ZooKeeper-mode directory, naming the file and what it holds.
    """
    dirs = list(dict.fromkeys(Path(d) for d in directories))
    found: dict[Path, str] = {}
    for directory in dirs:
        directory.mkdir(parents=True, exist_ok=True)
        props = read_meta_properties(directory)
        if props is None:
            continue
        path = directory / META_PROPERTIES
        version = props.get("version")
        if version != KRAFT_VERSION:
            raise ConfigError(
                f"{path}: version={version} is not a KRaft-mode directory (expected "
                f"version={KRAFT_VERSION}); use a fresh directory"
            )
        stored_node = props.get("node.id")
        if stored_node != str(node_id):
            raise ConfigError(
                f"{path}: node.id={stored_node} does not match broker.id={node_id}; "
                "the directory belongs to another node (fix broker.id or log.dirs)"
            )
        cluster_id = props.get("cluster.id")
        if not cluster_id:
            raise ConfigError(f"{path}: cluster.id is missing")
        found[directory] = cluster_id
    ids = set(found.values())
    if len(ids) > 1:
        detail = ", ".join(f"{d / META_PROPERTIES}: {c}" for d, c in found.items())
        raise ConfigError(f"log directories belong to different clusters ({detail})")
    cluster_id = ids.pop() if ids else new_cluster_id()
    for directory in dirs:
        if directory not in found:
            write_meta_properties(directory, cluster_id, node_id)
    return cluster_id
