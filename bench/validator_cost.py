"""The cost of validating one produced batch on the leader, in isolation (no broker).

    .venv/bin/python -m bench.validator_cost [--records-mb N] [--repeat N]

For each codec it builds one batch of about N MB of records as a producer would send it
(distinct printable values, so the codec meets a realistic ratio, not one repeated
record) and times, per MB of records as decompressed: inflating the section
(``compression.decompress`` with the max.message.bytes bound), walking the records
(``validator.scan_records``), and the whole leader-side check of the append
(``validate_and_assign_offsets``: framing, CRC-32C, header rules, and for a compressed
batch the two before). The NONE rows are the uncompressed hot path, which walks no
record. Best of ``--repeat`` timings, each of enough calls to take about 0.2 s.
"""

from __future__ import annotations

import argparse
import random
import string
import timeit
from collections.abc import Callable, Sequence

from kernel.log.validator import scan_records, validate_and_assign_offsets
from kernel.protocol.compression import Compression, decompress
from kernel.protocol.records import RECORD_BATCH_OVERHEAD, SimpleRecord, build_batch


def make_records(total_bytes: int, record_size: int) -> list[SimpleRecord]:
    rng = random.Random(record_size)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
             for _ in range(2000)]
    found = []
    for i in range(max(1, total_bytes // record_size)):
        text = " ".join(rng.choices(words, k=record_size // 4)).encode()[:record_size]
        found.append(SimpleRecord(key=b"key-%d" % i, value=text))
    return found


def best_us(call: Callable[[], object], repeat: int) -> float:
    timer = timeit.Timer(call)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.validator_cost",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--records-mb", type=float, default=1.0,
                        help="decompressed size of each batch's records in MB (default 1)")
    parser.add_argument("--repeat", type=int, default=5, help="timings per figure (best)")
    args = parser.parse_args(argv)
    total = int(args.records_mb * 1e6)
    max_message_bytes = total * 2 + 1024
    print(f"{'codec':<7} {'record':>6} {'ratio':>6} | {'inflate':>9} {'walk':>9} "
          f"{'append check':>12}   (us per MB decompressed)")
    for record_size in (1024, 100):
        batch_records = make_records(total, record_size)
        count = len(batch_records)
        for codec in Compression:
            batch = build_batch(batch_records, compression=codec)
            section = memoryview(batch)[RECORD_BATCH_OVERHEAD:]
            data = decompress(codec, section, max_message_bytes)
            mb = len(data) / 1e6
            ratio = len(data) / len(section)
            inflate = (best_us(lambda c=codec, s=section: decompress(c, s, max_message_bytes),
                               args.repeat) if codec else 0.0)
            walk = best_us(lambda d=data, n=count: scan_records(
                d, n, check_offsets=True, compacted=False), args.repeat)
            check = best_us(lambda b=batch: validate_and_assign_offsets(
                b, next_offset=0, leader_epoch=0, now_ms=0,
                max_message_bytes=max_message_bytes), args.repeat)
            print(f"{codec.name:<7} {record_size:>5}B {ratio:>6.1f} | "
                  f"{inflate / mb:>9,.0f} {walk / mb:>9,.0f} {check / mb:>12,.0f}")
    print("walk for NONE: what a compacted topic's uncompressed batch pays; the append "
          "check of NONE walks no record")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
