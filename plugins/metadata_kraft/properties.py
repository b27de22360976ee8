"""``meta.properties``: which cluster and node a directory belongs to.

Written as Kafka writes it in KRaft mode (a java.util.Properties file with ``cluster.id``,
``directory.id``, ``node.id`` and ``version=1``) into every log directory and the metadata
log directory. ``directory.id`` is a random Uuid per directory, kept once written (a file
written before it existed gets one on the next start).
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
        text = uuid_text(uuid.uuid4())
        if not text.startswith("-"):
            return text


def uuid_text(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def parse_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString; raises ValueError."""
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a 16-byte Uuid")
    return uuid.UUID(bytes=raw)


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


def write_meta_properties(directory: Path, cluster_id: str, node_id: int,
                          directory_id: uuid.UUID) -> None:
    """Write atomically (temporary file, fsync, rename, fsync of the directory): a crash
    leaves the old file or the new one, never half of one."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    text = (f"#\n#{stamp}\ncluster.id={cluster_id}\ndirectory.id={uuid_text(directory_id)}\n"
            f"node.id={node_id}\nversion={KRAFT_VERSION}\n")
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


def ensure_meta_properties(
    directories: Sequence[Path], node_id: int,
) -> tuple[str, dict[Path, uuid.UUID]]:
    """Check (and where missing, write) meta.properties of every directory; returns the
    cluster id and each directory's ``directory.id``. Blocking: run it off the event loop.

    Raises ConfigError when a directory belongs to another node or cluster, or is a
    ZooKeeper-mode directory, naming the file and what it holds.
    """
    dirs = list(dict.fromkeys(Path(d) for d in directories))
    found: dict[Path, str] = {}
    dir_ids: dict[Path, uuid.UUID] = {}
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
        dir_text = props.get("directory.id")
        if dir_text is not None:
            try:
                dir_ids[directory] = parse_uuid(dir_text)
            except ValueError:
                raise ConfigError(f"{path}: directory.id={dir_text} is not a Uuid") from None
    ids = set(found.values())
    if len(ids) > 1:
        detail = ", ".join(f"{d / META_PROPERTIES}: {c}" for d, c in found.items())
        raise ConfigError(f"log directories belong to different clusters ({detail})")
    cluster_id = ids.pop() if ids else new_cluster_id()
    for directory in dirs:
        if directory not in dir_ids:  # new, or written before directory.id existed
            # uuid4 has version bits set: never one of Kafka's reserved directory ids
            dir_ids[directory] = uuid.uuid4()
            write_meta_properties(directory, cluster_id, node_id, dir_ids[directory])
    return cluster_id, dir_ids
