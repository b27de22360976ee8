"""librdkafka's in-memory mock Kafka cluster as a reference broker, in its own process.

The same mock as the project's shared ``mock_cluster.py`` tool (librdkafka from the
confluent-kafka wheel, ``rd_kafka_mock_cluster_new``), plus a control channel on stdin,
because the mock does not serve CreateTopics: the benchmark writes
``topic NAME PARTITIONS`` and reads ``ok`` or ``error ...``; auto-creation would give
the mock's default of 4 partitions. End of stdin (the benchmark is gone) stops the
process, so an interrupted run leaves nothing behind.

Usage: python -m bench.mock_cluster [--brokers N] [--seconds S]
Prints the bootstrap address on the first line of stdout.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import selectors
import signal
import sys
import time


def _librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    found = glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*"))
    if not found:
        sys.exit("librdkafka not found inside the confluent-kafka wheel")
    return ctypes.CDLL(found[0])


def _declare(lib: ctypes.CDLL) -> None:
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t
    ]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int
    ]
    lib.rd_kafka_err2name.restype = ctypes.c_char_p
    lib.rd_kafka_err2name.argtypes = [ctypes.c_int]


def _command(lib: ctypes.CDLL, cluster: int, line: str) -> str:
    parts = line.split()
    if len(parts) == 3 and parts[0] == "topic" and parts[2].isdigit():
        err = lib.rd_kafka_mock_topic_create(cluster, parts[1].encode(), int(parts[2]), 1)
        return "ok" if err == 0 else f"error {lib.rd_kafka_err2name(err).decode()}"
    return f"error unknown command: {line.strip()!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=600.0,
                        help="stop by itself after this long (a bound, not a duration)")
    args = parser.parse_args()

    lib = _librdkafka()
    _declare(lib)
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
    handle = lib.rd_kafka_new(0, conf, errstr, len(errstr))
    if not handle:
        sys.exit(f"rd_kafka_new failed: {errstr.value.decode()}")
    cluster = lib.rd_kafka_mock_cluster_new(handle, args.brokers)
    if not cluster:
        sys.exit("rd_kafka_mock_cluster_new failed")
    print(lib.rd_kafka_mock_cluster_bootstraps(cluster).decode(), flush=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    deadline = time.monotonic() + args.seconds
    with selectors.DefaultSelector() as sel:
        sel.register(sys.stdin, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(timeout=min(left, 0.5)):
                continue
            line = sys.stdin.readline()
            if not line:
                return
            print(_command(lib, cluster, line), flush=True)


if __name__ == "__main__":
    main()
