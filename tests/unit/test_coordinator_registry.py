"""The coordinator registry: one coordinator per key type, and what the kernel asks of
it besides FindCoordinator: the internal topics, and which coordinator writes the
transaction markers of a topic (WriteTxnMarkers)."""

from __future__ import annotations

import pytest

from kernel.coordination.registry import Coordinators, CoordinatorType, RegistrationError
from kernel.services import TransactionResult


async def _complete(partition: int, producer_id: int, producer_epoch: int,
                    coordinator_epoch: int, result: TransactionResult, timeout_ms: int) -> None:
    pass


def test_internal_topics_and_the_completer_of_a_topic() -> None:
    coordinators = Coordinators()
    coordinators.registry_for("groups").register(
        CoordinatorType.GROUP, lambda key: ("__consumer_offsets", 0),
        topic="__consumer_offsets", complete_transaction=_complete)
    coordinators.registry_for("txn").register(
        CoordinatorType.TRANSACTION, lambda key: ("__transaction_state", 0),
        topic="__transaction_state")
    coordinators.registry_for("legacy").register(CoordinatorType.SHARE, lambda key: ("x", 0))

    assert coordinators.internal_topics() == ["__consumer_offsets", "__transaction_state"]
    assert coordinators.transaction_completer("__consumer_offsets") is _complete
    # A coordinator without a completer, and an ordinary topic: markers are appended.
    assert coordinators.transaction_completer("__transaction_state") is None
    assert coordinators.transaction_completer("orders") is None
    with pytest.raises(RegistrationError, match="claimed by both plugin 'groups' and plugin"):
        coordinators.registry_for("other").register(CoordinatorType.GROUP,
                                                    lambda key: ("y", 0))
