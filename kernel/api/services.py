"""What plugins see of the broker: Protocols the broker satisfies.

:class:`PluginServices` is the lifecycle hooks' ``broker`` (never the replica or log
manager: a coordinator writes through :meth:`PluginServices.partition_writer`, reads a
replica through :meth:`PluginServices.partition`); :class:`RequestServices` is a
handler's ``ctx.services``. :func:`lock_log_dir` takes a data directory for a metadata
log as the kernel takes its log directories."""

from kernel.log.manager import LogDirError, lock_log_dir
from kernel.services import (
    CommitWait,
    CoordinatorLookup,
    PartitionView,
    PartitionWriter,
    PluginServices,
    RequestServices,
    TopicPartition,
    TransactionCompleter,
    TransactionResult,
    TransactionVerifier,
    TxnMarker,
    TxnMarkerResult,
)

__all__ = [
    "CommitWait",
    "CoordinatorLookup",
    "LogDirError",
    "PartitionView",
    "PartitionWriter",
    "PluginServices",
    "RequestServices",
    "TopicPartition",
    "TransactionCompleter",
    "TransactionResult",
    "TransactionVerifier",
    "TxnMarker",
    "TxnMarkerResult",
    "lock_log_dir",
]
