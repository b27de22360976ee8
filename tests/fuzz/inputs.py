"""What the fuzzer sends: requests of every served API key and version drawn field by
field from kio's schemas (nulls included), the same frames mutated byte by byte,
produce requests carrying record batches of every codec (valid, and damaged behind a
CRC that still matches), and what a SASL or TLS client sends first."""

from __future__ import annotations

import dataclasses
import datetime
import random
import struct
import sys
import uuid
from typing import Any

import hypothesis.strategies as st
from kio.index import UnknownEntity, load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    is_optional,
)

from kernel.protocol.codec import default_entity
from kernel.protocol.compression import Compression
from kernel.protocol.records import ATTRIBUTES_OFFSET, SimpleRecord, build_batch, crc_of
from tests.integration.wire import encode_request
from tests.kio_strategies import requests

CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
          Compression.ZSTD)
# Values that sit on the edges of Kafka's integer and length fields.
EDGES = (b"\x00", b"\xff", b"\x7f", b"\x80", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff",
         b"\x80\x00\x00\x00", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f")


def served_classes(served: dict[int, tuple[int, int]]) -> tuple[type, ...]:
    out = []
    for api_key, (low, high) in sorted(served.items()):
        for version in range(low, high + 1):
            try:
                out.append(load_request_schema(api_key, version))
            except UnknownEntity:
                continue
    return tuple(out)


@st.composite
def record_batches(draw: st.DrawFn) -> bytes:
    """One or two v2 batches of any codec, sometimes damaged behind a matching CRC."""
    out = b""
    for _ in range(draw(st.integers(1, 2))):
        records = draw(st.lists(
            st.builds(SimpleRecord, value=st.none() | st.binary(max_size=200),
                      key=st.none() | st.binary(max_size=16),
                      headers=st.lists(st.tuples(st.text(max_size=8),
                                                 st.none() | st.binary(max_size=8)),
                                       max_size=2)),
            min_size=1, max_size=5))
        batch = bytearray(build_batch(records, compression=draw(st.sampled_from(CODECS)),
                                      base_timestamp=1_700_000_000_000))
        if draw(st.booleans()):
            at = draw(st.integers(ATTRIBUTES_OFFSET, len(batch) - 1))
            batch[at:at + 1] = draw(st.sampled_from(EDGES))[:1]
            struct.pack_into(">I", batch, 17, crc_of(batch))
        out += bytes(batch)
    return out


def records_field() -> st.SearchStrategy[bytes]:
    return st.binary(max_size=64) | record_batches()


def request_frames(served: dict[int, tuple[int, int]]) -> st.SearchStrategy[bytes]:
    return requests(served_classes(served), records_field()).map(
        lambda e: encode_request(e, correlation_id=7))


def produce_frames(topic: str, topic_id: uuid.UUID,
                   versions: tuple[int, int]) -> st.SearchStrategy[bytes]:
    """Produce requests to a topic that exists, so batches reach the log's validator."""

    def frame(version: int, acks: int, batches: bytes) -> bytes:
        cls = load_request_schema(0, version)
        mod = sys.modules[cls.__module__]
        # v13 names the topic by id (KIP-516).
        named = {"topic_id": topic_id} if version >= 13 else {"name": topic}
        body = cls(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
                   topic_data=(mod.TopicProduceData(**named, partition_data=(
                       mod.PartitionProduceData(index=0, records=batches),)),))
        return encode_request(body, correlation_id=11)

    return st.builds(frame, st.integers(*versions), st.sampled_from([1, -1]), record_batches())


def mutate(frame: bytes, rng: random.Random) -> bytes:
    """A frame changed the ways a broken or hostile client changes one."""
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        at = rng.randrange(4, len(data)) if len(data) > 4 else len(data)
        if op == 0:
            data[at:at + 1] = bytes([rng.randrange(256)])
        elif op == 1:
            edge = rng.choice(EDGES)
            data[at:at + len(edge)] = edge
        elif op == 2:
            del data[at:at + rng.randint(1, 8)]
        elif op == 3:
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 4:
            del data[at:]
        else:
            data[at:at + 1] = bytes([data[at] ^ (1 << rng.randrange(8))]) if at < len(data) else b""
    body = bytes(data[4:])
    # Mostly keep the size prefix true, so the body (not the framing) is what is tested.
    if rng.random() < 0.8:
        return struct.pack(">i", len(body)) + body
    return bytes(data)


def preambles() -> list[bytes]:
    """First bytes of SASL and TLS clients, and other strangers, on a plaintext port."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as HandshakeV1

    client_hello = bytes.fromhex(
        "16030100c4010000c00303" + "00" * 32 + "00" + "0004130113020100" + "0093"
        + "0000000e000c0000096c6f63616c686f7374" + "00" * 0x85)
    out = [
        client_hello,
        client_hello[:5],
        encode_request(HandshakeV0(mechanism="PLAIN")),
        encode_request(HandshakeV1(mechanism="SCRAM-SHA-256")),
        encode_request(SaslAuthenticateRequest(auth_bytes=b"\x00user\x00pass")),
        # SASL v0: raw token frames right after the handshake.
        encode_request(HandshakeV0(mechanism="PLAIN")) + struct.pack(">i", 11) + b"\x00user\x00pw",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00\x00\x00\x00",
        b"\x00\x00\x00\x01\x00",
        b"\x00\x00\x00\x08\x00\x12\x00\x03\x00\x00\x00\x01",
    ]
    return out



def with_nulls(cls: type, *, outer: bool) -> Any:
    """An entity whose nullable fields are null wherever their parents are not
    (``outer`` False), or whose nullable collections and structs are present, at every
    depth, with one element whose nullable scalars are null (``outer`` True). Every
    other field has its zero value."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        if is_optional(f) and not (outer and isinstance(kind, EntityField | EntityTupleField)):
            values[f.name] = None
        elif isinstance(kind, EntityTupleField):
            values[f.name] = (with_nulls(kind.type_, outer=outer),)
        elif isinstance(kind, EntityField):
            values[f.name] = with_nulls(kind.type_, outer=outer)
    return default_entity(cls, **values)
