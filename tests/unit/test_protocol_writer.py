"""kernel/protocol/writer.py writes every kio schema byte for byte as kio's own writer,
for entities drawn with every field (nulls, tagged fields, nested arrays included)."""

from __future__ import annotations

import datetime
import io
import uuid
from functools import cache
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17.response import FetchableTopicResponse, FetchResponse, PartitionData
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.types import BrokerId
from kio.serial import entity_writer
from kio.serial.writers import write_unsigned_varlong
from kio.static.primitive import Records, i32, i64

from kernel.protocol.codec import ResponseFrame
from kernel.protocol.writer import compiled_writer, uvarint


@cache
def schema_classes() -> tuple[type, ...]:
    """Every request and response schema kio has, each API key at each version."""
    classes = []
    for api_key, name in sorted(api_key_map.items()):
        for version in sorted(schema_name_map[name]):
            for load in (load_request_schema, load_response_schema):
                try:
                    classes.append(load(api_key, version))
                except UnknownEntity:
                    continue
    return tuple(classes)


def kio_bytes(cls: type, entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    return out.getvalue()


def compiled_bytes(cls: type, entity: Any) -> bytes:
    out = io.BytesIO()
    compiled_writer(cls)(out, entity)
    return out.getvalue()


@pytest.mark.parametrize("cls", schema_classes(), ids=lambda c: f"{c.__module__[12:]}")
def test_every_schema_compiles(cls: type) -> None:
    assert callable(compiled_writer(cls))


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_the_bytes_are_kios(data: st.DataObject) -> None:
    st.register_type_strategy(Records, st.binary(max_size=64))
    cls = data.draw(st.sampled_from(schema_classes()))
    entity = data.draw(st.from_type(cls))
    assert compiled_bytes(cls, entity) == kio_bytes(cls, entity)


@given(st.integers(min_value=0, max_value=2**35))
def test_uvarint_is_kafkas(value: int) -> None:
    out = io.BytesIO()
    write_unsigned_varlong(out, value)
    assert uvarint(value) == out.getvalue()


def test_records_stay_by_reference_in_a_response_frame() -> None:
    """A fetch's records reach the frame as the object the handler gave, uncopied."""
    records = bytes(64 * 1024)
    partition = PartitionData(
        partition_index=i32(0), error_code=ErrorCode.none, high_watermark=i64(1),
        last_stable_offset=i64(1), log_start_offset=i64(0), aborted_transactions=(),
        preferred_read_replica=BrokerId(-1), records=records)
    response = FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=i32(0),
        responses=(FetchableTopicResponse(topic_id=uuid.UUID(int=1),
                                          partitions=(partition,)),),
        node_endpoints=())
    frame = ResponseFrame()
    compiled_writer(FetchResponse)(frame, response)
    assert any(chunk is records for chunk in frame.chunks)
    assert frame.to_bytes() == kio_bytes(FetchResponse, response)
