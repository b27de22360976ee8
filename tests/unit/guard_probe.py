"""Run by test_request_guard in a child process with a capped address space: mutated
frames of every request schema go through the guard, and the ones it lets through
through kio's native reader. An allocation sized from a length the guard missed
aborts this process; the test sees the exit status.

    python -m tests.unit.guard_probe EXAMPLES
"""

from __future__ import annotations

import random
import resource
import struct
import sys
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.protocol.codec import InvalidRequest, decode_request
from kernel.protocol.writer import uvarint
from tests.integration.wire import encode_request
from tests.kio_strategies import requests

ADDRESS_SPACE = 1536 * 1024 * 1024


def length_like(rng: random.Random) -> bytes:
    """A value that a reader could take for a length: large, at a collection's or a
    string's width."""
    n = rng.choice([2**20, 2**24, 2**27, 2**28, 2**31 - 1, 2**32 - 1, 2**35 - 1])
    n -= rng.randrange(3)
    kind = rng.randrange(3)
    if kind == 0:
        return uvarint(n & (2**35 - 1))
    if kind == 1:
        return struct.pack(">I", n & 0xFFFFFFFF)
    return struct.pack(">H", n & 0xFFFF)


def main(examples: int) -> None:
    counts = {"refused": 0, "decoded": 0, "kio_error": 0}

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(requests(), st.randoms(use_true_random=False))
    def probe(entity: Any, rng: random.Random) -> None:
        frame = bytearray(encode_request(entity)[4:])
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(8, len(frame)) if len(frame) > 8 else len(frame)
            value = length_like(rng)
            frame[at:at + len(value)] = value
        try:
            decode_request(bytes(frame))
            counts["decoded"] += 1
        except InvalidRequest as e:
            counts["refused" if "malformed" in str(e) and "Error" not in str(e)
                   else "kio_error"] += 1

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    probe()
    print(" ".join(f"{k}={v}" for k, v in counts.items()))


if __name__ == "__main__":
    main(int(sys.argv[1]))
