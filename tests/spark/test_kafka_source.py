"""Batch reads through Spark's Kafka source (``spark.read.format("kafka")``) against
Kafkernel, with the options Spark users know."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kernel.testing.embedded import EmbeddedBroker
from tests.spark.kafka import BASE_TS_MS, create_topic, expected, produce, rows

PARTITIONS = 3


def read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("includeHeaders", "true"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_returns_every_record_in_spark_kafka_schema(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str) -> None:
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    sent = produce(kafkernel.bootstrap, topic_name, 60, PARTITIONS)
    df = read(spark, kafkernel.bootstrap, subscribe=topic_name)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    assert rows(df) == expected(topic_name, sent)


def test_subscribe_pattern_assign_and_json_offsets(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str) -> None:
    other = topic_name + "-b"
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    create_topic(kafkernel.bootstrap, other, 1)
    sent = produce(kafkernel.bootstrap, topic_name, 30, PARTITIONS)
    sent_other = produce(kafkernel.bootstrap, other, 5, 1)

    by_pattern = read(spark, kafkernel.bootstrap, subscribePattern=f"{topic_name}.*")
    assert rows(by_pattern) == sorted(expected(topic_name, sent) + expected(other, sent_other),
                                      key=lambda t: (t[2], t[3], t[4]))

    # Partitions 0 and 2 only, 0 from offset 2 to 5 (exclusive), 2 from earliest (-2) to
    # latest (-1).
    df = read(spark, kafkernel.bootstrap,
              assign=json.dumps({topic_name: [0, 2]}),
              startingOffsets=json.dumps({topic_name: {"0": 2, "2": -2}}),
              endingOffsets=json.dumps({topic_name: {"0": 5, "2": -1}}))
    want = [s for s in sent if (s.partition == 0 and 2 <= s.offset < 5) or s.partition == 2]
    assert rows(df) == expected(topic_name, want)

    # earliest .. latest spelled out, on subscribe.
    df = read(spark, kafkernel.bootstrap, subscribe=topic_name, startingOffsets="earliest",
              endingOffsets="latest")
    assert rows(df) == expected(topic_name, sent)


def test_starting_and_ending_timestamp(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str) -> None:
    """Offsets by timestamp: Spark asks ListOffsets with the timestamp per partition."""
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    sent = produce(kafkernel.bootstrap, topic_name, 30, PARTITIONS)
    start, end = BASE_TS_MS + 10_000, BASE_TS_MS + 20_000
    df = read(spark, kafkernel.bootstrap, subscribe=topic_name,
              startingTimestamp=str(start), endingTimestamp=str(end))
    assert rows(df) == expected(topic_name, [s for s in sent if start <= s.timestamp_ms < end])

    per_partition = read(spark, kafkernel.bootstrap, subscribe=topic_name,
                         startingOffsetsByTimestamp=json.dumps(
                             {topic_name: {"0": start, "1": end, "2": BASE_TS_MS}}))
    assert rows(per_partition) == expected(topic_name, [
        s for s in sent
        if s.timestamp_ms >= {0: start, 1: end, 2: BASE_TS_MS}[s.partition]])


def test_latest_is_refused_as_a_batch_start(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str) -> None:
    create_topic(kafkernel.bootstrap, topic_name, 1)
    with pytest.raises(Exception, match="latest"):
        read(spark, kafkernel.bootstrap, subscribe=topic_name,
             startingOffsets="latest").collect()


def test_read_committed_leaves_out_an_aborted_transaction(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str) -> None:
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    producer = Producer({"bootstrap.servers": kafkernel.bootstrap,
                         "transactional.id": "spark-" + topic_name})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(9):
            producer.produce(topic_name, value=f"{outcome}-{i}".encode(),
                             partition=i % PARTITIONS)
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    def values(isolation: str) -> list[bytes]:
        df = read(spark, kafkernel.bootstrap, subscribe=topic_name,
                  **{"kafka.isolation.level": isolation})
        return sorted(bytes(r["value"]) for r in df.select("value").collect())

    committed = sorted(f"commit-{i}".encode() for i in range(9)) * 2
    assert values("read_committed") == sorted(committed)
    aborted = [f"abort-{i}".encode() for i in range(9)]
    assert values("read_uncommitted") == sorted(committed + aborted)


def test_offsets_deleted_before_the_read_fail_it_unless_data_loss_is_allowed(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str) -> None:
    create_topic(kafkernel.bootstrap, topic_name, 1)
    sent = produce(kafkernel.bootstrap, topic_name, 10, 1)
    admin = AdminClient({"bootstrap.servers": kafkernel.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic_name, 0, 4)])
    next(iter(deleted.values())).result(30)
    from_zero = {"subscribe": topic_name,
                 "startingOffsets": json.dumps({topic_name: {"0": 0}})}
    with pytest.raises(Exception, match=r"(?i)data loss|out of range|lost"):
        read(spark, kafkernel.bootstrap, **from_zero).collect()
    df = read(spark, kafkernel.bootstrap, failOnDataLoss="false", **from_zero)
    assert rows(df) == expected(topic_name, [s for s in sent if s.offset >= 4])
