"""What the Raft node asks its driver to do (see ``core``). The driver executes a list
of actions in order; PersistQuorumState completes before the next one starts."""

from __future__ import annotations

from dataclasses import dataclass

from . import messages as m
from .quorum_store import ElectionRecord

__all__ = [
    "Action",
    "Commit",
    "Fatal",
    "Flush",
    "LeaderChanged",
    "NotLeaderError",
    "PersistQuorumState",
    "Respond",
    "Send",
]


@dataclass(frozen=True, slots=True)
class Send:
    destination: int
    correlation_id: int
    request: m.RaftRequest


@dataclass(frozen=True, slots=True)
class Respond:
    request_id: int
    response: m.RaftResponse


@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    """Write quorum-state (quorum_store.encode + write_atomic) before any later action."""

    record: ElectionRecord


@dataclass(frozen=True, slots=True)
class Flush:
    """Make the log durable (fsync) up to at least ``offset``, then call ``on_flushed``."""

    offset: int


@dataclass(frozen=True, slots=True)
class Commit:
    """Every offset below ``high_watermark`` is committed: apply it."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    epoch: int
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class Fatal:
    """The node must stop (Kafka throws): e.g. a divergence below the high watermark."""

    reason: str


Action = Send | Respond | PersistQuorumState | Flush | Commit | LeaderChanged | Fatal


class NotLeaderError(Exception):
    """``append`` on a node that is not the leader (the controller answers
    NOT_CONTROLLER)."""
