"""The ``quorum-state`` file: Kafka's ``FileQuorumStateStore`` format.

One line of compact JSON, no trailing newline, written to ``quorum-state.tmp``, fsynced
and renamed over ``quorum-state``. The fields are those of ``QuorumStateData.json``
(versions 0-1) in the order Kafka's JSON converter writes them, then ``data_version``:

- v0 (kraft.version 0): clusterId, leaderId, leaderEpoch, votedId, appliedOffset,
  currentVoters ``[{"voterId": n}]``;
- v1 (kraft.version 1): leaderId, leaderEpoch, votedId, votedDirectoryId (base64 uuid,
  all zeros when none).

A missing file means epoch 0 with nothing known. Parsing is pure; only
``write_atomic`` touches the disk.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FILE_NAME",
    "ElectionRecord",
    "QuorumStateError",
    "encode",
    "parse",
    "read",
    "write_atomic",
]

FILE_NAME = "quorum-state"
_ZERO_UUID = uuid.UUID(int=0)
_SUPPORTED = (0, 1)


class QuorumStateError(ValueError):
    """The quorum-state file cannot be read: a node must not start on a guess."""


@dataclass(frozen=True, slots=True)
class ElectionRecord:
    """What quorum-state holds: the durable part of the election (Kafka's ElectionState)."""

    epoch: int = 0
    leader_id: int | None = None
    voted_id: int | None = None
    voted_directory_id: uuid.UUID | None = None


def _uuid_to_base64(value: uuid.UUID | None) -> str:
    raw = (value or _ZERO_UUID).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _uuid_from_base64(text: str) -> uuid.UUID | None:
    value = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    return None if value == _ZERO_UUID else value


def _id_or_sentinel(value: int | None) -> int:
    return -1 if value is None else value


def encode(record: ElectionRecord, data_version: int, voters: frozenset[int] = frozenset(),
           cluster_id: str = "") -> str:
    """The file's text for ``record`` at ``data_version`` (0 or 1); ``voters`` and
    ``cluster_id`` are written by v0 only."""
    if data_version == 0:
        doc: dict[str, object] = {
            "clusterId": cluster_id,
            "leaderId": _id_or_sentinel(record.leader_id),
            "leaderEpoch": record.epoch,
            "votedId": _id_or_sentinel(record.voted_id),
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in sorted(voters)],
        }
    elif data_version == 1:
        doc = {
            "leaderId": _id_or_sentinel(record.leader_id),
            "leaderEpoch": record.epoch,
            "votedId": _id_or_sentinel(record.voted_id),
            "votedDirectoryId": _uuid_to_base64(record.voted_directory_id),
        }
    else:
        raise QuorumStateError(f"quorum-state data_version {data_version} is not 0 or 1")
    doc["data_version"] = data_version
    return json.dumps(doc, separators=(",", ":"))


def _int_field(doc: dict[str, object], name: str, default: int) -> int:
    value = doc.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise QuorumStateError(f"quorum-state field {name} is not an integer: {value!r}")
    return value


def parse(text: str) -> tuple[ElectionRecord, int]:
    """The record and data_version in a quorum-state file's text."""
    line = text.splitlines()[0] if text.strip() else ""
    if not line:
        raise QuorumStateError("quorum-state is empty (file ended prematurely)")
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise QuorumStateError(f"quorum-state is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise QuorumStateError("quorum-state is not a JSON object")
    if "data_version" not in doc:
        raise QuorumStateError("quorum-state has no data_version")
    version = _int_field(doc, "data_version", -1)
    if version not in _SUPPORTED:
        raise QuorumStateError(
            f"quorum-state data_version ({version}) is not within the supported 0-1")
    leader = _int_field(doc, "leaderId", -1)
    voted = _int_field(doc, "votedId", -1)
    directory = None
    if version >= 1:
        raw = doc.get("votedDirectoryId", "")
        if not isinstance(raw, str):
            raise QuorumStateError(f"quorum-state votedDirectoryId is not a string: {raw!r}")
        try:
            directory = _uuid_from_base64(raw) if raw else None
        except ValueError:
            raise QuorumStateError(f"quorum-state votedDirectoryId is not a uuid: {raw!r}") \
                from None
    record = ElectionRecord(
        epoch=_int_field(doc, "leaderEpoch", -1),
        leader_id=None if leader < 0 else leader,
        voted_id=None if voted < 0 else voted,
        voted_directory_id=directory,
    )
    if record.epoch < 0:
        raise QuorumStateError(f"quorum-state leaderEpoch is negative: {record.epoch}")
    return record, version


def read(directory: Path) -> ElectionRecord:
    """The record in ``directory``'s quorum-state; epoch 0 if there is none yet."""
    try:
        text = (directory / FILE_NAME).read_text(encoding="utf-8")
    except FileNotFoundError:
        return ElectionRecord()
    return parse(text)[0]


def write_atomic(directory: Path, text: str) -> None:
    """Write quorum-state as Kafka does: tmp file, fsync, rename, fsync the directory
    (so the rename itself survives a crash)."""
    tmp = directory / (FILE_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, directory / FILE_NAME)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
