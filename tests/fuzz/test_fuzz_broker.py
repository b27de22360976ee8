"""The fuzzer, run for a bounded number of inputs by the test suite (README: a longer
run). A broker process gets requests of every API key and version it serves, with
fields drawn from kio's schemas (nulls included); the same frames mutated; record
batches of every codec; and SASL and TLS first bytes. The oracle is the Fuzzer's: the
broker never dies, never logs an error or a traceback, keeps answering new
connections, and its RSS stays bounded."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest

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


def test_sasl_and_tls_first_bytes(fuzzer: Fuzzer) -> None:
    for _ in range(max(1, int(3 * SCALE))):
        for data in preambles():
            fuzzer.send(data)
