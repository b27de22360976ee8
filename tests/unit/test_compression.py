"""The codecs of a records section (Kafka's compression with the record format):
round trips of every codec, and decompression bounded while it runs."""

from __future__ import annotations

import tracemalloc

import pytest
import snappy

from kernel.protocol.compression import Compression, DecompressedTooLarge, compress, decompress

CODECS = list(Compression)
COMPRESSED = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
MAX = 1 << 20


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_codecs_round_trip_large_inputs(codec: Compression) -> None:
    data = bytes(range(256)) * 1000  # several xerial/lz4 blocks
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_a_bomb_is_stopped_while_it_inflates(codec: Compression) -> None:
    """200 MB of zeros in a few hundred KB: refused having held little more than the
    limit, never the whole."""
    if codec == Compression.SNAPPY:
        # Snappy declares its length first, and is refused from that alone; a lying
        # preamble (4 GiB) must not be believed either.
        payload = bytes(snappy.compress(b"\x00" * 1_000_000))
        lying = b"\xff\xff\xff\xff\x0f" + payload[3:]
        for data in (payload, lying):
            with pytest.raises(DecompressedTooLarge):
                decompress(codec, data, 64 * 1024)
        return
    payload = compress(codec, b"\x00" * 10_000_000) * 20  # 20 streams back to back
    tracemalloc.start()
    try:
        with pytest.raises(DecompressedTooLarge):
            decompress(codec, payload, MAX)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(payload) + 4 * MAX, peak
