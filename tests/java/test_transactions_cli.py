"""kafka-transactions.sh (Kafka 4.3's TransactionsCommand, kafka-tools jar) against Apache
Kafka (which proves the test) and against Kafkernel: ``list``, ``describe
--transactional-id`` and ``describe-producers`` while a confluent-kafka transaction is
open, and ``describe`` again once it committed."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from reference import tools

TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"  # kafka-transactions
def rows(output: str, first_column: str) -> list[dict[str, str]]:
    """The rows of a kafka-transactions table: a header line starting with
    ``first_column``, then tab-separated rows of as many cells."""
    found: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("\t")] if "\t" in line else line.split()
        if cells and cells[0] == first_column:
            header = cells
        elif header and len(cells) == len(header):
            found.append(dict(zip(header, cells, strict=True)))
    return found


def transactions(bootstrap: str, *args: str) -> str:
    result = tools.run(TRANSACTIONS_COMMAND, "--bootstrap-server", bootstrap, *args)
    assert result.returncode == 0, result.describe()
    return result.stdout


def test_list_describe_and_describe_producers_of_an_open_then_committed_transaction(
        transactional_bootstrap: str) -> None:
    bootstrap = transactional_bootstrap
    topic, txn_id = f"txcli-{uuid.uuid4().hex[:8]}", f"txcli-id-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"v%d" % i)
    producer.flush(30)

    listed = {r["TransactionalId"]: r for r in rows(transactions(bootstrap, "list"),
                                                    "TransactionalId")}
    assert listed[txn_id]["TransactionState"] == "Ongoing"
    producer_id = listed[txn_id]["ProducerId"]

    (ongoing,) = rows(transactions(bootstrap, "describe", "--transactional-id", txn_id),
                      "CoordinatorId")
    assert ongoing["TransactionalId"] == txn_id
    assert ongoing["ProducerId"] == producer_id
    assert ongoing["ProducerEpoch"] == "0"
    assert ongoing["TransactionState"] == "Ongoing"
    assert ongoing["TopicPartitions"] == f"{topic}-0"

    (state,) = rows(transactions(bootstrap, "describe-producers", "--topic", topic,
                                 "--partition", "0"), "ProducerId")
    assert state["ProducerId"] == producer_id
    assert state["LastSequence"] == "2"
    assert state["CurrentTransactionStartOffset"] == "0"

    producer.commit_transaction(30)
    (committed,) = rows(transactions(bootstrap, "describe", "--transactional-id", txn_id),
                        "CoordinatorId")
    assert committed["TransactionState"] == "CompleteCommit"
    assert committed["TopicPartitions"] == ""
