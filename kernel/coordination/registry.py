"""Which coordinator answers FindCoordinator for each key type (Kafka's
``CoordinatorType``). A plugin that runs a coordinator registers it here through the
``kafkernel_register_coordinators`` hook; the kernel's FindCoordinator handler asks it
which partition of its internal topic owns a key and answers with that partition's
leader."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from kernel.services import TransactionCompleter, TransactionVerifier

__all__ = ["CoordinatorPartition", "CoordinatorRegistry", "CoordinatorType", "Coordinators",
           "RegistrationError"]


class RegistrationError(Exception):
    """Two plugins claim one coordinator; startup stops with this message."""


class CoordinatorType(enum.IntEnum):
    """FindCoordinator's ``key_type``."""

    GROUP = 0
    TRANSACTION = 1
    SHARE = 2


CoordinatorPartition = Callable[[str], tuple[str, int]]
"""The internal topic and partition that own a key (a group id, a transactional id).
Raises ``CoordinatorError`` (COORDINATOR_NOT_AVAILABLE) while the coordinator has none,
e.g. before its topic exists."""


@dataclass(frozen=True, slots=True)
class _Coordinator:
    owner: str
    partition_of: CoordinatorPartition
    topic: str | None
    complete_transaction: TransactionCompleter | None
    verify_transaction: TransactionVerifier | None = None


class Coordinators:
    """The broker's coordinators by key type. Plugins add to it only through their own
    :class:`CoordinatorRegistry` (``registry_for``), so every entry names its plugin."""

    def __init__(self) -> None:
        self._coordinators: dict[int, _Coordinator] = {}

    def registry_for(self, owner: str) -> CoordinatorRegistry:
        return CoordinatorRegistry(self, owner)

    def add(self, key_type: CoordinatorType, owner: str,
            partition_of: CoordinatorPartition, *, topic: str | None = None,
            complete_transaction: TransactionCompleter | None = None,
            verify_transaction: TransactionVerifier | None = None) -> None:
        existing = self._coordinators.get(key_type)
        if existing is not None:
            raise RegistrationError(
                f"the {key_type.name} coordinator is claimed by both plugin "
                f"{existing.owner!r} and plugin {owner!r}; enable only one of them"
            )
        self._coordinators[key_type] = _Coordinator(owner, partition_of, topic,
                                                    complete_transaction, verify_transaction)

    def get(self, key_type: int) -> CoordinatorPartition | None:
        found = self._coordinators.get(key_type)
        return None if found is None else found.partition_of

    def transaction_completer(self, topic: str) -> TransactionCompleter | None:
        """What writes a marker into ``topic`` when a coordinator owns it."""
        for coordinator in self._coordinators.values():
            if coordinator.topic == topic:
                return coordinator.complete_transaction
        return None

    def transaction_verifier(self) -> TransactionVerifier | None:
        """The transaction coordinator's KIP-890 verification (Produce and
        TxnOffsetCommit ask it), when one is registered."""
        found = self._coordinators.get(CoordinatorType.TRANSACTION)
        return None if found is None else found.verify_transaction

    def internal_topics(self) -> list[str]:
        return [c.topic for c in self._coordinators.values() if c.topic is not None]

    def __len__(self) -> int:
        return len(self._coordinators)


class CoordinatorRegistry:
    """One plugin's view of the coordinators: what it registers is its own."""

    __slots__ = ("_coordinators", "owner")

    def __init__(self, coordinators: Coordinators, owner: str) -> None:
        self._coordinators = coordinators
        self.owner = owner

    def register(self, key_type: CoordinatorType, partition_of: CoordinatorPartition, *,
                 topic: str | None = None,
                 complete_transaction: TransactionCompleter | None = None,
                 verify_transaction: TransactionVerifier | None = None) -> None:
        """``topic``: the coordinator's internal topic. ``complete_transaction``: how a
        transaction marker for that topic is written (through the coordinator's runtime,
        which applies it to its shard); without it markers are appended directly.
        ``verify_transaction``: the transaction coordinator's answer to whether
        partitions are in a producer's transaction (KIP-890 part 1)."""
        self._coordinators.add(key_type, self.owner, partition_of, topic=topic,
                               complete_transaction=complete_transaction,
                               verify_transaction=verify_transaction)
