"""A client repeating the same request byte for byte (the correlation id aside) gets
answers from the broker's state at each time: the dispatcher reuses the decoded request
(kernel.protocol.codec.RecentRequests), never an answer."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from kernel.testing.embedded import EmbeddedBroker


def test_repeated_list_offsets_follow_the_high_watermark(broker: EmbeddedBroker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "repeats"})
    tp = TopicPartition("repeats", 0)
    try:
        producer.produce("repeats", b"first", partition=0)
        assert producer.flush(10) == 0
        for produced in range(1, 31):
            # librdkafka's ListOffsets of the earliest and of the latest offset: the
            # same two frames every time round.
            assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (
                0, produced)
            producer.produce("repeats", b"more", partition=0)
            assert producer.flush(10) == 0
        # 60 ListOffsets, and a few other requests, were kept as a few entries.
        assert broker.broker is not None
        assert 0 < len(broker.broker.dispatcher.recent_requests) < 10
    finally:
        consumer.close()
