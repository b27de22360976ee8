"""The kernel's log storage: record batches, segments, indexes, one partition's log and
the log manager. A pure library: no sockets, and asyncio only in the manager's
periodic tasks."""
