"""Metadata by topic id (v10+ ids, v12 requests by id) and the auto-create switch."""

from __future__ import annotations

import uuid

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import connect, decode_response, encode_request, recv_frame


def metadata(bootstrap: str, topics: tuple[MetadataRequestTopic, ...], auto: bool) -> object:
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(MetadataRequest(
            topics=topics, allow_auto_topic_creation=auto,
            include_topic_authorized_operations=False)))
        frame = recv_frame(sock)
        assert frame is not None
        return decode_response(frame, 3, 12)[1]


def test_topics_by_id_and_unknown_ids(broker: EmbeddedBroker) -> None:
    created = metadata(broker.bootstrap, (MetadataRequestTopic(topic_id=None, name="byid"),),
                       auto=True)
    topic = created.topics[0]  # type: ignore[attr-defined]
    assert topic.error_code.name == "none" and topic.topic_id != uuid.UUID(int=0)
    unknown = uuid.uuid4()
    body = metadata(broker.bootstrap, (
        MetadataRequestTopic(topic_id=topic.topic_id, name=None),
        MetadataRequestTopic(topic_id=unknown, name=None),
    ), auto=False)
    by_error = {t.error_code.name: t for t in body.topics}  # type: ignore[attr-defined]
    assert by_error["none"].name == "byid"
    assert by_error["unknown_topic_id"].topic_id == unknown
    assert by_error["unknown_topic_id"].name is None


def test_allow_auto_topic_creation_false_is_honoured(broker: EmbeddedBroker) -> None:
    body = metadata(broker.bootstrap, (MetadataRequestTopic(topic_id=None, name="nope"),),
                    auto=False)
    assert body.topics[0].error_code.name == "unknown_topic_or_partition"  # type: ignore[attr-defined]
    body = metadata(broker.bootstrap, (MetadataRequestTopic(topic_id=None, name="bad name"),),
                    auto=True)
    assert body.topics[0].error_code.name == "invalid_topic_exception"  # type: ignore[attr-defined]
