"""A big request is answered in slices, off the event loop where it can be (issue 30):
its answer is byte for byte the one the same request got in one go.

Each request names more than ``BIG_REQUEST_ENTRIES`` entries, in a frame over
``OFF_LOOP_FRAME_BYTES``, with every kind of entry its handler answers differently
(topics that exist, unknown ones, invalid names, duplicates, unknown ids, offsets
committed or not). It is sent twice to one broker: once as served, once with both
thresholds raised so that nothing is sliced or moved to a thread.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kernel.handlers.delete_topics
import kernel.handlers.describe_configs
import kernel.handlers.metadata
import kernel.network.dispatch
import plugins.coordinator.handlers.offset_fetch
from kernel.protocol.build import make, request_module
from kernel.slices import BIG_REQUEST_ENTRIES
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import api_versions_answered, closed_by_broker, connect, encode_request

SLICED_MODULES = (kernel.handlers.metadata, kernel.handlers.delete_topics,
                  kernel.handlers.describe_configs, plugins.coordinator.handlers.offset_fetch)
TOPICS = [f"big-{i}" for i in range(4)]
GROUP = "big-requests"
N = BIG_REQUEST_ENTRIES + 1_500
PARTITIONS = 20_000  # an OffsetFetch frame over OFF_LOOP_FRAME_BYTES (4 bytes each)
OFF_LOOP_FRAME_BYTES = kernel.network.dispatch.OFF_LOOP_FRAME_BYTES


def _answer(bootstrap: str, body: Any) -> bytes:
    """The answer's bytes after its size and correlation id."""
    frame = encode_request(body, 5)
    assert len(frame) >= OFF_LOOP_FRAME_BYTES
    with connect(bootstrap, timeout=60) as sock:
        sock.sendall(frame)
        head = _exactly(sock, 4)
        return _exactly(sock, int.from_bytes(head, "big"))[4:]


def _exactly(sock: Any, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        assert chunk, "the broker closed the connection"
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _names() -> list[str]:
    """Topics that exist, unknown ones, invalid names and duplicates."""
    names = [f"unknown-topic-{i:06d}" for i in range(N)]
    names[::500] = TOPICS * (len(names[::500]) // len(TOPICS)) + TOPICS[
        :len(names[::500]) % len(TOPICS)]
    return [*names, "bad name!", "x" * 300, TOPICS[0], "unknown-topic-000007"]


def metadata() -> Any:
    m = request_module(3, 12)
    topics = [make(m.MetadataRequestTopic, topic_id=None, name=n) for n in _names()]
    topics += [make(m.MetadataRequestTopic, topic_id=uuid.UUID(int=i + 1), name=None)
               for i in range(3)]
    return make(m.MetadataRequest, topics=tuple(topics), allow_auto_topic_creation=False,
                include_topic_authorized_operations=True)


def delete_topics() -> Any:
    """Nothing that exists (the request is sent twice), every other outcome."""
    m = request_module(20, 6)
    topics = [make(m.DeleteTopicState, name=f"unknown-topic-{i:06d}", topic_id=None)
              for i in range(N)]
    topics += [make(m.DeleteTopicState, name="unknown-topic-000003", topic_id=None),
               make(m.DeleteTopicState, name=None, topic_id=None),
               make(m.DeleteTopicState, name="both", topic_id=uuid.UUID(int=9)),
               make(m.DeleteTopicState, name=None, topic_id=uuid.UUID(int=10))]
    return make(m.DeleteTopicsRequest, topics=tuple(topics),
                timeout=datetime.timedelta(seconds=10))


def describe_configs() -> Any:
    m = request_module(32, 4)
    resources = [make(m.DescribeConfigsResource, resource_type=2, resource_name=n,
                      configuration_keys=("retention.ms", "cleanup.policy") if i % 3 else None)
                 for i, n in enumerate(_names())]
    resources += [make(m.DescribeConfigsResource, resource_type=4, resource_name="",
                       configuration_keys=("log.retention.ms",)),
                  make(m.DescribeConfigsResource, resource_type=4, resource_name="77",
                       configuration_keys=None)]
    return make(m.DescribeConfigsRequest, resources=tuple(resources), include_synonyms=True,
                include_documentation=True)


def offset_fetch_v8() -> Any:
    """Two groups; a topic split over slices, named twice, unknown topics."""
    m = request_module(9, 8)

    def topic(name: str, partitions: range | list[int]) -> Any:
        return make(m.OffsetFetchRequestTopics, name=name, partition_indexes=tuple(partitions))

    topics = (topic(TOPICS[0], range(PARTITIONS)), topic(TOPICS[1], [0, 1, 2, 3]),
              topic("unknown", range(1_200)), topic(TOPICS[0], [2, 1]),
              topic(TOPICS[2], []), topic(TOPICS[1], range(4, 2_600)))
    return make(m.OffsetFetchRequest, require_stable=True, groups=(
        make(m.OffsetFetchRequestGroup, group_id=GROUP, topics=topics),
        make(m.OffsetFetchRequestGroup, group_id="no-such-group", topics=topics[:2])))


def offset_fetch_v7() -> Any:
    m = request_module(9, 7)
    return make(m.OffsetFetchRequest, group_id=GROUP, require_stable=False, topics=(
        make(m.OffsetFetchRequestTopic, name=TOPICS[0], partition_indexes=tuple(range(PARTITIONS))),
        make(m.OffsetFetchRequestTopic, name=TOPICS[1], partition_indexes=(0, 3))))


@pytest.fixture(scope="module")
def served() -> Any:
    with EmbeddedBroker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics(
                [NewTopic(t, 4, 1, config={"retention.ms": "123456"}) for t in TOPICS]).values():
            future.result(30)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                             "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(TOPICS[0], 1, 42),
                                 TopicPartition(TOPICS[1], 3, 7, metadata="m")],
                        asynchronous=False)
        consumer.close()
        yield broker


@pytest.mark.parametrize("build", [metadata, delete_topics, describe_configs,
                                   offset_fetch_v8, offset_fetch_v7])
def test_a_big_request_is_answered_as_in_one_go(served: EmbeddedBroker,
                                                 build: Callable[[], Any],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    body = build()
    sliced = _answer(served.bootstrap, body)
    for module in SLICED_MODULES:
        monkeypatch.setattr(module, "BIG_REQUEST_ENTRIES", 10**9)
    monkeypatch.setattr(kernel.network.dispatch, "OFF_LOOP_FRAME_BYTES", 10**12)
    in_one_go = _answer(served.bootstrap, body)
    assert len(sliced) > 4 * N, "a small answer: the request is not what it should be"
    assert sliced == in_one_go


def test_a_malformed_big_frame_closes_only_its_connection(served: EmbeddedBroker) -> None:
    """A frame decoded in a thread that kio cannot read is refused as on the loop: the
    connection is closed, and every other client is still served."""
    frame = encode_request(metadata(), 6)
    body = bytearray(frame[4:])
    body[-20_000:] = b"\xff" * 20_000  # the last topics' names claim lengths past the end
    with connect(served.bootstrap) as other, connect(served.bootstrap) as sock:
        sock.sendall(len(body).to_bytes(4, "big") + bytes(body))
        assert closed_by_broker(sock)
        assert api_versions_answered(other, 1)
