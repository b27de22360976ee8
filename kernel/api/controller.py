"""The controller's rules over the cluster image, written once for every metadata
backend: replica placement, leader elections (the periodic preferred-leader rebalance
included), reassignments, topic deletion and AlterPartition's checks. Pure functions: a
backend persists what they decide."""

from kernel.replication_control import (
    NewTopicNames,
    added_partitions_assignment,
    after_broker_change,
    assign_replicas,
    auto_rebalance_elections,
    broker_racks,
    check_alter_partition,
    check_manual_assignment,
    check_replication_factor,
    completed_reassignment,
    election_partition,
    imbalanced_partitions,
    initial_state,
    new_topic_assignment,
    offline_election,
    preferred_replica_imbalance,
    reassignment,
    requested_election,
    topics_to_delete,
)

__all__ = [
    "NewTopicNames",
    "added_partitions_assignment",
    "after_broker_change",
    "assign_replicas",
    "auto_rebalance_elections",
    "broker_racks",
    "check_alter_partition",
    "check_manual_assignment",
    "check_replication_factor",
    "completed_reassignment",
    "election_partition",
    "imbalanced_partitions",
    "initial_state",
    "new_topic_assignment",
    "offline_election",
    "preferred_replica_imbalance",
    "reassignment",
    "requested_election",
    "topics_to_delete",
]
