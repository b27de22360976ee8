"""PluginServices.write_txn_markers through an in-process broker: each marker becomes a
control batch at the end of its partition's log, answered once committed, with Kafka's
errors for partitions this broker does not host."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kernel.protocol.records import ControlRecordType, decode_batches, parse_control_record
from kernel.services import TransactionResult, TxnMarker
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_produce_fetch import create_topic

TOPIC = "marked"


def write(broker: EmbeddedBroker, *markers: TxnMarker) -> list[Any]:
    assert broker.broker is not None
    return broker.call(broker.broker.write_txn_markers(list(markers)))


def log_batches(broker: EmbeddedBroker, partition: int) -> list[Any]:
    assert broker.broker is not None
    p = broker.broker.replicas.get_partition(TOPIC, partition)
    assert p is not None

    async def read() -> Any:
        return p.log.read(0, 1 << 20).records

    return decode_batches(broker.call(read()))


def test_markers_are_control_batches_committed_on_each_partition(broker: EmbeddedBroker) -> None:
    create_topic(broker.bootstrap, TOPIC, partitions=2)
    commit = TxnMarker(producer_id=7, producer_epoch=3, coordinator_epoch=5,
                       result=TransactionResult.COMMIT, partitions=((TOPIC, 0), (TOPIC, 1)))
    abort = TxnMarker(producer_id=8, producer_epoch=0, coordinator_epoch=5,
                      result=TransactionResult.ABORT, partitions=((TOPIC, 1),))

    results = write(broker, commit, abort)

    assert [(r.producer_id, dict(r.errors)) for r in results] == [
        (7, {(TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.none}),
        (8, {(TOPIC, 1): ErrorCode.none}),
    ]
    (only,) = log_batches(broker, 0)
    assert only.header.is_control and only.header.is_transactional
    assert (only.header.producer_id, only.header.producer_epoch) == (7, 3)
    assert parse_control_record(only.records[0]) == (ControlRecordType.COMMIT, 5)
    first, second = log_batches(broker, 1)
    assert [parse_control_record(b.records[0])[0] for b in (first, second)] == [
        ControlRecordType.COMMIT, ControlRecordType.ABORT]
    assert second.header.producer_id == 8
    assert broker.broker is not None
    replica = broker.broker.replicas.get_partition(TOPIC, 1)
    assert replica is not None and replica.high_watermark == 2


def test_partitions_not_hosted_here_are_unknown(broker: EmbeddedBroker) -> None:
    create_topic(broker.bootstrap, TOPIC)
    marker = TxnMarker(producer_id=1, producer_epoch=0, coordinator_epoch=0,
                       result=TransactionResult.ABORT,
                       partitions=(("absent", 0), (TOPIC, 0), (TOPIC, 9)))

    (result,) = write(broker, marker)

    assert dict(result.errors) == {("absent", 0): ErrorCode.unknown_topic_or_partition,
                                   (TOPIC, 0): ErrorCode.none,
                                   (TOPIC, 9): ErrorCode.unknown_topic_or_partition}
    assert len(log_batches(broker, 0)) == 1


def test_the_logs_refusals_are_the_partitions_errors(broker: EmbeddedBroker) -> None:
    create_topic(broker.bootstrap, TOPIC)

    def marker(producer_epoch: int, coordinator_epoch: int) -> TxnMarker:
        return TxnMarker(producer_id=3, producer_epoch=producer_epoch,
                         coordinator_epoch=coordinator_epoch,
                         result=TransactionResult.COMMIT, partitions=((TOPIC, 0),))

    (first,) = write(broker, marker(producer_epoch=2, coordinator_epoch=5))
    assert dict(first.errors) == {(TOPIC, 0): ErrorCode.none}
    # An older transaction coordinator (a zombie) and an older producer epoch are fenced
    # by the log, and nothing is appended.
    older_coordinator, older_producer = write(broker, marker(2, 4), marker(1, 5))
    assert dict(older_coordinator.errors) == {
        (TOPIC, 0): ErrorCode.transaction_coordinator_fenced}
    assert dict(older_producer.errors) == {(TOPIC, 0): ErrorCode.invalid_producer_epoch}
    assert len(log_batches(broker, 0)) == 1
