"""Kernel-owned APIs, one module per API key. Each module declares ``API_KEY``,
``MIN_VERSION``, ``MAX_VERSION`` and ``handle`` (and ``ADVERTISED_MIN_VERSION`` where
ApiVersions lists more than is served, as Kafka does for Produce); the kernel registers
them through the same ``kafkernel_register_apis`` hook that plugins use. FindCoordinator
is the exception: it is served only once a plugin registers a coordinator
(``find_coordinator.register``)."""

from __future__ import annotations

from types import ModuleType

from kernel.handlers import (
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    api_versions,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    elect_leaders,
    fetch,
    incremental_alter_configs,
    list_offsets,
    list_partition_reassignments,
    metadata,
    offset_for_leader_epoch,
    produce,
    write_txn_markers,
)
from kernel.hookspecs import hookimpl
from kernel.requests import ApiRegistry, register_handler_modules

HANDLER_MODULES: tuple[ModuleType, ...] = (
    api_versions,
    metadata,
    produce,
    fetch,
    list_offsets,
    offset_for_leader_epoch,
    delete_records,
    create_topics,
    delete_topics,
    describe_configs,
    alter_configs,
    describe_log_dirs,
    create_partitions,
    incremental_alter_configs,
    describe_cluster,
    describe_topic_partitions,
    write_txn_markers,
    describe_producers,
    elect_leaders,
    alter_partition_reassignments,
    list_partition_reassignments,
    describe_client_quotas,
    alter_client_quotas,
)


@hookimpl
def kafkernel_register_apis(registry: ApiRegistry) -> None:
    # The same path as a plugin's handler modules: one handler contract.
    register_handler_modules(registry, HANDLER_MODULES)
