"""What the conformance tests share: the API keys and versions Kafkernel advertises (one
line per key; test_api_versions checks it against the live ApiVersions), requests built
for any version from one set of field values, raw outcomes (an answer or a closed
connection), and the pointer from an ignored field to its entry in DIFFERENCES.md."""

from __future__ import annotations

import dataclasses
import datetime
import re
import struct
import time
import uuid
from collections.abc import Callable, Collection
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from kernel.protocol.build import field_names, request_module
from kernel.protocol.codec import default_entity
from kernel.protocol.records import SimpleRecord, build_batch
from tests.integration.wire import connect, decode_response, encode_request, recv_frame
from tests.reference.diff import Answers, Pair, Side

# Kafkernel's ApiVersions: API key -> (min, max). Adding a version is one line here.
ADVERTISED: dict[int, tuple[int, int]] = {
    0: (0, 13),   # Produce (v0-2 advertised and refused, as Kafka 4 does)
    1: (4, 18),   # Fetch
    2: (1, 11),   # ListOffsets
    3: (0, 13),   # Metadata
    8: (2, 9),    # OffsetCommit
    9: (1, 9),    # OffsetFetch
    10: (0, 6),   # FindCoordinator
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    15: (0, 6),   # DescribeGroups
    16: (0, 5),   # ListGroups
    18: (0, 4),   # ApiVersions
    19: (2, 7),   # CreateTopics
    20: (1, 6),   # DeleteTopics
    21: (0, 2),   # DeleteRecords
    22: (0, 5),   # InitProducerId
    23: (2, 4),   # OffsetForLeaderEpoch
    24: (0, 5),   # AddPartitionsToTxn
    25: (0, 4),   # AddOffsetsToTxn
    26: (0, 4),   # EndTxn
    27: (1, 1),   # WriteTxnMarkers
    28: (0, 4),   # TxnOffsetCommit
    32: (1, 4),   # DescribeConfigs
    33: (0, 2),   # AlterConfigs
    35: (1, 5),   # DescribeLogDirs
    37: (0, 3),   # CreatePartitions
    42: (0, 2),   # DeleteGroups
    43: (0, 2),   # ElectLeaders
    44: (0, 1),   # IncrementalAlterConfigs
    45: (0, 1),   # AlterPartitionReassignments
    46: (0, 0),   # ListPartitionReassignments
    47: (0, 0),   # OffsetDelete
    48: (0, 1),   # DescribeClientQuotas
    49: (0, 1),   # AlterClientQuotas
    57: (0, 2),   # UpdateFeatures (metadata_kraft)
    60: (0, 2),   # DescribeCluster
    61: (0, 0),   # DescribeProducers
    65: (0, 0),   # DescribeTransactions
    66: (0, 1),   # ListTransactions
    75: (0, 0),   # DescribeTopicPartitions
}

TIMEOUT = datetime.timedelta(seconds=10)
DIFFERENCES = Path(__file__).with_name("DIFFERENCES.md")
CLOSED = "<connection closed>"
ZERO_ID = uuid.UUID(int=0)


def versions(api_key: int) -> list[int]:
    low, high = ADVERTISED[api_key]
    return list(range(low, high + 1))


def build(cls: type, **values: Any) -> Any:
    """``cls`` from the values it declares; required fields not given take their zero
    value (a field a version lacks is dropped, so one call serves every version)."""
    names = field_names(cls)
    return default_entity(cls, **{k: v for k, v in values.items() if k in names})


def body(api_key: int, version: int, /, **values: Any) -> Any:
    """The request entity of ``api_key`` at ``version``."""
    return build(load_request_schema(api_key, version), **values)


def part(api_key: int, version: int, name: str, /, **values: Any) -> Any:
    """A nested request entity (e.g. ``CreatableTopic``) of ``api_key`` at ``version``."""
    return build(getattr(request_module(api_key, version), name), **values)


def topic_ref(api_key: int, version: int, name: str, topic: str, topic_id: uuid.UUID, /,
              **values: Any) -> Any:
    """A request's topic entry: by id where the version has ids, else by name."""
    cls = getattr(request_module(api_key, version), name)
    if "topic_id" in field_names(cls):
        return build(cls, topic_id=topic_id, **values)
    return build(cls, name=topic, topic=topic, **values)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def batch(*values: bytes, key: bytes | None = b"k") -> bytes:
    return build_batch([SimpleRecord(key=key, value=v) for v in values])


def outcome(side: Side, request: Any) -> Any:
    """The decoded answer, or CLOSED when the broker closed the connection instead."""
    return outcome_of_frame(side, encode_request(request, correlation_id=7),
                            request.__api_key__, request.__version__)


def outcome_of_frame(side: Side, frame: bytes, api_key: int, version: int) -> Any:
    with connect(side.bootstrap) as sock:
        sock.sendall(frame)
        try:
            answer = recv_frame(sock)
        except (ConnectionResetError, TimeoutError):
            return CLOSED
    if answer is None:
        return CLOSED
    correlation_id, decoded = decode_response(answer, api_key, version)
    assert correlation_id == 7
    return decoded


def header_only_frame(api_key: int, version: int, *, flexible: bool = False) -> bytes:
    """A request header v1 (key, version, correlation id 7, client id), or v2 (its empty
    tagged fields too) when ``flexible``, and no body."""
    client = b"conformance"
    payload = struct.pack(">hhih", api_key, version, 7, len(client)) + client
    if flexible:
        payload += b"\x00"
    return struct.pack(">i", len(payload)) + payload


@cache
def _difference_entries() -> frozenset[str]:
    return frozenset(re.findall(r"^### (D\d+)\b", DIFFERENCES.read_text(), re.M))


def known(entry: str, *fields: str) -> tuple[str, ...]:
    """Fields a comparison leaves out because of DIFFERENCES.md's ``entry``."""
    assert entry in _difference_entries(), f"DIFFERENCES.md has no entry {entry}"
    return fields


def documented(entry: str) -> str:
    """The entry of DIFFERENCES.md that a test shows without ignoring a field."""
    assert entry in _difference_entries(), f"DIFFERENCES.md has no entry {entry}"
    return entry


# -- cases: one function per (API key, situation), run at every advertised version -------

Case = Callable[[Pair, int], None]


def cases(*entries: tuple[int, Case]) -> list[Any]:
    """pytest params (api_key, version, case) of every version each case's key
    advertises, with ids such as ``Metadata-v4-unknown_topic``. Cases of a key not in
    ADVERTISED wait for it (written ahead of a merge that brings the API)."""
    return [pytest.param(key, version, fn, id=f"{api_name(key)}-v{version}-{fn.__name__}")
            for key, fn in entries if key in ADVERTISED for version in versions(key)]


def api_name(api_key: int) -> str:
    return load_request_schema(api_key, ADVERTISED[api_key][1]).__name__.removesuffix(
        "Request")


# -- setup on both brokers ------------------------------------------------------------------

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


def create_topic(pair: Pair, name: str, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    """The topic on both brokers, led on both, through CreateTopics v7."""
    request = body(19, 7, timeout=TIMEOUT, validate_only=False, topics=(part(
        19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1,
        assignments=(), configs=tuple(part(19, 7, "CreatableTopicConfig", name=k, value=v)
                                      for k, v in (configs or {}).items())),))
    for side in (pair.kafka, pair.kafkernel):
        (result,) = side.send(request).topics
        assert result.error_code == ErrorCode.none, (side.label, result)
        wait_for(side, f"{name} is led", lambda s=side: led(s, name, partitions)
                 and served(s, name, partitions))


def led(side: Side, name: str, partitions: int) -> bool:
    (topic,) = side.send(body(3, 12, topics=(part(3, 12, "MetadataRequestTopic", name=name,
                                                  topic_id=ZERO_ID),),
                              allow_auto_topic_creation=False)).topics
    return (topic.error_code == ErrorCode.none and len(topic.partitions) == partitions
            and all(p.leader_id >= 0 for p in topic.partitions))


def served(side: Side, name: str, partitions: int) -> bool:
    """Every partition answers ListOffsets: Kafka's Metadata can name a leader before its
    replica manager leads the partition (a Produce then gets NOT_LEADER_OR_FOLLOWER)."""
    (topic,) = side.send(body(2, 7, replica_id=-1, isolation_level=0, topics=(part(
        2, 7, "ListOffsetsTopic", name=name, partitions=tuple(part(
            2, 7, "ListOffsetsPartition", partition_index=i, current_leader_epoch=-1,
            timestamp=-1) for i in range(partitions))),))).topics
    return all(p.error_code == ErrorCode.none for p in topic.partitions)


def topic_id_of(side: Side, name: str) -> uuid.UUID:
    (topic,) = side.send(body(3, 12, topics=(part(3, 12, "MetadataRequestTopic", name=name,
                                                  topic_id=ZERO_ID),),
                              allow_auto_topic_creation=False)).topics
    return topic.topic_id


def wait_for(side: Side, what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Kafka applies a change to its metadata image shortly after it answered."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{side.label}: {what} within {timeout} s"
        time.sleep(0.02)


def drop_configs(answers: Answers, entry: str, names: Collection[str]) -> Answers:
    """Both answers without the config entries ``names`` (in ``results`` or ``topics``
    ``.configs``): a difference DIFFERENCES.md's ``entry`` explains."""
    documented(entry)

    def strip(answer: Any) -> Any:
        field = "results" if hasattr(answer, "results") else "topics"
        items = tuple(
            dataclasses.replace(item, configs=tuple(c for c in item.configs
                                                    if c.name not in names))
            if getattr(item, "configs", None) else item
            for item in getattr(answer, field))
        return dataclasses.replace(answer, **{field: items})
    return Answers(strip(answers.kafka), strip(answers.kafkernel))
