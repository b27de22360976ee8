"""What this broker knows of the znodes, as its watches last delivered them.

Owned by the backend (only its watch callbacks, on the event loop, change it); the
controller reads it to decide what to write. It is never the authority: every write is
conditional on the znode versions it holds, so a stale view costs a retry, never a lost
update.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernel.api.cluster import BrokerRegistration, ElectionType

from .znodes import LeaderAndIsr, TopicAssignment


@dataclass
class TopicZnodes:
    """One /brokers/topics/<topic> with its partition states and /config/topics/<topic>."""

    assignment: TopicAssignment | None = None
    version: int = -1  # of /brokers/topics/<topic>, for conditional rewrites
    states: dict[int, LeaderAndIsr] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)


@dataclass
class ZnodeCache:
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    controller_id: int = -1
    topics: dict[str, TopicZnodes] = field(default_factory=dict)
    # Topics named under /admin/delete_topics, waiting for the controller.
    deletions: set[str] = field(default_factory=set)
    broker_configs: dict[int, dict[str, str]] = field(default_factory=dict)
    # Children of /isr_change_notification, for the controller to consume.
    isr_changes: set[str] = field(default_factory=set)
    # /config/users/<sanitized name>, by the user's name.
    user_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Elections asked for (/admin/preferred_replica_election and its unclean twin): by
    # election type, the partitions and the znode's version, for the controller.
    elections: dict[ElectionType, tuple[frozenset[tuple[str, int]], int]] = field(
        default_factory=dict)
