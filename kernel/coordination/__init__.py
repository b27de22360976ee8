"""The runtime shared by coordinators (groups, transactions): one sans-io shard per
partition of an internal compacted topic that this broker leads, changed only by
replaying records; responses go out once the records behind them are committed."""

from kernel.coordination.runtime import (
    CoordinatorError,
    CoordinatorRuntime,
    CoordinatorShard,
    ShardResult,
    TransactionResult,
)

__all__ = [
    "CoordinatorError",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "ShardResult",
    "TransactionResult",
]
