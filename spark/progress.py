"""What an export has written, read from its Spark checkpoint without Spark.

A Structured Streaming checkpoint writes ``offsets/<batch>`` (the end offsets of each
source for batch ``<batch>``) before the batch runs and ``commits/<batch>`` once its
output is committed. The offsets of the last committed batch are therefore where the
export stands: every record below them, per partition, is in the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

__all__ = ["exported_offsets", "local_path"]


def local_path(location: str) -> Path | None:
    """The local directory of a checkpoint location (a path or a file: URI); None for
    remote file systems (hdfs:, s3a:, ...), which this module does not read."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else location)
    return None


def _batches(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def exported_offsets(checkpoint: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the next offset to export, as of the last committed batch;
    empty before the first commit or for a checkpoint that is not local."""
    root = local_path(checkpoint)
    if root is None:
        return {}
    committed = _batches(root / "commits")
    if not committed:
        return {}
    try:
        # "v1", the batch's metadata, then one line per source: the Kafka source's
        # {"topic": {"partition": offset}}.
        lines = (root / "offsets" / str(committed[-1])).read_text().splitlines()
    except OSError:
        return {}
    out: dict[tuple[str, int], int] = {}
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            continue
        if isinstance(source, dict):
            for topic, partitions in source.items():
                for partition, offset in partitions.items():
                    out[(topic, int(partition))] = int(offset)
    return out
