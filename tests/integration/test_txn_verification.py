"""Transaction verification (KIP-890 part 1) over a socket with kio frames: a
transactional Produce to a partition the transaction coordinator has not added is
refused and nothing is appended (INVALID_TXN_STATE to Produce v3-10,
TRANSACTION_ABORTABLE from v11), as is a late batch after its transaction ended; Produce
v12+ adds the partition itself (KIP-890 part 2's implicit AddPartitionsToTxn);
TxnOffsetCommit without AddOffsetsToTxn is refused; with
transaction.partition.verification.enable off the broker appends as before."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.protocol.build import request_module
from kernel.protocol.records import SimpleRecord, build_batch
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_produce_fetch import create_topic
from tests.integration.test_txn_coordinator_wire import (
    TOPIC,
    _start,
    add_partitions,
    call,
    described_state,
    end_txn,
    init_ok,
)


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    return _start(broker_factory)


def produce(broker: EmbeddedBroker, tid: str, pid: int, epoch: int, sequence: int, *,
            version: int = 9, partition: int = 0) -> Any:
    m = request_module(0, version)
    records = build_batch([SimpleRecord(value=b"v")], producer_id=pid, producer_epoch=epoch,
                          base_sequence=sequence, is_transactional=True)
    (topic,) = call(broker, 0, version, transactional_id=tid, acks=-1,
                    timeout=datetime.timedelta(seconds=5), topic_data=(m.TopicProduceData(
                        name=TOPIC, partition_data=(m.PartitionProduceData(
                            index=partition, records=records),)),)).responses
    (answer,) = topic.partition_responses
    return answer


def high_watermark(broker: EmbeddedBroker, partition: int = 0) -> int:
    assert broker.broker is not None
    p = broker.broker.replicas.get_partition(TOPIC, partition)
    assert p is not None
    return int(p.high_watermark)


@pytest.mark.parametrize(("version", "expected"), [
    (3, ErrorCode.invalid_txn_state), (10, ErrorCode.invalid_txn_state),
    (11, ErrorCode.transaction_abortable)])
def test_a_partition_not_in_the_transaction_is_refused(broker: EmbeddedBroker, version: int,
                                                       expected: ErrorCode) -> None:
    pid, epoch = init_ok(broker, "v-refused")
    answer = produce(broker, "v-refused", pid, epoch, 0, version=version)
    assert answer.error_code == expected
    assert high_watermark(broker) == 0
    # Another partition of the same transaction does not let it in.
    assert add_partitions(broker, "v-refused", pid, epoch, {TOPIC: [1]}) == {
        (TOPIC, 1): ErrorCode.none}
    assert produce(broker, "v-refused", pid, epoch, 0, version=version).error_code == expected
    assert produce(broker, "v-refused", pid, epoch, 0, version=version,
                   partition=1).error_code == ErrorCode.none
    assert end_txn(broker, "v-refused", pid, epoch, commit=False) == ErrorCode.none


def test_an_added_partition_is_appended_and_a_late_batch_refused(
        broker: EmbeddedBroker) -> None:
    pid, epoch = init_ok(broker, "v-late")
    assert add_partitions(broker, "v-late", pid, epoch, {TOPIC: [0]}) == {
        (TOPIC, 0): ErrorCode.none}
    assert produce(broker, "v-late", pid, epoch, 0).error_code == ErrorCode.none
    # The open transaction's next batch is not verified again (nor refused).
    assert produce(broker, "v-late", pid, epoch, 1).error_code == ErrorCode.none
    assert end_txn(broker, "v-late", pid, epoch, commit=False) == ErrorCode.none
    described_state(broker, "v-late", "CompleteAbort")
    end = high_watermark(broker)
    # A zombie's batch after the abort marker: it would open a transaction nobody ends.
    assert produce(broker, "v-late", pid, epoch, 2).error_code == ErrorCode.invalid_txn_state
    assert high_watermark(broker) == end


def test_a_fenced_or_unknown_producer_is_refused(broker: EmbeddedBroker) -> None:
    pid, epoch = init_ok(broker, "v-fenced")
    assert produce(broker, "v-fenced", pid, epoch + 1, 0).error_code == \
        ErrorCode.invalid_producer_epoch
    assert produce(broker, "v-unknown", pid, epoch, 0).error_code == \
        ErrorCode.invalid_producer_id_mapping
    assert high_watermark(broker) == 0


def test_produce_v12_adds_the_partition_itself(broker: EmbeddedBroker) -> None:
    pid, epoch = init_ok(broker, "v-add")
    assert produce(broker, "v-add", pid, epoch, 0, version=12).error_code == ErrorCode.none
    state = described_state(broker, "v-add", "Ongoing")
    assert [(t.topic, t.partitions) for t in state.topics] == [(TOPIC, (0,))]
    assert end_txn(broker, "v-add", pid, epoch, commit=True) == ErrorCode.none


@pytest.mark.parametrize(("version", "expected"), [
    (3, ErrorCode.invalid_txn_state), (4, ErrorCode.transaction_abortable)])
def test_txn_offset_commit_needs_add_offsets(broker: EmbeddedBroker, version: int,
                                             expected: ErrorCode) -> None:
    pid, epoch = init_ok(broker, "v-offsets")
    m = request_module(28, version)
    answer = call(broker, 28, version, transactional_id="v-offsets", group_id="g",
                  producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
                  group_instance_id=None, topics=(m.TxnOffsetCommitRequestTopic(
                      name=TOPIC, partitions=(m.TxnOffsetCommitRequestPartition(
                          partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                          committed_metadata=None),)),))
    assert answer.topics[0].partitions[0].error_code == expected


def test_verification_can_be_turned_off(broker_factory: Callable[..., EmbeddedBroker]) -> None:
    b = broker_factory({"transaction.partition.verification.enable": False})
    create_topic(b.bootstrap, TOPIC)
    assert produce(b, "v-off", 5, 0, 0).error_code == ErrorCode.none


def test_verification_follows_the_dynamic_broker_config(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    """transaction.partition.verification.enable is dynamic, as in Kafka: set off for
    the broker, the next unverified transactional batch is appended; set on again, it is
    refused. (The replica manager holds the setting since Produce's policy moved there.)"""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    b = _start(broker_factory)
    assert b.broker is not None
    admin = AdminClient({"bootstrap.servers": b.bootstrap})

    def set_verification(value: str) -> None:
        resource = ConfigResource(ResourceType.BROKER, str(b.broker.config.broker_id),
                                  incremental_configs=[ConfigEntry(
                                      "transaction.partition.verification.enable", value,
                                      incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)

    def answered(producer_id: int, accepted: bool) -> bool:
        """Whether a first transactional batch of ``producer_id`` is soon answered as
        ``accepted`` says (the changed config reaches the broker through the image)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            error = produce(b, "v-dynamic", producer_id, 0, 0).error_code
            if (error == ErrorCode.none) == accepted:
                return True
            time.sleep(0.05)
        return False

    assert produce(b, "v-dynamic", 5, 0, 0).error_code != ErrorCode.none
    set_verification("false")
    assert answered(5, accepted=True)
    assert high_watermark(b) == 1
    set_verification("true")
    assert answered(6, accepted=False)
    assert high_watermark(b) == 1
