"""The runtime coordinator plugins run on (groups, transactions): one sans-io shard per
partition of an internal compacted topic led here, written through the
:class:`PartitionWriter` that ``PluginServices.partition_writer()`` gives. A plugin
registers its coordinator by FindCoordinator key type through the
:class:`CoordinatorRegistry` of ``kafkernel_register_coordinators``."""

from kernel.coordination import (
    CoordinatorError,
    CoordinatorRuntime,
    CoordinatorShard,
    ShardResult,
    TransactionResult,
)
from kernel.coordination.internal_topic import create_internal_topic
from kernel.coordination.registry import CoordinatorPartition, CoordinatorRegistry, CoordinatorType
from kernel.services import CommitWait, PartitionWriter, TransactionCompleter

__all__ = [
    "CommitWait",
    "CoordinatorError",
    "CoordinatorPartition",
    "CoordinatorRegistry",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "CoordinatorType",
    "PartitionWriter",
    "ShardResult",
    "TransactionCompleter",
    "TransactionResult",
    "create_internal_topic",
]
