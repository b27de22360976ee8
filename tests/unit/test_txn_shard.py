"""The transaction coordinator's shard without I/O: Kafka's state machine, fencing, epoch
exhaustion, timeouts, expiry, and a replay of its own records rebuilding the same state;
plus the ``__transaction_state`` record format and partitioning."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from kernel.coordination import TransactionResult
from plugins.txn.metadata import TxnState
from plugins.txn.records import (
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from plugins.txn.shard import (
    NEED_PRODUCER_ID,
    EndResult,
    InitResult,
    MarkerJob,
    TxnResult,
    TxnShard,
)

TID = "tx-a"
COMMIT, ABORT = TransactionResult.COMMIT, TransactionResult.ABORT


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def shard(clock: Clock) -> TxnShard:
    return TxnShard(clock=clock)


def init(shard: TxnShard, tid: str = TID, *, timeout_ms: int = 60_000,
         expected: tuple[int, int] | None = None, new_id: int = 100) -> InitResult:
    result = shard.init_producer_id(tid, timeout_ms, expected, None)
    if result.response is NEED_PRODUCER_ID:
        result = shard.init_producer_id(tid, timeout_ms, expected, new_id)
    assert isinstance(result.response, InitResult)
    return result.response


def replayed(shard: TxnShard, *results: TxnResult) -> TxnShard:
    """A fresh shard that replayed the records of ``results``."""
    fresh = TxnShard(clock=shard._clock)
    offset = 0
    for result in results:
        for key, value in result.records:
            fresh.replay(offset, -1, -1, key, value)
            offset += 1
    return fresh


def test_a_new_transactional_id_gets_a_fresh_producer_id_and_epoch_0(shard: TxnShard) -> None:
    first = shard.init_producer_id(TID, 60_000, None, None)
    assert first.response is NEED_PRODUCER_ID and first.records == ()
    result = shard.init_producer_id(TID, 60_000, None, 100)
    assert result.response == InitResult(ErrorCode.none, 100, 0)
    assert len(result.records) == 1
    txn = replayed(shard, result).get(TID)
    assert txn is not None
    assert (txn.producer_id, txn.producer_epoch, txn.state) == (100, 0, TxnState.EMPTY)


def test_each_init_bumps_the_epoch_and_fences_the_previous_instance(shard: TxnShard) -> None:
    assert init(shard) == InitResult(ErrorCode.none, 100, 0)
    assert init(shard) == InitResult(ErrorCode.none, 100, 1)
    # The first instance's epoch 0 is now fenced everywhere.
    assert shard.add_partitions(TID, 100, 0, [("t", 0)]).response == ErrorCode.producer_fenced
    end = shard.end_transaction(TID, 100, 0, COMMIT).response
    assert end == EndResult(ErrorCode.producer_fenced)
    assert shard.add_partitions(TID, 101, 1, [("t", 0)]).response == \
        ErrorCode.invalid_producer_id_mapping


def test_a_transaction_commits_through_prepare_and_complete(shard: TxnShard,
                                                           clock: Clock) -> None:
    results = [shard.init_producer_id(TID, 60_000, None, 100)]
    results.append(shard.add_partitions(TID, 100, 0, [("t", 0), ("t", 1)]))
    assert results[-1].response == ErrorCode.none
    # Adding partitions already in the transaction writes nothing.
    again = shard.add_partitions(TID, 100, 0, [("t", 1)])
    assert (again.response, again.records) == (ErrorCode.none, ())
    txn = shard.get(TID)
    assert txn is not None and txn.state is TxnState.ONGOING and txn.start_ms == clock.now
    results.append(shard.end_transaction(TID, 100, 0, COMMIT))
    end = results[-1].response
    assert end.error == ErrorCode.none and end.markers is not None
    assert (end.markers.result, end.markers.partitions) == (COMMIT, (("t", 0), ("t", 1)))
    assert txn.state is TxnState.PREPARE_COMMIT
    # While the markers are written: a retry is CONCURRENT_TRANSACTIONS, so is a new init.
    assert shard.end_transaction(TID, 100, 0, COMMIT).response == \
        EndResult(ErrorCode.concurrent_transactions)
    assert shard.end_transaction(TID, 100, 0, ABORT).response == \
        EndResult(ErrorCode.invalid_txn_state)
    assert init(shard).error == ErrorCode.concurrent_transactions
    assert shard.add_partitions(TID, 100, 0, [("t", 2)]).response == \
        ErrorCode.concurrent_transactions
    # A replay of the log so far (a new leader) finds it prepared, with its partitions.
    prepared = replayed(shard, *results).prepared_transactions().response
    assert prepared == [end.markers]
    results.append(shard.complete_transaction(end.markers))
    assert results[-1].response is True
    assert (txn.state, txn.partitions) == (TxnState.COMPLETE_COMMIT, set())
    # A retried EndTxn of the finished transaction succeeds; the opposite one does not.
    assert shard.end_transaction(TID, 100, 0, COMMIT).response == EndResult(ErrorCode.none)
    assert shard.end_transaction(TID, 100, 0, ABORT).response == \
        EndResult(ErrorCode.invalid_txn_state)
    again_replayed = replayed(shard, *results).get(TID)
    assert again_replayed is not None and again_replayed.state is TxnState.COMPLETE_COMMIT
    # The next transaction starts from CompleteCommit.
    assert shard.add_partitions(TID, 100, 0, [("t", 3)]).response == ErrorCode.none
    assert txn.partitions == {("t", 3)}


def test_end_without_a_transaction_is_an_invalid_state(shard: TxnShard) -> None:
    init(shard)
    assert shard.end_transaction(TID, 100, 0, COMMIT).response == \
        EndResult(ErrorCode.invalid_txn_state)
    assert shard.end_transaction("other", 100, 0, COMMIT).response == \
        EndResult(ErrorCode.invalid_producer_id_mapping)


def test_init_during_an_ongoing_transaction_aborts_it_with_a_fencing_epoch(
        shard: TxnShard) -> None:
    init(shard)
    shard.add_partitions(TID, 100, 0, [("t", 0)])
    result = shard.init_producer_id(TID, 60_000, None, None)
    answer = result.response
    assert answer.error == ErrorCode.concurrent_transactions
    assert answer.markers is not None
    assert (answer.markers.producer_epoch, answer.markers.result) == (1, ABORT)
    txn = shard.get(TID)
    assert txn is not None and txn.state is TxnState.PREPARE_ABORT
    # The old instance is fenced at once.
    assert shard.end_transaction(TID, 100, 0, COMMIT).response == \
        EndResult(ErrorCode.producer_fenced)
    shard.complete_transaction(answer.markers)
    # The retry gets the epoch after the fencing one.
    assert init(shard) == InitResult(ErrorCode.none, 100, 2)


def test_kip_360_a_producer_with_its_current_epoch_gets_the_next(shard: TxnShard) -> None:
    init(shard)
    assert init(shard, expected=(100, 0)) == InitResult(ErrorCode.none, 100, 1)
    # A retry whose answer was lost gets the same epoch again.
    assert init(shard, expected=(100, 0)) == InitResult(ErrorCode.none, 100, 1)
    # Another producer id is fenced; so is an epoch neither current nor last.
    assert init(shard, expected=(555, 0)).error == ErrorCode.producer_fenced
    init(shard)  # epoch 2, last epoch forgotten
    assert init(shard, expected=(100, 0)).error == ErrorCode.producer_fenced


def test_an_exhausted_epoch_rotates_to_a_new_producer_id(shard: TxnShard) -> None:
    init(shard)
    txn = shard.get(TID)
    assert txn is not None
    txn.producer_epoch = 32766
    assert shard.init_producer_id(TID, 60_000, None, None).response is NEED_PRODUCER_ID
    assert init(shard, new_id=200) == InitResult(ErrorCode.none, 200, 0)
    assert txn.previous_producer_id == 100


def test_a_load_hands_over_the_markers_of_prepared_transactions(shard: TxnShard) -> None:
    """Only PrepareCommit/PrepareAbort transactions, and only once every record is
    replayed (Kafka's sendPendingTxnMarkers at load)."""
    results = []
    for tid, pid, commit in (("tx-p", 100, True), ("tx-o", 101, None), ("tx-e", 102, None)):
        results.append(shard.init_producer_id(tid, 60_000, None, pid))
        if tid != "tx-e":
            results.append(shard.add_partitions(tid, pid, 0, [("t", 1), ("t", 0)]))
        if commit:
            results.append(shard.end_transaction(tid, pid, 0, COMMIT))
    handed: list[list[MarkerJob]] = []
    loaded = TxnShard(clock=shard._clock, on_loaded=handed.append)
    offset = 0
    for result in results:
        for key, value in result.records:
            loaded.replay(offset, -1, -1, key, value)
            offset += 1
    assert handed == []
    assert loaded.on_loaded() == TxnResult()
    assert handed == [[MarkerJob("tx-p", 100, 0, COMMIT, (("t", 0), ("t", 1)))]]


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(shard: TxnShard,
                                                                   clock: Clock) -> None:
    init(shard, timeout_ms=1_000)
    init(shard, "other", timeout_ms=60_000, new_id=101)
    shard.add_partitions(TID, 100, 0, [("t", 0)])
    shard.add_partitions("other", 101, 0, [("t", 1)])
    clock.now += 1_000
    assert shard.abort_timed_out().response == []
    clock.now += 1
    result = shard.abort_timed_out()
    (job,) = result.response
    assert (job.transactional_id, job.producer_epoch, job.result) == (TID, 1, ABORT)
    assert len(result.records) == 1
    assert shard.end_transaction(TID, 100, 0, COMMIT).response == \
        EndResult(ErrorCode.producer_fenced)
    other = shard.get("other")
    assert other is not None and other.state is TxnState.ONGOING


def test_idle_transactional_ids_expire(shard: TxnShard, clock: Clock) -> None:
    init(shard)
    init(shard, "busy", new_id=101)
    shard.add_partitions("busy", 101, 0, [("t", 0)])
    clock.now += 10_000
    result = shard.remove_expired(10_000)
    assert result.response == 1
    assert result.records == ((encode_key(TID), None),)
    assert shard.get(TID) is None and shard.get("busy") is not None
    # A tombstone removes it at replay too.
    fresh = replayed(shard, TxnResult(records=((encode_key("x"), encode_value(
        TransactionLogValue(1, 0, 1000, 0, (), 0, -1))),)), result)
    assert fresh.get("x") is not None
    assert replayed(shard, TxnResult(records=((encode_key("x"), None),))).get("x") is None


def test_list_transactions_filters_as_kafka(shard: TxnShard, clock: Clock) -> None:
    init(shard)
    init(shard, "b", new_id=101)
    shard.add_partitions("b", 101, 0, [("t", 0)])
    clock.now += 5_000
    names = lambda txns: sorted(t.transactional_id for t in txns)  # noqa: E731
    assert names(shard.list_transactions(None, frozenset(), -1)) == ["b", TID]
    assert names(shard.list_transactions(frozenset({TxnState.ONGOING}), frozenset(), -1)) \
        == ["b"]
    assert names(shard.list_transactions(None, frozenset({100}), -1)) == [TID]
    assert names(shard.list_transactions(frozenset(), frozenset(), -1)) == []
    # Kafka compares with the start time, which is -1 for an id without a transaction:
    # such an id passes any duration filter.
    assert names(shard.list_transactions(None, frozenset(), 4_999)) == ["b", TID]
    assert names(shard.list_transactions(None, frozenset(), 5_000)) == [TID]


def test_records_are_kafkas_transaction_log_format() -> None:
    key = encode_key("tx")
    assert key == b"\x00\x00\x00\x02tx" and decode_key(key) == "tx"
    value = TransactionLogValue(7, 3, 60_000, int(TxnState.ONGOING),
                                (("a", 0), ("a", 2), ("b", 1)), 1234, 1000)
    data = encode_value(value)
    assert data[:2] == b"\x00\x00"
    assert struct.unpack_from(">qhib", data, 2) == (7, 3, 60_000, 1)
    assert decode_value(data) == value
    # Empty writes a null partition list, as Kafka does.
    empty = encode_value(TransactionLogValue(7, 3, 60_000, 0, (), 1234, -1))
    assert struct.unpack_from(">i", empty, 17) == (-1,)


@pytest.mark.parametrize(("transactional_id", "partitions", "expected"), [
    # abs(String.hashCode) % partitions, as Kafka's TransactionStateManager.partitionFor;
    # the hash codes are Java's (jshell).
    ("my-txn", 50, 1061187895 % 50),
    ("transactional-id-\u00e9", 7, 1051134075 % 7),
    ("polygenelubricants", 50, 0),  # Integer.MIN_VALUE: Utils.abs gives 0
    ("", 50, 0),
])
def test_partition_for_is_kafkas(transactional_id: str, partitions: int,
                                 expected: int) -> None:
    assert partition_for(transactional_id, partitions) == expected
