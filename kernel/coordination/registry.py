"""Which coordinator answers FindCoordinator for each key type (Kafka's
``CoordinatorType``). A plugin that runs a coordinator registers it here through the
``kafkernel_register_coordinators`` hook; the kernel's FindCoordinator handler asks it
which partition of its internal topic owns a key and answers with that partition's
leader."""

from __future__ import annotations

import enum
from collections.abc import Callable

__all__ = ["CoordinatorPartition", "CoordinatorRegistry", "CoordinatorType",
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


class CoordinatorRegistry:
    def __init__(self) -> None:
        self._coordinators: dict[int, tuple[str, CoordinatorPartition]] = {}
        self._owner = "kernel"

    def owned_by(self, owner: str) -> CoordinatorRegistry:
        """Set the name that following registrations are attributed to (the kernel
        sets it to each plugin's name before calling its hook)."""
        self._owner = owner
        return self

    def register(self, key_type: CoordinatorType, partition_of: CoordinatorPartition) -> None:
        existing = self._coordinators.get(key_type)
        if existing is not None:
            raise RegistrationError(
                f"the {key_type.name} coordinator is claimed by both plugin {existing[0]!r} "
                f"and plugin {self._owner!r}; enable only one of them"
            )
        self._coordinators[key_type] = (self._owner, partition_of)

    def get(self, key_type: int) -> CoordinatorPartition | None:
        found = self._coordinators.get(key_type)
        return None if found is None else found[1]

    def __len__(self) -> int:
        return len(self._coordinators)
