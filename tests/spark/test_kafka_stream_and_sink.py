"""Structured Streaming through Spark's Kafka source (``spark.readStream``), and Spark's
Kafka sink (``df.write.format("kafka")``) writing into Kafkernel."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient, NewPartitions

from kernel.testing.embedded import EmbeddedBroker
from tests.spark.kafka import consume_all, create_topic, expected, produce, rows

PARTITIONS = 3


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def test_stream_in_micro_batches_follows_new_records_and_new_partitions(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str, tmp_path: Any) -> None:
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    sent = produce(kafkernel.bootstrap, topic_name, 40, PARTITIONS)
    table = topic_name.replace("-", "_")
    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", kafkernel.bootstrap)
              .option("subscribe", topic_name).option("startingOffsets", "earliest")
              .option("includeHeaders", "true").option("maxOffsetsPerTrigger", "15")
              .load())
    query = (stream.writeStream.format("memory").queryName(table)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        def received() -> list[Any]:
            return rows(spark.sql(f"select * from {table}"))

        wait_for(lambda: len(received()) >= len(sent), "the first 40 records")

        def batches() -> list[int]:
            return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

        # a micro-batch's progress is recorded after its rows reach the sink
        wait_for(lambda: sum(batches()) >= len(sent), "the micro-batches' progress")
        assert len(batches()) >= 3 and max(batches()) <= 15, batches()

        # Records produced while the query runs, then to a partition added meanwhile.
        sent += produce(kafkernel.bootstrap, topic_name, 10, PARTITIONS, first=40)
        wait_for(lambda: len(received()) >= len(sent), "the records produced later")
        admin = AdminClient({"bootstrap.servers": kafkernel.bootstrap})
        admin.create_partitions([NewPartitions(topic_name, PARTITIONS + 1)])[topic_name] \
            .result(30)
        sent += produce(kafkernel.bootstrap, topic_name, 8, PARTITIONS + 1, first=50)
        assert {s.partition for s in sent[-8:]} == {0, 1, 2, 3}
        wait_for(lambda: len(received()) >= len(sent), "the records of the new partition")
        assert received() == expected(topic_name, sent)
        assert query.exception() is None
    finally:
        query.stop()


def test_batch_write_is_read_back_by_a_kafka_consumer(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str) -> None:
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    data = [(f"k{i}", f"v{i}", i % PARTITIONS, [("h", f"{i}".encode())]) for i in range(30)]
    df = spark.createDataFrame(
        data, "key string, value string, partition int, "
              "headers array<struct<key:string, value:binary>>")
    (df.write.format("kafka").option("kafka.bootstrap.servers", kafkernel.bootstrap)
     .option("topic", topic_name).save())
    got = consume_all(kafkernel.bootstrap, topic_name, len(data))
    assert sorted((m.key().decode(), m.value().decode(), m.partition(), m.headers())
                  for m in got) == sorted((k, v, p, h) for k, v, p, h in data)


def test_stream_write_copies_a_topic_into_another(
        spark: Any, kafkernel: EmbeddedBroker, topic_name: str, tmp_path: Any) -> None:
    """Kafka to Kafka: the source's rows written by the streaming sink (topic column)."""
    target = topic_name + "-copy"
    create_topic(kafkernel.bootstrap, topic_name, PARTITIONS)
    create_topic(kafkernel.bootstrap, target, PARTITIONS)
    sent = produce(kafkernel.bootstrap, topic_name, 20, PARTITIONS)
    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", kafkernel.bootstrap)
              .option("subscribe", topic_name).option("startingOffsets", "earliest")
              .option("includeHeaders", "true").load())
    query = (source.selectExpr("key", "value", "headers", "partition",
                               f"'{target}' AS topic")
             .writeStream.format("kafka")
             .option("kafka.bootstrap.servers", kafkernel.bootstrap)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    got = consume_all(kafkernel.bootstrap, target, len(sent))
    assert sorted((m.value(), m.key(), m.partition()) for m in got) == \
        sorted((s.value, s.key, s.partition) for s in sent)
