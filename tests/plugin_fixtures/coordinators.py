"""Plugins that run stand-in coordinators, for FindCoordinator's routing by key type.

Enable with
``enabled = ["metadata_kraft", "tests.plugin_fixtures.coordinators:TransactionCoordinator"]``.
"""

from __future__ import annotations

from kernel.api.coordination import CoordinatorRegistry, CoordinatorType
from kernel.api.hooks import hookimpl

TRANSACTION_COORDINATOR = "tests.plugin_fixtures.coordinators:TransactionCoordinator"
SECOND_GROUP_COORDINATOR = "tests.plugin_fixtures.coordinators:SecondGroupCoordinator"
TOPIC = "toy-transactions"


class TransactionCoordinator:
    """Owns key type 1: every transactional id lives in partition 0 of TOPIC."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    @hookimpl
    def kafkernel_register_coordinators(self, registry: CoordinatorRegistry) -> None:
        registry.register(CoordinatorType.TRANSACTION, self.partition_of)

    def partition_of(self, transactional_id: str) -> tuple[str, int]:
        self.asked.append(transactional_id)
        return TOPIC, 0


class SecondGroupCoordinator:
    """Claims key type 0, which the coordinator plugin owns: startup must refuse it."""

    @hookimpl
    def kafkernel_register_coordinators(self, registry: CoordinatorRegistry) -> None:
        registry.register(CoordinatorType.GROUP, lambda group_id: (TOPIC, 0))
