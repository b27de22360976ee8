"""A client repeating the same request byte for byte (the correlation id aside) gets
answers from the broker's state at each time. The dispatcher reuses the decoded request
(kernel.protocol.codec.RecentRequests), and ListOffsets reuses the answer it built
before only for equal offsets, epochs and errors (RecentResponses)."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kernel.testing.embedded import EmbeddedBroker


def test_repeated_list_offsets_follow_the_log(broker: EmbeddedBroker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "repeats"})
    tp = TopicPartition("repeats", 0)
    try:
        producer.produce("repeats", b"first", partition=0)
        assert producer.flush(10) == 0
        for produced in range(1, 31):
            # librdkafka's ListOffsets of the earliest and of the latest offset: the
            # same two frames every time round, and twice between two produces.
            for _ in range(2):
                assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (
                    0, produced)
            producer.produce("repeats", b"more", partition=0)
            assert producer.flush(10) == 0
        # The log start moves: the earliest offset follows it.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        deleted = admin.delete_records([TopicPartition("repeats", 0, 5)])
        assert deleted[TopicPartition("repeats", 0, 5)].result(10).low_watermark == 5
        for _ in range(2):
            assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (5, 31)
        # 122 ListOffsets, and a few other requests, were kept as a few entries; the
        # answers as one per distinct (earliest, latest) pair.
        assert broker.broker is not None
        dispatcher = broker.broker.dispatcher
        assert 0 < len(dispatcher.recent_requests) < 10
        assert 30 <= len(dispatcher.recent_responses) <= 33
    finally:
        consumer.close()
