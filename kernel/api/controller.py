"""The controller's rules over the cluster image, written once for every metadata
backend: replica placement, leader elections, reassignments, topic deletion and
AlterPartition's checks. Pure functions: a backend persists what they decide."""

from kernel.replication_control import (
    NewTopicNames,
    added_partitions_assignment,
    after_broker_change,
    assign_replicas,
    broker_racks,
    check_alter_partition,
    check_manual_assignment,
    check_replication_factor,
    completed_reassignment,
    initial_state,
    new_topic_assignment,
    offline_election,
    reassignment,
    requested_election,
    topics_to_delete,
)

__all__ = [
    "NewTopicNames",
    "added_partitions_assignment",
    "after_broker_change",
    "assign_replicas",
    "broker_racks",
    "check_alter_partition",
    "check_manual_assignment",
    "check_replication_factor",
    "completed_reassignment",
    "initial_state",
    "new_topic_assignment",
    "offline_election",
    "reassignment",
    "requested_election",
    "topics_to_delete",
]
