"""One-time conversion of a metadata log written before Kafka's format
(``__cluster_metadata-0/metadata.records``, ``jsonlog`` framing) into Kafka's.

At startup, when the old file is there: its intact batches (a torn tail is dropped, as
the old reader did) become Kafka metadata records, one batch each, in a new log that
starts like a new cluster's (LeaderChange, metadata.version); then the old file is renamed
``metadata.records.migrated`` (kept, not deleted). A crash before the rename leaves the
old file in place, and the next start converts again from scratch.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import jsonlog
from .log import MetadataLog, MetadataLogError, versioned
from .properties import fsync_directory
from .records.schema import (
    METADATA_RECORDS,
    BrokerEndpoint,
    EntityData,
    FeatureLevelRecord,
    Message,
    PartitionRecord,
    RegisterBrokerRecord,
)

LEGACY_LOG_FILE = "metadata.records"
MIGRATED_SUFFIX = ".migrated"


def read_legacy_log(path: Path) -> tuple[list[list[jsonlog.MetadataRecord]], int]:
    """The old log's intact batches, and the bytes of a torn tail left out."""
    data = path.read_bytes()
    batches: list[list[jsonlog.MetadataRecord]] = []
    pos = 0
    while pos < len(data):
        try:
            _, records, pos = jsonlog.decode_batch(data, pos)
        except jsonlog.CorruptBatchError:
            break
        except jsonlog.MetadataLogError as e:
            raise MetadataLogError(f"{path}: {e}") from None
        batches.append(records)
    return batches, len(data) - pos


def _value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, jsonlog.BrokerEndpointRecord):
        return BrokerEndpoint(name=value.name, host=value.host, port=value.port,
                              security_protocol=int(value.security_protocol))
    if isinstance(value, jsonlog.QuotaEntityData):
        return EntityData(entity_type=value.entity_type, entity_name=value.entity_name)
    if isinstance(value, tuple):
        return tuple(_value(v) for v in value)
    return value


def convert_record(record: jsonlog.MetadataRecord,
                   default_dir: Callable[[int], uuid.UUID]) -> Message:
    """The Kafka record of an old one: same api key, same fields (``partition`` is
    Kafka's ``PartitionId``; TopicRecord's ``internal`` is derived from the name)."""
    fields = {f.name: _value(getattr(record, f.name)) for f in dataclasses.fields(record)}
    fields.pop("internal", None)
    if "partition" in fields:
        fields["partition_id"] = fields.pop("partition")
    cls = METADATA_RECORDS[record.API_KEY]
    if cls is PartitionRecord:
        fields["directories"] = tuple(default_dir(r) for r in fields["replicas"])
    elif cls is RegisterBrokerRecord:
        fields.update(fenced=False, cordoned_log_dirs=())
    return cls(**fields)


def convert_legacy_log(metadata_log_dir: Path, node_id: int, metadata_version: int,
                       default_dir: Callable[[int], uuid.UUID], logger: Any) -> bool:
    """Convert ``metadata.records`` when present; True when it did. Blocking."""
    directory = Path(metadata_log_dir) / "__cluster_metadata-0"
    legacy = directory / LEGACY_LOG_FILE
    if not legacy.exists():
        return False
    batches, torn = read_legacy_log(legacy)
    converted = [[versioned(convert_record(r, default_dir)) for r in batch]
                 for batch in batches]
    log = MetadataLog(metadata_log_dir, node_id, logger)
    log.open()
    try:
        log.reset()  # what an interrupted conversion wrote
        log.begin_epoch()
        log.append_blocking([versioned(FeatureLevelRecord(
            name="metadata.version", feature_level=metadata_version))])
        for batch in converted:
            log.append_blocking(batch)
        end = log.next_offset
    finally:
        log.close()
    target = legacy.with_name(LEGACY_LOG_FILE + MIGRATED_SUFFIX)
    os.replace(legacy, target)
    fsync_directory(directory)
    logger.warning(
        "converted the metadata log to Kafka's format", path=str(directory),
        old_file=str(target), batches=len(batches),
        records=sum(len(b) for b in batches), dropped_torn_bytes=torn, next_offset=end)
    return True
