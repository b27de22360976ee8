"""The runtime shared by coordinators (groups, transactions): one sans-io shard per
partition of an internal compacted topic that this broker leads, changed only by
replaying records; responses go out once the records behind them are committed. It
writes through a PartitionWriter; the kernel's is backed by the replica manager."""

from kernel.coordination.partition_writer import CoordinatorPartitionWriter, PartitionWriter
from kernel.coordination.runtime import (
    CoordinatorError,
    CoordinatorRuntime,
    CoordinatorShard,
    ShardResult,
    TransactionResult,
)

__all__ = [
    "CoordinatorError",
    "CoordinatorPartitionWriter",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "PartitionWriter",
    "ShardResult",
    "TransactionResult",
]
