"""Group coordinator plugin: classic consumer groups (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup), committed offsets (OffsetCommit, OffsetFetch, OffsetDelete) and group
administration (ListGroups, DescribeGroups, DeleteGroups), with state kept in the
compacted ``__consumer_offsets`` topic in Kafka's own record format.

The logic is sans-io: :class:`~plugins.coordinator.shard.GroupCoordinatorShard` replays
one ``__consumer_offsets`` partition into its classic group manager (``classic.py``) and
its offset manager (``offsets.py``) and returns records to append, responses and
timers; the kernel's coordinator runtime does the I/O.
"""

from plugins.coordinator.plugin import CoordinatorPlugin

__all__ = ["CoordinatorPlugin"]
