"""The controller's rules over the cluster image, written once for every metadata
backend: replica placement, leader elections, reassignments and AlterPartition's
checks. Pure functions: a backend persists what they decide."""

from kernel.replication_control import (
    NewTopicNames,
    added_partitions_assignment,
    assign_replicas,
    check_alter_partition,
    new_topic_assignment,
    offline_election,
    reassignment,
    requested_election,
)

__all__ = [
    "NewTopicNames",
    "added_partitions_assignment",
    "assign_replicas",
    "check_alter_partition",
    "new_topic_assignment",
    "offline_election",
    "reassignment",
    "requested_election",
]
