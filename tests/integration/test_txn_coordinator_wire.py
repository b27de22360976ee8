"""The transaction coordinator over a socket, with kio frames: FindCoordinator key type 1,
InitProducerId with a transactional id (epochs, fencing, KIP-360, errors per version),
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn with its markers in the partitions' logs,
timeouts, DescribeTransactions, ListTransactions, state across a restart; and
confluent-kafka's transactional producer. read_committed itself is the log's (txnlog)."""

from __future__ import annotations

import datetime
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.index import load_request_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from prometheus_client import generate_latest

from kernel.cluster import BrokerRegistration
from kernel.protocol.build import make, request_module
from kernel.protocol.records import ControlRecordType, decode_batches, parse_control_record
from kernel.testing.embedded import EmbeddedBroker
from plugins.coordinator.records import partition_for as offsets_partition_for
from tests.integration.test_followers_wire import FOLLOWER, create_replicated, follower_fetch
from tests.integration.test_produce_fetch import create_topic
from tests.integration.wire import connect, encode_request, recv_frame, request

TOPIC = "tx-topic"
TXN_PARTITIONS = 3
OFFSETS_PARTITIONS = 3


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    return _start(broker_factory)


def _start(broker_factory: Callable[..., EmbeddedBroker], **txn: Any) -> EmbeddedBroker:
    b = broker_factory(plugin_settings={
        "txn": {"transaction.state.log.num.partitions": TXN_PARTITIONS, **txn},
        "coordinator": {"offsets.topic.num.partitions": OFFSETS_PARTITIONS}})
    create_topic(b.bootstrap, TOPIC, partitions=2)
    # As in Kafka, the first FindCoordinator for a transactional id creates the topic.
    found = until(lambda: call(b, 10, 4, key_type=1, coordinator_keys=("tx",)).coordinators[0],
                  lambda c: c.error_code == ErrorCode.none)
    assert found.error_code == ErrorCode.none
    return b


def call(broker: EmbeddedBroker, api_key: int, version: int, **fields: Any) -> Any:
    return request(broker.bootstrap, make(load_request_schema(api_key, version), **fields))


def until(fn: Callable[[], Any], done: Callable[[Any], bool], seconds: float = 10) -> Any:
    deadline = time.monotonic() + seconds
    answer = fn()
    while not done(answer) and time.monotonic() < deadline:
        time.sleep(0.05)
        answer = fn()
    return answer


def init(broker: EmbeddedBroker, tid: str, *, version: int = 4, timeout_ms: int = 60_000,
         producer_id: int = -1, producer_epoch: int = -1) -> tuple[ErrorCode, int, int]:
    def once() -> tuple[ErrorCode, int, int]:
        a = call(broker, 22, version, transactional_id=tid,
                 transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                 producer_id=producer_id, producer_epoch=producer_epoch)
        return a.error_code, a.producer_id, a.producer_epoch
    # The __transaction_state partitions load right after startup.
    return until(once, lambda a: a[0] != ErrorCode.coordinator_load_in_progress)


def init_ok(broker: EmbeddedBroker, tid: str, **kwargs: Any) -> tuple[int, int]:
    """Retries CONCURRENT_TRANSACTIONS (an aborted transaction completing), as clients do."""
    error, pid, epoch = until(lambda: init(broker, tid, **kwargs),
                              lambda a: a[0] != ErrorCode.concurrent_transactions)
    assert error == ErrorCode.none
    return pid, epoch


def add_partitions(broker: EmbeddedBroker, tid: str, pid: int, epoch: int,
                   partitions: dict[str, list[int]],
                   version: int = 3) -> dict[tuple[str, int], ErrorCode]:
    m = request_module(24, version)
    a = call(broker, 24, version, v3_and_below_transactional_id=tid,
             v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
             v3_and_below_topics=tuple(m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                                       for t, ps in partitions.items()))
    return {(t.name, p.partition_index): p.partition_error_code
            for t in a.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(broker: EmbeddedBroker, tid: str, pid: int, epoch: int, commit: bool,
            version: int = 4) -> ErrorCode:
    return call(broker, 26, version, transactional_id=tid, producer_id=pid,  # type: ignore[no-any-return]
                producer_epoch=epoch, committed=commit).error_code


def describe(broker: EmbeddedBroker, tid: str) -> Any:
    (state,) = call(broker, 65, 0, transactional_ids=(tid,)).transaction_states
    return state


def described_state(broker: EmbeddedBroker, tid: str, state: str) -> Any:
    return until(lambda: describe(broker, tid), lambda s: s.transaction_state == state)


def markers(broker: EmbeddedBroker, topic: str, partition: int) -> list[tuple[Any, int, int]]:
    """(marker type, producer id, producer epoch) of the control batches in a partition."""
    m = request_module(1, 12)
    response = request(broker.bootstrap, make(
        m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_epoch=-1, topics=(m.FetchTopic(
            topic=topic, partitions=(m.FetchPartition(
                partition=partition, fetch_offset=0, current_leader_epoch=-1,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id=""))
    ((answer,),) = (t.partitions for t in response.responses)
    found = []
    for batch in decode_batches(answer.records or b""):
        if batch.header.is_control:
            kind, _ = parse_control_record(batch.records[0])
            found.append((kind, batch.header.producer_id, batch.header.producer_epoch))
    return found


def test_find_coordinator_answers_for_transactional_ids(broker: EmbeddedBroker) -> None:
    assert broker.broker is not None
    image = broker.broker.metadata.image
    topic = image.topic("__transaction_state")
    assert topic is not None and topic.internal and len(topic.partitions) == TXN_PARTITIONS
    assert topic.configs["cleanup.policy"] == "compact"
    a = call(broker, 10, 4, key_type=1, coordinator_keys=("tx-1", "tx-2"))
    assert [(c.key, c.error_code, c.port) for c in a.coordinators] == [
        ("tx-1", ErrorCode.none, int(broker.bootstrap.rsplit(":", 1)[1])),
        ("tx-2", ErrorCode.none, int(broker.bootstrap.rsplit(":", 1)[1]))]


def test_each_init_bumps_the_epoch_and_fences_the_previous_producer(
        broker: EmbeddedBroker) -> None:
    pid, epoch = init_ok(broker, "tx-fence")
    assert (pid >= 0, epoch) == (True, 0)
    assert init_ok(broker, "tx-fence") == (pid, 1)
    tp = {TOPIC: [0]}
    # PRODUCER_FENCED from v2 of AddPartitionsToTxn; INVALID_PRODUCER_EPOCH before.
    assert add_partitions(broker, "tx-fence", pid, 0, tp, version=1) == {
        (TOPIC, 0): ErrorCode.invalid_producer_epoch}
    assert add_partitions(broker, "tx-fence", pid, 0, tp, version=2) == {
        (TOPIC, 0): ErrorCode.producer_fenced}
    assert end_txn(broker, "tx-fence", pid, 0, True, version=1) == \
        ErrorCode.invalid_producer_epoch
    assert add_partitions(broker, "tx-fence", pid + 1, 1, tp) == {
        (TOPIC, 0): ErrorCode.invalid_producer_id_mapping}
    # KIP-360: a producer id that is not this id's is fenced (v3: INVALID_PRODUCER_EPOCH).
    assert init(broker, "tx-fence", version=3, producer_id=pid + 1, producer_epoch=0)[0] \
        == ErrorCode.invalid_producer_epoch
    assert init(broker, "tx-fence", version=4, producer_id=pid + 1, producer_epoch=0)[0] \
        == ErrorCode.producer_fenced
    # The current producer recovering from an error gets the next epoch.
    assert init(broker, "tx-fence", producer_id=pid, producer_epoch=1) == (
        ErrorCode.none, pid, 2)


def test_a_committed_transaction_writes_commit_markers(broker: EmbeddedBroker) -> None:
    pid, epoch = init_ok(broker, "tx-commit")
    assert add_partitions(broker, "tx-commit", pid, epoch, {TOPIC: [0, 1], "absent": [0]}) \
        == {(TOPIC, 0): ErrorCode.operation_not_attempted,
            (TOPIC, 1): ErrorCode.operation_not_attempted,
            ("absent", 0): ErrorCode.unknown_topic_or_partition}
    assert add_partitions(broker, "tx-commit", pid, epoch, {TOPIC: [0, 1]}) == {
        (TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.none}
    state = describe(broker, "tx-commit")
    assert (state.error_code, state.transaction_state, state.producer_id) == (
        ErrorCode.none, "Ongoing", pid)
    assert [(t.topic, t.partitions) for t in state.topics] == [(TOPIC, (0, 1))]
    assert end_txn(broker, "tx-commit", pid, epoch, True) == ErrorCode.none
    assert described_state(broker, "tx-commit", "CompleteCommit").topics == ()
    for partition in (0, 1):
        assert markers(broker, TOPIC, partition) == [(ControlRecordType.COMMIT, pid, epoch)]
    # A retry of the EndTxn succeeds; ending without a transaction does not.
    assert end_txn(broker, "tx-commit", pid, epoch, True) == ErrorCode.none
    assert end_txn(broker, "tx-commit", pid, epoch, False) == ErrorCode.invalid_txn_state


def test_add_offsets_adds_the_groups_offsets_partition(broker: EmbeddedBroker) -> None:
    pid, epoch = init_ok(broker, "tx-offsets")
    a = call(broker, 25, 3, transactional_id="tx-offsets", producer_id=pid,
             producer_epoch=epoch, group_id="g-1")
    assert a.error_code == ErrorCode.none
    state = describe(broker, "tx-offsets")
    assert [(t.topic, t.partitions) for t in state.topics] == [
        ("__consumer_offsets", (offsets_partition_for("g-1", OFFSETS_PARTITIONS),))]
    # Not through AddPartitionsToTxn: Kafka authorizes no internal topic there.
    assert add_partitions(broker, "tx-offsets", pid, epoch, {"__consumer_offsets": [0]}) == {
        ("__consumer_offsets", 0): ErrorCode.topic_authorization_failed}
    a = call(broker, 25, 1, transactional_id="tx-offsets", producer_id=pid,
             producer_epoch=epoch + 1, group_id="g-1")
    assert a.error_code == ErrorCode.invalid_producer_epoch


def test_init_aborts_the_ongoing_transaction_of_the_fenced_producer(
        broker: EmbeddedBroker) -> None:
    pid, epoch = init_ok(broker, "tx-zombie")
    add_partitions(broker, "tx-zombie", pid, epoch, {TOPIC: [1]})
    assert init(broker, "tx-zombie")[0] == ErrorCode.concurrent_transactions
    # The abort used a bumped epoch, never handed out; the retry gets the one after.
    assert init_ok(broker, "tx-zombie") == (pid, epoch + 2)
    assert markers(broker, TOPIC, 1) == [(ControlRecordType.ABORT, pid, epoch + 1)]
    assert end_txn(broker, "tx-zombie", pid, epoch, True) == ErrorCode.producer_fenced


def test_a_transaction_past_its_timeout_is_aborted(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    broker = _start(broker_factory, **{
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100})
    pid, epoch = init_ok(broker, "tx-slow", timeout_ms=300)
    add_partitions(broker, "tx-slow", pid, epoch, {TOPIC: [0]})
    state = described_state(broker, "tx-slow", "CompleteAbort")
    assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", epoch + 1)
    assert markers(broker, TOPIC, 0) == [(ControlRecordType.ABORT, pid, epoch + 1)]
    assert end_txn(broker, "tx-slow", pid, epoch, True) == ErrorCode.producer_fenced


def test_the_transaction_completes_once_its_markers_are_replicated(
        broker: EmbeddedBroker) -> None:
    """Markers are written with acks=all: CompleteCommit waits for the in-sync follower."""
    assert broker.broker is not None
    # Registered after startup: __transaction_state stays on this broker alone.
    broker.call(broker.broker.metadata.register_broker(
        BrokerRegistration(node_id=FOLLOWER, host="127.0.0.1", port=1)))
    create_replicated(broker, "tx-replicated")
    pid, epoch = init_ok(broker, "tx-repl")
    add_partitions(broker, "tx-repl", pid, epoch, {"tx-replicated": [0]})
    assert end_txn(broker, "tx-repl", pid, epoch, True) == ErrorCode.none
    time.sleep(0.3)
    assert describe(broker, "tx-repl").transaction_state == "PrepareCommit"
    # A new transaction waits for this one to complete.
    assert add_partitions(broker, "tx-repl", pid, epoch, {TOPIC: [0]}) == {
        (TOPIC, 0): ErrorCode.concurrent_transactions}
    follower_fetch(broker, "tx-replicated", 1)
    assert described_state(broker, "tx-repl", "CompleteCommit").transaction_state == \
        "CompleteCommit"


def test_a_transaction_left_prepared_at_shutdown_is_completed_after_the_load(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    broker = _start(broker_factory, **{
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100})
    assert broker.broker is not None
    broker.call(broker.broker.metadata.register_broker(
        BrokerRegistration(node_id=FOLLOWER, host="127.0.0.1", port=1)))
    create_replicated(broker, "tx-replicated")
    pid, epoch = init_ok(broker, "tx-resume")
    add_partitions(broker, "tx-resume", pid, epoch, {"tx-replicated": [0]})
    assert end_txn(broker, "tx-resume", pid, epoch, False) == ErrorCode.none
    # The follower never fetched: the marker is not committed, the abort not complete.
    broker.restart()
    assert until(lambda: describe(broker, "tx-resume"),
                 lambda s: s.error_code == ErrorCode.none).transaction_state == "PrepareAbort"
    # The new load sends the markers again; once the follower has them, it completes.
    time.sleep(0.3)
    follower_fetch(broker, "tx-replicated", 2)
    assert described_state(broker, "tx-resume", "CompleteAbort").transaction_state == \
        "CompleteAbort"


def test_a_prepared_transaction_gets_its_markers_at_load_not_at_the_next_scan(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    """As Kafka's loadTransactionsForTxnTopicPartition: the markers go out as soon as
    the partition is loaded; the scan interval is far longer than the test."""
    broker = _start(broker_factory, **{
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 600_000})
    assert broker.broker is not None
    broker.call(broker.broker.metadata.register_broker(
        BrokerRegistration(node_id=FOLLOWER, host="127.0.0.1", port=1)))
    create_replicated(broker, "tx-at-load")
    pid, epoch = init_ok(broker, "tx-at-load")
    add_partitions(broker, "tx-at-load", pid, epoch, {"tx-at-load": [0]})
    assert end_txn(broker, "tx-at-load", pid, epoch, True) == ErrorCode.none
    # The marker is not replicated: the broker stops with the commit prepared.
    broker.restart()
    assert until(lambda: describe(broker, "tx-at-load"),
                 lambda s: s.error_code == ErrorCode.none).transaction_state == "PrepareCommit"
    # The load writes the marker again, after the one of the previous run (the
    # follower reads from offset 1 to see it); once the follower has both, the commit
    # completes.
    assert until(lambda: follower_fetch(broker, "tx-at-load", 1).records,
                 bool, seconds=5)
    follower_fetch(broker, "tx-at-load", 2)
    assert described_state(broker, "tx-at-load", "CompleteCommit",
                           ).transaction_state == "CompleteCommit"


def test_markers_skip_a_topic_deleted_during_the_transaction(broker: EmbeddedBroker) -> None:
    create_topic(broker.bootstrap, "tx-doomed")
    pid, epoch = init_ok(broker, "tx-doomed")
    add_partitions(broker, "tx-doomed", pid, epoch, {"tx-doomed": [0], TOPIC: [0]})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["tx-doomed"])["tx-doomed"].result(10)
    assert end_txn(broker, "tx-doomed", pid, epoch, True) == ErrorCode.none
    assert described_state(broker, "tx-doomed", "CompleteCommit").transaction_state == \
        "CompleteCommit"
    assert markers(broker, TOPIC, 0) == [(ControlRecordType.COMMIT, pid, epoch)]


def test_list_transactions_filters(broker: EmbeddedBroker) -> None:
    pid_a, epoch_a = init_ok(broker, "tx-list-a")
    pid_b, _ = init_ok(broker, "tx-list-b")
    add_partitions(broker, "tx-list-a", pid_a, epoch_a, {TOPIC: [0]})

    def listed(version: int = 1, **filters: Any) -> tuple[Any, ...]:
        a = call(broker, 66, version, **{"state_filters": (), "producer_id_filters": (),
                                         **filters})
        assert a.error_code == ErrorCode.none
        return a.unknown_state_filters, sorted(
            (s.transactional_id, s.producer_id, s.transaction_state)
            for s in a.transaction_states)

    assert listed(0) == ((), [("tx-list-a", pid_a, "Ongoing"), ("tx-list-b", pid_b, "Empty")])
    assert listed(state_filters=("Ongoing", "Nonsense")) == (
        ("Nonsense",), [("tx-list-a", pid_a, "Ongoing")])
    assert listed(producer_id_filters=(pid_b,)) == ((), [("tx-list-b", pid_b, "Empty")])
    assert listed(state_filters=("Ongoing",), duration_filter=60_000) == ((), [])


def test_describe_an_unknown_transactional_id(broker: EmbeddedBroker) -> None:
    init_ok(broker, "tx-known")
    # Kafka answers a start time of -1, which kio's reader refuses: read the frame.
    body = make(load_request_schema(65, 0), transactional_ids=("tx-unknown",))
    with connect(broker.bootstrap) as sock:
        sock.sendall(encode_request(body, correlation_id=3))
        frame = recv_frame(sock)
    assert frame is not None
    # correlation id, header tags, throttle, array length, then the first error code
    assert struct.unpack_from(">h", frame, 10) == (ErrorCode.transactional_id_not_found.value,)
    assert b"tx-unknown" in frame


def test_transaction_state_survives_a_restart(broker: EmbeddedBroker) -> None:
    pid, epoch = init_ok(broker, "tx-restart")
    add_partitions(broker, "tx-restart", pid, epoch, {TOPIC: [0]})
    broker.restart()
    state = until(lambda: describe(broker, "tx-restart"),
                  lambda s: s.error_code == ErrorCode.none)
    assert (state.transaction_state, state.producer_id, state.producer_epoch) == (
        "Ongoing", pid, epoch)
    assert end_txn(broker, "tx-restart", pid, epoch, False) == ErrorCode.none
    assert described_state(broker, "tx-restart", "CompleteAbort").transaction_state == \
        "CompleteAbort"
    assert init_ok(broker, "tx-restart") == (pid, epoch + 1)


def add_as_broker(broker: EmbeddedBroker, tid: str, pid: int, epoch: int,
                  partitions: tuple[int, ...], *, verify_only: bool) -> Any:
    """AddPartitionsToTxn v5, as a partition leader sends it (KIP-890)."""
    m = request_module(24, 5)
    return request(broker.bootstrap, m.AddPartitionsToTxnRequest(transactions=(
        m.AddPartitionsToTxnTransaction(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch,
            verify_only=verify_only, topics=(m.AddPartitionsToTxnTopic(
                name=TOPIC, partitions=partitions),)),)))


def batch_errors(answer: Any) -> dict[int, ErrorCode]:
    (transaction,) = answer.results_by_transaction
    return {p.partition_index: p.partition_error_code
            for t in transaction.topic_results for p in t.results_by_partition}


def test_brokers_verify_and_add_partitions_in_a_batch(broker: EmbeddedBroker) -> None:
    pid, epoch = init_ok(broker, "tx-batch")
    answer = add_as_broker(broker, "tx-batch", pid, epoch, (0,), verify_only=True)
    assert answer.error_code == ErrorCode.none
    assert batch_errors(answer) == {0: ErrorCode.transaction_abortable}
    answer = add_as_broker(broker, "tx-batch", pid, epoch, (0,), verify_only=False)
    assert batch_errors(answer) == {0: ErrorCode.none}
    answer = add_as_broker(broker, "tx-batch", pid, epoch, (0, 1), verify_only=True)
    assert batch_errors(answer) == {0: ErrorCode.none, 1: ErrorCode.transaction_abortable}
    assert batch_errors(add_as_broker(broker, "tx-batch", pid, epoch + 1, (0,),
                                      verify_only=True)) == {0: ErrorCode.producer_fenced}
    assert describe(broker, "tx-batch").topics[0].partitions == (0,)


def test_brokers_batch_needs_cluster_action(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    b = broker_factory(plugins=["metadata_kraft", "txn",
                                "tests.integration.test_txn_markers_wire:ClusterActionDenied"])
    create_topic(b.bootstrap, TOPIC)
    answer = add_as_broker(b, "tx-denied", 1, 0, (0,), verify_only=True)
    assert answer.error_code == ErrorCode.cluster_authorization_failed
    assert answer.results_by_transaction == ()


def test_advertised_versions(broker: EmbeddedBroker) -> None:
    response = request(broker.bootstrap, ApiVersionsRequest(
        client_software_name="t", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert versions[22] == (0, 5)
    assert versions[24] == (0, 5)  # 4-5: the brokers' batched form (KIP-890)
    assert versions[25] == (0, 4)
    assert versions[26] == (0, 4)
    assert versions[65] == (0, 0)
    assert versions[66] == (0, 1)
    # No transaction.version is finalised: Kafka's Java client (4.x) then stays on the
    # v1 protocol (explicit AddPartitionsToTxn, EndTxn <= 4, Produce <= 11).
    assert "transaction.version" not in {f.name for f in response.finalized_features}


def _consume(broker: EmbeddedBroker, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            elif len(values) >= expected:
                break
    finally:
        consumer.close()
    return values


def test_confluent_kafka_commits_and_aborts_transactions(broker: EmbeddedBroker) -> None:
    topic = f"txc-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=2)
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": f"tx-{topic}", "error_cb": errors.append})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, key=b"%d" % i, value=b"committed-%d" % i)
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 5)], _group_metadata(broker, "g-txc"))
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, key=b"%d" % i, value=b"aborted-%d" % i)
    producer.flush(30)
    producer.abort_transaction(30)
    assert not errors, errors
    values = _consume(broker, topic, 20)
    assert sorted(values) == sorted(b"committed-%d" % i for i in range(20))
    state = described_state(broker, f"tx-{topic}", "CompleteAbort")
    assert state.transaction_state == "CompleteAbort"
    assert broker.broker is not None
    text = generate_latest(broker.broker.metrics.registry).decode()
    assert "kafkernel_transaction_commits_total 1.0" in text
    assert "kafkernel_transaction_aborts_total 1.0" in text
    assert 'kafkernel_transactions{state="CompleteAbort"} 1.0' in text


def _group_metadata(broker: EmbeddedBroker, group: str) -> Any:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()
