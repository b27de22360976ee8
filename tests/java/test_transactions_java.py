"""Kafka's Java client's transactional producer (tests/java/KafkaClientCheck.java
``transactions``) against Apache Kafka (which proves the test) and against Kafkernel: a
commit with a consumer group's offsets and an abort across two partitions, what
read_committed and read_uncommitted consumers read, the group's committed offset, and a
second producer with the same transactional.id fencing the first."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.java.conftest import lines
from tests.java.test_java_client import run_check


def test_java_transactional_producer_commits_aborts_and_is_fenced(
        transactional_bootstrap: str, client_check: Path) -> None:
    bootstrap = transactional_bootstrap
    tag = uuid.uuid4().hex[:8]
    out = run_check(client_check, "transactions", bootstrap, f"javatx-{tag}",
                    f"javatx-id-{tag}", f"javatx-group-{tag}")
    committed = sorted(f"committed-{i}" for i in range(4))
    read = lines(out, "read")
    assert sorted(r["value"] for r in read if r["isolation"] == "read_committed") == committed
    # read_uncommitted reads the aborted records too, and never a control record.
    assert sorted(r["value"] for r in read if r["isolation"] == "read_uncommitted") == sorted(
        [*committed, "aborted-0", "aborted-1"])
    assert lines(out, "group-offset") == [{"partition": "0", "offset": "2"}]
    # Kafka 4.3 finalises transaction.version 2, so the client adds the partition with
    # its Produce and the leader answers INVALID_PRODUCER_EPOCH; Kafkernel finalises no
    # transaction.version, so the client's AddPartitionsToTxn gets PRODUCER_FENCED.
    (fenced,) = lines(out, "fenced")
    assert fenced["exception"] in ("InvalidProducerEpochException", "ProducerFencedException")
