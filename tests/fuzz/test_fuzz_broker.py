"""The fuzzer, run for a bounded number of inputs by the test suite (README: a longer
run). A broker process gets requests of every API key and version it serves, with
fields drawn from kio's schemas (nulls included); the same frames mutated; record
batches of every codec; and SASL and TLS first bytes. The oracle is the Fuzzer's: the
broker never dies, never logs an error or a traceback, keeps answering new
connections, and its RSS stays bounded."""

from __future__ import annotations

import contextlib
import datetime
import os
import random
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest

from kernel.protocol.build import make, request_module
from tests.broker_process import BrokerProcess
from tests.fuzz.harness import Fuzzer
from tests.fuzz.inputs import (
    mutate,
    preambles,
    produce_frames,
    records_field,
    served_classes,
    with_nulls,
)
from tests.integration.wire import encode_request, request
from tests.kio_strategies import requests

# Inputs per served schema (API key and version); KAFKERNEL_FUZZ_SCALE multiplies them.
SCALE = float(os.environ.get("KAFKERNEL_FUZZ_SCALE", "1"))
TOPIC = "fuzzed"


def fuzz_settings(examples: float) -> settings:
    # No shrinking: the broker is one long-lived process, and the Fuzzer's failure
    # names the inputs that came last.
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzer]:
    workdir: Path = tmp_path_factory.mktemp("fuzz")
    with BrokerProcess(workdir, coordinator_partitions=3) as broker:
        created = request(broker.bootstrap, CreateTopicsRequest(
            topics=(CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1,
                                   assignments=(), configs=()),),
            timeout=__import__("datetime").timedelta(seconds=10), validate_only=False))
        assert created.topics[0].error_code == 0
        f = Fuzzer(broker)
        f.topic_id = created.topics[0].topic_id
        yield f
        f.check()
        print("fuzz:", f.summary())


@pytest.fixture(scope="module")
def served(fuzzer: Fuzzer) -> dict[int, tuple[int, int]]:
    response = request(fuzzer.broker.bootstrap, ApiVersionsRequest(
        client_software_name="fuzz", client_software_version="1"))
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def test_requests_of_every_served_api_key_and_version(
    fuzzer: Fuzzer, served: dict[int, tuple[int, int]]
) -> None:
    for cls in served_classes(served):
        @fuzz_settings(6)
        @given(requests((cls,), records_field()))
        def one(entity: object) -> None:
            fuzzer.send(encode_request(entity, correlation_id=3))

        one()


def test_every_nullable_field_of_every_served_version_sent_null(
    fuzzer: Fuzzer, served: dict[int, tuple[int, int]]
) -> None:
    for cls in served_classes(served):
        for outer in (False, True):
            fuzzer.send(encode_request(with_nulls(cls, outer=outer), correlation_id=9))


def test_mutated_frames_of_every_served_api_key_and_version(
    fuzzer: Fuzzer, served: dict[int, tuple[int, int]]
) -> None:
    for cls in served_classes(served):
        @fuzz_settings(4)
        @given(requests((cls,), records_field()), st.randoms(use_true_random=False))
        def one(entity: object, rng: random.Random) -> None:
            fuzzer.send(mutate(encode_request(entity, correlation_id=5), rng))

        one()


def test_record_batches_of_every_codec(
    fuzzer: Fuzzer, served: dict[int, tuple[int, int]]
) -> None:
    low, high = served[0]

    @fuzz_settings(150)
    @given(produce_frames(TOPIC, fuzzer.topic_id, (max(low, 3), high)))
    def one(frame: bytes) -> None:
        fuzzer.send(frame)

    one()


def _fetch_frame(version: int, topic_id: uuid.UUID, offset: int, max_bytes: int,
                 correlation_id: int) -> bytes:
    m = request_module(1, version)
    return encode_request(make(
        m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1, max_bytes=max_bytes, isolation_level=correlation_id % 2, session_id=0,
        session_epoch=-1, forgotten_topics_data=(), rack_id="", topics=(make(
            m.FetchTopic, topic=TOPIC, topic_id=topic_id, partitions=(make(
                m.FetchPartition, partition=0, fetch_offset=offset, current_leader_epoch=-1,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes),
            )),)), correlation_id=correlation_id)


def test_fetch_answers_read_in_part_then_dropped(
    fuzzer: Fuzzer, served: dict[int, tuple[int, int]]
) -> None:
    """Answers sent from the segment files (sendfile) to clients that read a part of
    them and go, politely or with a reset: the broker lets go of every file slice."""
    producer = confluent_kafka.Producer({"bootstrap.servers": fuzzer.broker.bootstrap,
                                         "linger.ms": 20, "batch.size": 500_000})
    for i in range(6_000):
        producer.produce(TOPIC, b"%06d" % i + b"f" * 994, partition=0)
    assert producer.flush(30) == 0
    files_before = fuzzer.broker.open_files()
    low, high = served[1]

    @fuzz_settings(60)
    @given(st.integers(low, high), st.integers(-5, 6_100), st.sampled_from(
        [1, 40_000, 1 << 20, 8 << 20]), st.integers(1, 4), st.integers(0, 300_000),
        st.booleans())
    def one(version: int, offset: int, max_bytes: int, pipelined: int, read: int,
            reset: bool) -> None:
        frames = b"".join(_fetch_frame(version, fuzzer.topic_id, offset, max_bytes, c)
                          for c in range(pipelined))
        with socket.create_connection(("127.0.0.1", fuzzer.broker.port), timeout=5) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(frames)
            got = 0
            sock.settimeout(0.2)
            with contextlib.suppress(TimeoutError):
                while got < read and (chunk := sock.recv(min(65536, read - got))):
                    got += len(chunk)
            if reset:  # an RST, not a FIN: the broker's next send fails
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        fuzzer.sent += 1
        fuzzer.check(full=fuzzer.sent % 10 == 0)

    one()
    deadline = time.monotonic() + 10
    while fuzzer.broker.open_files() > files_before + 5:
        assert time.monotonic() < deadline, (
            f"{fuzzer.broker.open_files()} descriptors open, {files_before} before")
        time.sleep(0.1)


def test_sasl_and_tls_first_bytes(fuzzer: Fuzzer) -> None:
    for _ in range(max(1, int(3 * SCALE))):
        for data in preambles():
            fuzzer.send(data)
