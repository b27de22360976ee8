"""Leadership events: what the replica manager tells its subscribers (the coordination
runtime, later the transactions plugin) after it applied a cluster image, so nobody
polls the replicas or follows the image to learn which partitions this broker leads."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    DELETED = "deleted"  # the partition's log is gone from this broker


@dataclass(frozen=True, slots=True)
class LeadershipChange:
    """The local replica of ``topic``-``partition`` became leader or follower in
    ``leader_epoch``, or was deleted (``leader_epoch`` -1). Published once the whole
    image is applied: the replica already has the role the event names."""

    topic: str
    partition: int
    role: Role
    leader_epoch: int


LeadershipListener = Callable[[LeadershipChange], None]
