"""Replica placement: Kafka's rack-unaware assignment (AdminUtils).

The first replica of partition p goes to broker (p + start_index) mod n, so leaders
spread round-robin; followers follow at a shift that grows every n partitions, so the
replicas of one broker's partitions do not all land on the same other broker. A random
start index and shift keep broker 0 from leading partition 0 of every topic.
"""

from __future__ import annotations

from collections.abc import Sequence


def assign_replicas(
    broker_ids: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int,
    replica_shift: int,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists of partitions ``first_partition ..``; ``broker_ids`` sorted, at
    least ``replication_factor`` of them."""
    n = len(broker_ids)
    if not 0 < replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} with {n} brokers")
    shift = replica_shift
    assignment: list[tuple[int, ...]] = []
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        followers = (
            broker_ids[(first + 1 + (shift + j) % (n - 1)) % n]
            for j in range(replication_factor - 1)
        )
        assignment.append((broker_ids[first], *followers))
    return assignment
