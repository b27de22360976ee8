"""The codecs of a v2 batch's records section: gzip, snappy, lz4 and zstd (Kafka keeps
compression with the record format).

Decompression is bounded while it runs: given a ``limit``, it stops as soon as more
than ``limit`` bytes have come out, so a small batch that inflates to hundreds of MB (a
compression bomb) costs at most ``limit`` bytes of memory, never its claimed size.
Every codec must also end where its input ends: a stream cut short is corrupt, since
that is what makes consumers (librdkafka: ``_BAD_COMPRESSION``) stall at the batch.
"""

from __future__ import annotations

import enum
import gzip
import struct
import zlib
from typing import Any

from kernel.protocol.errors import ErrorCode, KafkaError

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODEC_NAMES = ("NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD")


class Compression(enum.IntEnum):
    """The codec in a batch's attributes (bits 0-2), Kafka's CompressionType."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_config(cls, name: str) -> Compression | None:
        """``compression.type`` -> codec; None for ``producer`` (keep the client's)."""
        if name == "producer":
            return None
        return _CODEC_BY_NAME[name]


_CODEC_BY_NAME = {
    "uncompressed": Compression.NONE, "none": Compression.NONE, "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD,
}

_CHUNK = 256 * 1024  # output per step when no limit is given

_GZIP_MAGIC = b"\x1f\x8b"
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024  # Java's SnappyOutputStream default block size
_INT32 = struct.Struct(">i")

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50
_UINT32_LE = struct.Struct("<I")


class DecompressedTooLarge(KafkaError):
    """More than ``limit`` bytes came out; decompression stopped there."""

    def __init__(self, codec: int, limit: int) -> None:
        super().__init__(
            ErrorCode.message_too_large,
            f"{CODEC_NAMES[codec]} records decompress to more than {limit} bytes",
        )
        self.limit = limit


class _Truncated(Exception):
    """The compressed stream ends before its codec says it does."""


def _corrupt(codec: int, reason: object) -> KafkaError:
    return KafkaError(
        ErrorCode.corrupt_message,
        f"cannot decompress {CODEC_NAMES[codec]} records: {reason or 'invalid data'}",
    )


def _snappy_module() -> Any:
    import snappy

    return snappy


def decompress(codec: int, data: bytes | bytearray | memoryview,
               limit: int | None = None) -> bytes:
    """Inflate a records section. Snappy takes Java's xerial framing and the raw
    format; gzip, lz4 and zstd take concatenated streams, as Java's readers do.

    Raises KafkaError: CORRUPT_MESSAGE (undecodable or truncated data),
    MESSAGE_TOO_LARGE as :class:`DecompressedTooLarge` (more than ``limit`` bytes),
    INVALID_RECORD (unknown codec).
    """
    if codec == NONE:
        out = bytes(data)
        if limit is not None and len(out) > limit:
            raise DecompressedTooLarge(codec, limit)
        return out
    inflate = _INFLATERS.get(codec)
    if inflate is None:
        raise KafkaError(ErrorCode.invalid_record, f"unknown compression codec {codec}")
    try:
        return inflate(bytes(data), limit)
    except KafkaError:
        raise
    except _Truncated as e:
        raise _corrupt(codec, f"truncated, or not {CODEC_NAMES[codec]} data ({e})") from None
    except Exception as e:  # each library has its own error types
        raise _corrupt(codec, e) from e


def _room(out: bytearray, limit: int | None) -> int:
    """Bytes to ask of the next step: one past the limit, so exceeding it shows."""
    return _CHUNK if limit is None else limit + 1 - len(out)


def _check(out: bytearray, codec: int, limit: int | None) -> None:
    if limit is not None and len(out) > limit:
        raise DecompressedTooLarge(codec, limit)


def _gunzip(data: bytes, limit: int | None) -> bytes:
    out = bytearray()
    rest = data
    while True:
        d = zlib.decompressobj(wbits=31)  # one gzip member
        pending = rest
        while not d.eof:
            chunk = d.decompress(pending, _room(out, limit))
            out += chunk
            _check(out, GZIP, limit)
            pending = d.unconsumed_tail
            if not chunk and not pending and not d.eof:
                raise _Truncated("gzip member without its end")
        rest = d.unused_data
        if not rest.startswith(_GZIP_MAGIC):
            break
    if rest.strip(b"\x00"):  # zero padding after the last member is tolerated, as gzip does
        raise ValueError(f"{len(rest)} bytes of trailing garbage after the gzip stream")
    return bytes(out)


def _snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its varint preamble): read
    before inflating, since the library allocates that much up front."""
    result = shift = 0
    for position in range(min(5, len(block))):
        b = block[position]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
        shift += 7
    raise ValueError("invalid snappy length preamble")


def _unsnappy(data: bytes, limit: int | None) -> bytes:
    snappy = _snappy_module()
    if not data.startswith(_XERIAL_MAGIC):
        if limit is not None and _snappy_length(data) > limit:
            raise DecompressedTooLarge(SNAPPY, limit)
        return bytes(snappy.decompress(data))
    if len(data) < _XERIAL_HEADER.size:
        raise _Truncated("xerial header")
    out = bytearray()
    position = _XERIAL_HEADER.size
    while position < len(data):
        if position + 4 > len(data):
            raise _Truncated("xerial block length")
        (length,) = _INT32.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > len(data):
            raise _Truncated(f"xerial block of {length} bytes")
        block = data[position:position + length]
        position += length
        if limit is not None and len(out) + _snappy_length(block) > limit:
            raise DecompressedTooLarge(SNAPPY, limit)
        out += snappy.decompress(block)
    return bytes(out)


def _unlz4(data: bytes, limit: int | None) -> bytes:
    import lz4.frame

    out = bytearray()
    rest = data
    while rest:
        d = lz4.frame.LZ4FrameDecompressor()
        pending = rest
        while True:
            out += d.decompress(pending, max_length=_room(out, limit))
            _check(out, LZ4, limit)
            pending = b""
            if d.eof:
                break
            if d.needs_input:
                raise _Truncated("lz4 frame without its end mark")
        rest = d.unused_data or b""
    return bytes(out)


def _zstd_frames_complete(data: bytes) -> None:
    """Walk the frame and block headers (O(blocks), no decoding): zstandard's stream
    reader returns what it has at a cut-off frame without complaint."""
    position = 0
    total = len(data)
    while position < total:
        if position + 4 > total:
            raise _Truncated("zstd frame magic")
        (magic,) = _UINT32_LE.unpack_from(data, position)
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if position + 8 > total:
                raise _Truncated("zstd skippable frame")
            position += 8 + _UINT32_LE.unpack_from(data, position + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise ValueError("unknown zstd frame descriptor")
        if position + 5 > total:
            raise _Truncated("zstd frame header")
        descriptor = data[position + 4]
        single_segment = descriptor & 0x20
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        position += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3] + fcs_size
        while True:
            if position + 3 > total:
                raise _Truncated("zstd block header")
            header = data[position] | data[position + 1] << 8 | data[position + 2] << 16
            kind = (header >> 1) & 3
            if kind == 3:
                raise ValueError("reserved zstd block type")
            position += 3 + (1 if kind == 1 else header >> 3)
            if header & 1:
                break
        if descriptor & 0x04:
            position += 4  # content checksum
        if position > total:
            raise _Truncated("zstd block")


def _unzstd(data: bytes, limit: int | None) -> bytes:
    import zstandard

    _zstd_frames_complete(data)
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    out = bytearray()
    while True:
        chunk = reader.read(_room(out, limit))
        if not chunk:
            break
        out += chunk
        _check(out, ZSTD, limit)
    return bytes(out)


_INFLATERS = {GZIP: _gunzip, SNAPPY: _unsnappy, LZ4: _unlz4, ZSTD: _unzstd}


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """Compress a records section the way the Java client does (so every client reads
    it): gzip, snappy with xerial framing, lz4 frame with 64 KB independent blocks,
    zstd frame. ``level`` is the topic's compression.<codec>.level (Kafka's ranges:
    gzip 1-9 or -1, lz4 1-17, zstd -131072-22); None is the codec's default."""
    if codec == NONE:
        return data
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6 if level is None or level < 0 else level)
    if codec == SNAPPY:
        snappy = _snappy_module()
        out = bytearray(_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1))
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = snappy.compress(data[start:start + _XERIAL_BLOCK])
            out += _INT32.pack(len(block))
            out += block
        return bytes(out)
    if codec == LZ4:
        import lz4.frame

        return bytes(lz4.frame.compress(
            data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
            content_checksum=False, store_size=False,
            compression_level=0 if level is None else level,
        ))
    if codec == ZSTD:
        import zstandard

        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise KafkaError(ErrorCode.invalid_record, f"unknown compression codec {codec}")


__all__ = ["CODEC_NAMES", "Compression", "DecompressedTooLarge", "compress", "decompress"]
