"""Conformance of the txn plugin's APIs: InitProducerId, each case at every version
Kafkernel advertises, sent to Kafka and to Kafkernel and compared field by field; a
producer id handed out is normalised (each broker hands out its own), its epoch is
compared. A transactional id that passes the checks is not compared: the transaction
coordinator is not served yet.

Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first block of producer ids arrives
from the controller, and clients retry; Kafkernel waits for the block instead. The cases
retry that answer, as clients do."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.reference.conformance import Case, body, cases
from tests.reference.diff import Answers, Pair, Side

INIT_PRODUCER_ID = 22


def init(v: int, *, transactional_id: str | None = None, timeout_ms: int = 60000,
         producer_id: int = -1, producer_epoch: int = -1) -> Any:
    return body(INIT_PRODUCER_ID, v, transactional_id=transactional_id,
                transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                producer_id=producer_id, producer_epoch=producer_epoch)


def send(side: Side, request: Any) -> Any:
    """The answer once the broker has producer ids to hand out."""
    deadline = time.monotonic() + 30
    while True:
        answer = side.send(request)
        if (answer.error_code != ErrorCode.coordinator_load_in_progress
                or time.monotonic() > deadline):
            return answer
        time.sleep(0.1)


def compare(pair: Pair, request: Any) -> Answers:
    answers = pair.each(lambda side: send(side, request))
    pair.assert_same(answers)
    return answers


def init_an_idempotent_producer(pair: Pair, v: int) -> None:
    answers = compare(pair, init(v))
    assert answers.kafka.error_code == ErrorCode.none
    assert answers.kafka.producer_epoch == 0


def init_an_idempotent_producer_again(pair: Pair, v: int) -> None:
    """KIP-360 (v3+) without a transactional id: a new producer id, epoch 0."""
    first = pair.each(lambda side: send(side, init(v)))
    again = pair.each(lambda side: send(side, init(
        v, producer_id=(first.kafka if side is pair.kafka else first.kafkernel).producer_id,
        producer_epoch=0)))
    pair.assert_same(again)
    assert again.kafka.error_code == ErrorCode.none
    assert again.kafkernel.producer_id != first.kafkernel.producer_id


def init_with_a_producer_id_but_no_epoch(pair: Pair, v: int) -> None:
    answers = compare(pair, init(v, producer_id=7, producer_epoch=-1))
    if v >= 3:
        assert answers.kafka.error_code == ErrorCode.invalid_request


def init_with_an_empty_transactional_id(pair: Pair, v: int) -> None:
    answers = compare(pair, init(v, transactional_id=""))
    assert answers.kafka.error_code == ErrorCode.invalid_request


def init_with_an_invalid_transaction_timeout(pair: Pair, v: int) -> None:
    for timeout_ms in (0, -1, 900001):
        answers = compare(pair, init(v, transactional_id="conformance-txn",
                                     timeout_ms=timeout_ms))
        assert answers.kafka.error_code == ErrorCode.invalid_transaction_timeout


CASES: list[tuple[int, Case]] = [
    (INIT_PRODUCER_ID, init_an_idempotent_producer),
    (INIT_PRODUCER_ID, init_an_idempotent_producer_again),
    (INIT_PRODUCER_ID, init_with_a_producer_id_but_no_epoch),
    (INIT_PRODUCER_ID, init_with_an_empty_transactional_id),
    (INIT_PRODUCER_ID, init_with_an_invalid_transaction_timeout),
]


@pytest.mark.parametrize(("api_key", "version", "case"), cases(*CASES))
def test_conformance(shared: Pair, api_key: int, version: int, case: Case) -> None:
    case(shared, version)
