"""A consume-transform-produce loop with confluent-kafka (read_committed input, a
transactional producer sending the group's offsets with its output) across a Kafkernel
broker killed mid-transaction and started again on its data: the output holds each
input record exactly once. The transaction timeout is longer than the test, so only the
next instance's InitProducerId (same transactional id) can abort the killed transaction:
it is checked Ongoing after the restart (loaded from __transaction_state) and aborted
with the fencing epoch by the init. The broker runs as a process of its own (tests/
broker_process.py) so it can be killed. Apache Kafka is not run here: the reference
harness (reference/kafka.py) formats a fresh log dir on each start, so it cannot restart
a Kafka on its data."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kernel.protocol.build import make
from kernel.protocol.records import ControlRecordType
from tests.broker_process import BrokerProcess
from tests.integration.test_transactions_confluent import consume_all, create_topics
from tests.integration.test_txn_coordinator_wire import markers
from tests.integration.wire import request

INPUT_RECORDS = 40
BATCH = 10
# Longer than the test: only the next instance's InitProducerId can abort the
# transaction the kill leaves open, not the coordinator's timeout.
TRANSACTION_TIMEOUT_MS = 600_000


def until(fn: Any, done: Any, seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    answer = fn()
    while not done(answer) and time.monotonic() < deadline:
        time.sleep(0.1)
        answer = fn()
    return answer


def described(bootstrap: str, transactional_id: str) -> Any:
    """DescribeTransactions of one id, once its coordinator answers."""
    def once() -> Any:
        (state,) = request(bootstrap, make(load_request_schema(65, 0),
                                           transactional_ids=(transactional_id,))
                           ).transaction_states
        return state
    return until(once, lambda s: s.error_code == ErrorCode.none)


def listed(bootstrap: str) -> dict[str, tuple[int, str]]:
    """ListTransactions: transactional id -> (producer id, state)."""
    answer = until(lambda: request(bootstrap, make(
        load_request_schema(66, 1), state_filters=(), producer_id_filters=(),
        duration_filter=-1)), lambda a: a.error_code == ErrorCode.none)
    return {s.transactional_id: (s.producer_id, s.transaction_state)
            for s in answer.transaction_states}


def member(bootstrap: str, group: str, topic: str) -> Consumer:
    """The input's reader, starting from ``group``'s committed offset. It assigns the
    partition itself: a subscribed member killed with the broker would hold the group's
    next rebalance for its session timeout."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 0)])
    return consumer


def batch_of(consumer: Consumer, n: int, seconds: float = 20) -> list[Any]:
    records: list[Any] = []
    deadline = time.monotonic() + seconds
    while len(records) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            records.append(msg)
    return records


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                     "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS})


def transform(consumer: Consumer, producer: Producer, output: str, records: list[Any]) -> None:
    producer.begin_transaction()
    for msg in records:
        producer.produce(output, key=msg.key(), value=b"out-" + msg.value())
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 30)


def test_consume_transform_produce_is_exactly_once_across_a_broker_kill(
        tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    source, output, group, txn_id = (f"ctp-in-{tag}", f"ctp-out-{tag}", f"ctp-{tag}",
                                     f"ctp-id-{tag}")
    broker = BrokerProcess(tmp_path).start()
    try:
        create_topics(broker.bootstrap, source, output, partitions=1)
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(INPUT_RECORDS):
            plain.produce(source, key=b"%d" % i, value=b"%d" % i)
        assert plain.flush(30) == 0

        consumer = member(broker.bootstrap, group, source)
        producer = transactional(broker.bootstrap, txn_id)
        producer.init_transactions(30)
        for _ in range(2):
            transform(consumer, producer, output, batch_of(consumer, BATCH))
            producer.commit_transaction(30)
        # The third batch's output and offsets are in the logs, uncommitted, when the
        # broker is killed.
        transform(consumer, producer, output, batch_of(consumer, BATCH))
        assert producer.flush(30) == 0
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGKILL)
        broker.proc.wait(10)
        consumer.close()
        del producer

        broker = BrokerProcess(tmp_path, data=tmp_path / "data", port=broker.port).start()
        # The killed transaction was loaded from __transaction_state, still open.
        open_txn = described(broker.bootstrap, txn_id)
        assert open_txn.transaction_state == "Ongoing"
        pid, epoch = open_txn.producer_id, open_txn.producer_epoch
        assert {(t.topic, p) for t in open_txn.topics for p in t.partitions} >= {(output, 0)}
        assert listed(broker.bootstrap)[txn_id] == (pid, "Ongoing")
        # The next instance of the application: its init aborts the open transaction
        # (fencing the killed one with a bumped epoch); it resumes from the group's
        # committed offsets.
        consumer = member(broker.bootstrap, group, source)
        producer = transactional(broker.bootstrap, txn_id)
        producer.init_transactions(30)
        # Aborted with the fencing epoch, then handed the next one (Kafka's order).
        assert markers(broker, output, 0)[-1] == (ControlRecordType.ABORT, pid, epoch + 1)
        assert listed(broker.bootstrap)[txn_id] == (pid, "Empty")
        for _ in range(INPUT_RECORDS // BATCH - 2):
            transform(consumer, producer, output, batch_of(consumer, BATCH))
            producer.commit_transaction(30)
        consumer.close()

        expected = sorted(b"out-%d" % i for i in range(INPUT_RECORDS))
        committed = sorted(m.value() for m in consume_all(
            broker.bootstrap, [output], "read_committed", partitions=1))
        assert committed == expected
        # The killed transaction's records are in the log, aborted: the kill did catch
        # a transaction in flight.
        uncommitted = sorted(m.value() for m in consume_all(
            broker.bootstrap, [output], "read_uncommitted", partitions=1))
        assert len(uncommitted) == INPUT_RECORDS + BATCH
    finally:
        broker.stop()
    assert not broker.problems(), broker.problems()


def test_read_committed_stops_at_a_transaction_left_open_by_a_broker_kill(
        tmp_path: Path) -> None:
    """After a SIGKILL the recovered log still holds the open transaction: its records
    and every record after it (here a plain producer's) stay past the last stable
    offset until the transaction is aborted; then the plain records are read, the
    aborted ones never."""
    tag = uuid.uuid4().hex[:8]
    topic, txn_id = f"lso-{tag}", f"lso-id-{tag}"
    broker = BrokerProcess(tmp_path).start()
    try:
        create_topics(broker.bootstrap, topic, partitions=1)
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce(topic, value=b"before")
        assert plain.flush(30) == 0
        producer = transactional(broker.bootstrap, txn_id)
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, value=b"open")
        assert producer.flush(30) == 0
        plain.produce(topic, value=b"after")
        assert plain.flush(30) == 0
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGKILL)
        broker.proc.wait(10)
        del producer, plain

        broker = BrokerProcess(tmp_path, data=tmp_path / "data", port=broker.port).start()
        assert described(broker.bootstrap, txn_id).transaction_state == "Ongoing"
        values = [m.value() for m in consume_all(broker.bootstrap, [topic], "read_uncommitted",
                                                 partitions=1)]
        assert values == [b"before", b"open", b"after"]
        # Twice, a little apart: the LSO does not move while the transaction is open.
        for _ in range(2):
            values = [m.value() for m in consume_all(broker.bootstrap, [topic],
                                                     "read_committed", partitions=1)]
            assert values == [b"before"]
            time.sleep(0.5)

        transactional(broker.bootstrap, txn_id).init_transactions(30)
        values = [m.value() for m in consume_all(
            broker.bootstrap, [topic], "read_committed", partitions=1,
            until=lambda got: len(got) == 2)]
        assert values == [b"before", b"after"]
    finally:
        broker.stop()
    assert not broker.problems(), broker.problems()
