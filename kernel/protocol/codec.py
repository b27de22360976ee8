"""Sans-io request decoding and response encoding through kio.

A request frame (without its size prefix) starts with api key, api version and
correlation id; the header version that follows (v0/v1/v2) and the body schema are
picked by (api key, version). Responses are framed with their size prefix and the
response header version kio declares for the API version, except ApiVersions, whose
response header is always v0 (a client cannot know the flexible header before it knows
the versions).
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import typing
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from kernel.protocol.guard import MalformedFrame, request_guard
from kernel.protocol.writer import compiled_writer

API_VERSIONS_KEY = 18
_HEAD = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
T = TypeVar("T")


class InvalidRequest(Exception):
    """A frame that cannot be decoded; Kafka closes the connection on these."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id) without decoding further."""
    if len(frame) < _HEAD.size:
        raise InvalidRequest(f"request of {len(frame)} bytes is shorter than a header")
    return _HEAD.unpack_from(frame, 0)


@cache
def request_codec(api_key: int, api_version: int) -> tuple[Any, Any, Any, bool]:
    """(request class, guard, body reader, whether the header has a client id); raises
    InvalidRequest when kio has no schema for the pair."""
    try:
        cls = load_request_schema(api_key, api_version)
    except UnknownAPIKey:
        raise InvalidRequest(f"unknown API key {api_key}") from None
    except UnknownEntity:
        raise InvalidRequest(f"unsupported version {api_version} of API key {api_key}") from None
    return (cls, request_guard(cls), entity_reader(cls),
            "client_id" in cls.__header_schema__.__dataclass_fields__)


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Any]:
    api_key, api_version, correlation_id = peek_header(frame)
    client_id, body = decode_peeked(frame, api_key, api_version)
    return RequestHeader(api_key, api_version, correlation_id, client_id), body


def decode_peeked(frame: bytes | bytearray | memoryview, api_key: int,
                  api_version: int) -> tuple[str | None, Any]:
    """(client id, body) of a frame whose header ``peek_header`` has read."""
    cls, guard, body_reader, has_client_id = request_codec(api_key, api_version)
    try:
        # kio allocates from declared lengths before reading: nothing reaches it that
        # the frame cannot hold (see guard.py).
        frame, body_at = guard(frame)
    except MalformedFrame as e:
        raise InvalidRequest(f"malformed {cls.__name__} v{api_version}: {e}") from None
    client_id = None
    if has_client_id:
        # Of the header (walked by the guard) only the client id is wanted: a nullable
        # int16-length string after the 8 bytes peek_header read. Decoded as Kafka's
        # Java does, bytes that are not UTF-8 replaced, not refused.
        (size,) = _I16.unpack_from(frame, 8)
        if size >= 0:
            client_id = str(frame[10:10 + size], "utf-8", "replace")
    try:
        body, _ = body_reader(frame, body_at)
    except Exception as e:  # kio raises several types for malformed input
        body = _read_mended(cls, body_reader, frame)
        if body is None:
            raise InvalidRequest(
                f"malformed {cls.__name__} v{api_version}: {type(e).__name__}: {e}"
            ) from None
    return client_id, body


def _read_mended(cls: type, body_reader: Any, frame: Buffer) -> Any:
    """The body of a frame kio refused, read again with its strings that are not UTF-8
    replaced as Kafka's Java reads them; None when there were none (or it fails still)."""
    mended, body_at = request_guard(cls, mend=True)(frame)
    if mended is frame:
        return None
    try:
        return body_reader(mended, body_at)[0]
    except Exception:
        return None


class RecentRequests:
    """Decoded small requests by their bytes (the correlation id aside): clients repeat
    the same requests (a consumer's ListOffsets of the earliest and latest offset for
    every poll in Spark's connector, heartbeats, metadata refreshes), and kio's
    entities are immutable, so an identical frame gets the entity decoded before
    without the guard's walk and kio's reading. Only frames that decoded are kept, and
    only of the APIs below: none that carries records or secrets (Produce, SASL,
    SCRAM credentials) is held on to."""

    MAX_FRAME_BYTES = 512
    MAX_ENTRIES = 1024
    # Fetch, ListOffsets, Metadata, OffsetFetch, FindCoordinator, Heartbeat,
    # ApiVersions, OffsetForLeaderEpoch, DescribeCluster, ConsumerGroupHeartbeat.
    APIS = frozenset({1, 2, 3, 9, 10, 12, 18, 23, 60, 68})

    def __init__(self) -> None:
        self._decoded: dict[bytes, tuple[str | None, Any]] = {}

    def __len__(self) -> int:
        return len(self._decoded)

    def decode(self, frame: bytes | memoryview, api_key: int,
               api_version: int) -> tuple[str | None, Any]:
        """As ``decode_peeked``."""
        if (type(frame) is not bytes or len(frame) > self.MAX_FRAME_BYTES
                or api_key not in self.APIS):
            return decode_peeked(frame, api_key, api_version)
        key = frame[:4] + frame[8:]
        decoded = self._decoded.get(key)
        if decoded is None:
            decoded = decode_peeked(frame, api_key, api_version)
            if len(self._decoded) >= self.MAX_ENTRIES:
                del self._decoded[next(iter(self._decoded))]  # the oldest
            self._decoded[key] = decoded
        return decoded


@cache
def response_codec(api_key: int, api_version: int) -> tuple[Any, Any, bool]:
    """(response class, body writer, flexible header?)"""
    cls = load_response_schema(api_key, api_version)
    flexible_header = api_key != API_VERSIONS_KEY and cls.__header_schema__.__version__ >= 1
    return cls, compiled_writer(cls), flexible_header


# Values at least this large (records in Fetch responses) are sent from the object the
# handler gave, not copied into the frame first.
BY_REFERENCE_BYTES = 32 * 1024
_BUFFERS = (bytes, bytearray, memoryview)

Buffer = bytes | bytearray | memoryview


class ResponseFrame:
    """A response frame as the buffers to send back to back (``writelines``).

    kio's writers call ``write`` once per field: small writes go into a bytearray, and
    large values are kept by reference between them.
    """

    __slots__ = ("_current", "chunks", "files", "size")

    def __init__(self) -> None:
        self._current = bytearray()
        self.chunks: list[Any] = [self._current]
        self.size = 0
        # Some chunks are slices of segment files (FileRecords), sent from the file.
        self.files = False

    def write(self, data: Buffer) -> int:
        n = len(data)
        if n >= BY_REFERENCE_BYTES:
            self._current = bytearray()
            self.chunks += (data, self._current)
            if not isinstance(data, _BUFFERS):
                self.files = True
        else:
            try:
                self._current += data
            except TypeError:  # a small slice of a segment file: by reference too
                self._current = bytearray()
                self.chunks += (data, self._current)
                self.files = True
        self.size += n
        return n

    def to_bytes(self) -> bytes:
        if self.files:
            return b"".join(c if isinstance(c, _BUFFERS) else c.read() for c in self.chunks)
        return b"".join(self.chunks)


def encode_response_frame(
    api_key: int, api_version: int, correlation_id: int, body: Any
) -> ResponseFrame:
    """The whole response frame, size prefix included."""
    _, writer, flexible_header = response_codec(api_key, api_version)
    frame = ResponseFrame()
    frame.write(_SIZE_AND_CORRELATION.pack(0, correlation_id))
    if flexible_header:
        frame.write(b"\x00")  # no tagged fields
    writer(frame, body)
    _SIZE.pack_into(frame.chunks[0], 0, frame.size - 4)
    if not frame.chunks[-1]:
        frame.chunks.pop()
    return frame


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    return encode_response_frame(api_key, api_version, correlation_id, body).to_bytes()


class RecentResponses:
    """Responses that repeat, built and encoded once. A handler whose answer follows
    from a few values it computes anyway (ListOffsets: each partition's offset,
    timestamp, leader epoch or error) gets the entity it built before for equal values
    (``built``), and such an entity is sent from the bytes of its first encoding
    (``encode``): kio's entities are immutable, so equal values give equal bytes. The
    requests Spark's connector repeats (two ListOffsets per poll of 500 records) then
    cost no entity building and no encoding. Bounded: the oldest entry goes first."""

    MAX_ENTRIES = 1024

    def __init__(self) -> None:
        self._built: dict[Hashable, Any] = {}
        # id(entity) -> (the entity, kept so that its id is not reused; the frame after
        # its size and correlation id, None until the first encoding).
        self._encoded: dict[int, tuple[Any, bytes | None]] = {}

    def __len__(self) -> int:
        return len(self._built)

    def built(self, api_key: int, api_version: int, values: Hashable,
              build: Callable[[], T]) -> T:
        """The entity ``build()`` gave for equal ``values`` of this API version, or a
        new one. ``values`` must determine the whole response."""
        key = (api_key, api_version, values)
        entity: T | None = self._built.get(key)
        if entity is None:
            entity = build()
            if len(self._built) >= self.MAX_ENTRIES:
                oldest = self._built.pop(next(iter(self._built)))
                del self._encoded[id(oldest)]
            self._built[key] = entity
            self._encoded[id(entity)] = (entity, None)
        return entity

    def encode(self, api_key: int, api_version: int, correlation_id: int,
               body: Any) -> ResponseFrame | bytes:
        """As ``encode_response_frame``; an entity ``built`` gave is encoded once, and
        answered again as one bytes object."""
        entry = self._encoded.get(id(body))
        if entry is None or entry[0] is not body:
            return encode_response_frame(api_key, api_version, correlation_id, body)
        after = entry[1]
        if after is None:
            frame = encode_response_frame(api_key, api_version, correlation_id, body)
            self._encoded[id(body)] = (body, frame.to_bytes()[_SIZE_AND_CORRELATION.size:])
            return frame
        return _SIZE_AND_CORRELATION.pack(len(after) + 4, correlation_id) + after


def response_class(api_key: int, api_version: int) -> Any:
    return response_codec(api_key, api_version)[0]


# ---------------------------------------------------------------------------
# default ("error") responses
# ---------------------------------------------------------------------------


def _default_for(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple:
        return ()
    if type(None) in args:
        return None
    if isinstance(tp, type):
        if issubclass(tp, ErrorCode):
            return ErrorCode.none
        if issubclass(tp, bool):
            return False
        if issubclass(tp, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(tp, datetime.datetime):
            return datetime.datetime.fromtimestamp(0, datetime.UTC)
        if issubclass(tp, float):
            return tp(0.0)  # kio's f64 takes only a float
        if issubclass(tp, int):
            return tp(0)
        if issubclass(tp, str):
            return ""
        if issubclass(tp, bytes):
            return b""
        if issubclass(tp, uuid.UUID):
            return uuid.UUID(int=0)
        if dataclasses.is_dataclass(tp):
            return default_entity(tp)
    raise TypeError(f"no default for {tp!r}")


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def default_entity(cls: type, **values: Any) -> Any:
    """An instance of a kio entity with every required field at its zero value;
    ``values`` override. Used for the top-level error answer of any API."""
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            kwargs[f.name] = values[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _default_for(hints[f.name])
    return cls(**kwargs)
