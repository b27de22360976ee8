"""RecentResponses: an answer built from equal values is the entity built before, and it
goes out as the bytes kio's encoding gave, under each request's correlation id."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v1.response import (
    ListOffsetsPartitionResponse as PartitionV1,
)
from kio.schema.list_offsets.v1.response import ListOffsetsResponse as ResponseV1
from kio.schema.list_offsets.v1.response import ListOffsetsTopicResponse as TopicV1
from kio.schema.list_offsets.v9.response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

from kernel.protocol.codec import RecentResponses, encode_response

LIST_OFFSETS = 2


def response(offset: int) -> ListOffsetsResponse:
    return ListOffsetsResponse(
        throttle_time=datetime.timedelta(0),
        topics=(ListOffsetsTopicResponse(name="t", partitions=(ListOffsetsPartitionResponse(
            partition_index=0, error_code=ErrorCode.none, timestamp=-1, offset=offset,
            leader_epoch=3),)),))


def as_bytes(frame: bytes | object) -> bytes:
    return frame if isinstance(frame, bytes) else frame.to_bytes()  # type: ignore[attr-defined]


def test_equal_values_give_the_entity_built_before() -> None:
    recent = RecentResponses()
    built: list[int] = []

    def build(offset: int) -> ListOffsetsResponse:
        built.append(offset)
        return response(offset)

    first = recent.built(LIST_OFFSETS, 9, ("t", 10), lambda: build(10))
    assert recent.built(LIST_OFFSETS, 9, ("t", 10), lambda: build(10)) is first
    assert recent.built(LIST_OFFSETS, 9, ("t", 11), lambda: build(11)).topics[0] \
        .partitions[0].offset == 11
    # The same values for another version (or API) are another response.
    assert recent.built(LIST_OFFSETS, 8, ("t", 10), lambda: build(10)) is not first
    assert built == [10, 11, 10]
    assert len(recent) == 3


@pytest.mark.parametrize("correlation_id", [0, 7, 2**31 - 1, -1])
def test_a_built_answer_goes_out_as_kio_encodes_it(correlation_id: int) -> None:
    recent = RecentResponses()
    body = recent.built(LIST_OFFSETS, 9, ("t", 5), lambda: response(5))
    expected = encode_response(LIST_OFFSETS, 9, correlation_id, body)
    # The first time encoded, every time after from those bytes.
    for _ in range(3):
        assert as_bytes(recent.encode(LIST_OFFSETS, 9, correlation_id, body)) == expected
    # Under another correlation id, only the correlation id differs.
    other = as_bytes(recent.encode(LIST_OFFSETS, 9, correlation_id ^ 1, body))
    assert other == encode_response(LIST_OFFSETS, 9, correlation_id ^ 1, body)


def test_an_answer_not_built_here_is_encoded_every_time() -> None:
    recent = RecentResponses()
    body = response(5)
    for correlation_id in (1, 2):
        assert as_bytes(recent.encode(LIST_OFFSETS, 9, correlation_id, body)) == \
            encode_response(LIST_OFFSETS, 9, correlation_id, body)
    # A version without the flexible header.
    old = ResponseV1(topics=(TopicV1(name="t", partitions=(PartitionV1(
        partition_index=0, error_code=ErrorCode.none, timestamp=-1, offset=5),)),))
    kept = recent.built(LIST_OFFSETS, 1, ("t", 5), lambda: old)
    for correlation_id in (1, 2):
        assert as_bytes(recent.encode(LIST_OFFSETS, 1, correlation_id, kept)) == \
            encode_response(LIST_OFFSETS, 1, correlation_id, old)
    assert len(recent) == 1


def test_the_oldest_goes_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RecentResponses, "MAX_ENTRIES", 2)
    recent = RecentResponses()
    first, second, third = (recent.built(LIST_OFFSETS, 9, n, lambda n=n: response(n))
                            for n in range(3))
    assert recent.built(LIST_OFFSETS, 9, 2, lambda: response(2)) is third
    assert recent.built(LIST_OFFSETS, 9, 1, lambda: response(1)) is second
    assert len(recent) == 2
    # The evicted entity still encodes right, now as any other entity.
    assert as_bytes(recent.encode(LIST_OFFSETS, 9, 4, first)) == \
        encode_response(LIST_OFFSETS, 9, 4, first)
    assert recent.built(LIST_OFFSETS, 9, 0, lambda: response(0)) is not first


def test_two_brokers_keep_their_own() -> None:
    one, two = RecentResponses(), RecentResponses()
    body = one.built(LIST_OFFSETS, 9, "v", lambda: response(1))
    assert two.built(LIST_OFFSETS, 9, "v", lambda: response(2)) is not body
