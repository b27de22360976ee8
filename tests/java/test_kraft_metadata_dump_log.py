"""Kafka reads our metadata log: a segment and a snapshot written by
plugins/metadata_kraft/records (every metadata record type at every version, every KRaft
control record) go through Kafka's ``kafka-dump-log --cluster-metadata-decoder``, which
must print each record, with the values we wrote, and no error. One JVM for both files.
A live single node's own log goes through it too."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from plugins.metadata_kraft.records import schema, serde
from plugins.metadata_kraft.records.schema import Message
from plugins.metadata_kraft.records.serde import ApiMessageAndVersion
from reference import tools
from tests.broker_process import BrokerProcess
from tests.unit.test_kraft_records import CASES, CONTROL_MESSAGES, full_record

DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"  # kafka-dump-log
# "| offset: 3 CreateTime: ... headerKeys: [] payload: {...}" for a metadata record,
# "... headerKeys: [] LeaderChange: {...}" or "... KRaftVoters {...}" for a control one.
RECORD_LINE = re.compile(r"^\| offset: (\d+) .*headerKeys: \[\] (?:payload: |(\w+):? )(\{.*\})$")
# kafka-dump-log's names of the control records, by kio class name
CONTROL_NAMES = {"LeaderChangeMessage": "LeaderChange", "SnapshotHeaderRecord": "SnapshotHeader",
                 "SnapshotFooterRecord": "SnapshotFooter", "KRaftVersionRecord": "KRaftVersion",
                 "VotersRecord": "KRaftVoters"}


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _json_value(value: Any, version: int) -> Any:
    """A value as Kafka's generated JsonConverters print it."""
    if isinstance(value, Message):
        return _record_json(value, version)
    if dataclasses.is_dataclass(value):  # a kio control message
        return {_camel(f.name): _json_value(getattr(value, f.name), version)
                for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_json_value(v, version) for v in value]
    if isinstance(value, uuid.UUID):  # Uuid.toString: URL-safe base64, unpadded
        return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def _record_json(message: Message, version: int) -> dict[str, Any]:
    """Every field the version has (our records set each to a non-default value, so
    Kafka prints each tagged field too)."""
    return {spec.name[0].lower() + spec.name[1:]: _json_value(getattr(message, attr), version)
            for attr, spec in schema.kafka_fields(type(message)) if spec.present(version)}


def _type_name(message: Message) -> str:
    """REGISTER_BROKER_RECORD from RegisterBrokerRecord, as MetadataRecordType names it."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(message).__name__).upper()


def _printed(output: str) -> dict[int, tuple[str | None, Any]]:
    printed = {}
    for line in output.splitlines():
        match = RECORD_LINE.match(line)
        if match:
            printed[int(match[1])] = (match[2], json.loads(match[3]))
    return printed


def test_kafka_dump_log_reads_our_segment_and_snapshot(tmp_path: Path) -> None:
    partition = tmp_path / "__cluster_metadata-0"
    partition.mkdir()
    records = [ApiMessageAndVersion(full_record(cls, v, salt=i, text="x"), v)
               for i, (cls, v) in enumerate(CASES)]
    leader_change, header, kraft_version, voters, footer = CONTROL_MESSAGES
    segment = partition / "00000000000000000000.log"
    segment.write_bytes(
        serde.build_control_batch([leader_change], base_offset=0, epoch=3, append_time_ms=1)
        + serde.build_metadata_batch(records, base_offset=1, epoch=3, append_time_ms=2))
    snapshot_records = records[:4]
    snapshot = partition / f"{len(records) + 1:020d}-{3:010d}.checkpoint"
    snapshot.write_bytes(
        serde.build_control_batch([header, kraft_version, voters], base_offset=0, epoch=3,
                                  append_time_ms=3)
        + serde.build_metadata_batch(snapshot_records, base_offset=3, epoch=3,
                                     append_time_ms=3)
        + serde.build_control_batch([footer], base_offset=3 + len(snapshot_records), epoch=3,
                                    append_time_ms=3))

    result = tools.run(DUMP_LOG, "--cluster-metadata-decoder", "--files",
                       f"{snapshot},{segment}").check()
    snapshot_part, _, segment_part = result.stdout.partition(f"Dumping {segment}")
    assert f"Dumping {snapshot}" in snapshot_part and segment_part, result.describe()
    for text in (result.stdout, result.stderr):
        assert not re.search(r"error|exception|invalid", text, re.IGNORECASE), result.describe()
    assert "isvalid: false" not in result.stdout

    def expect(offset: int, item: Any, printed: dict[int, tuple[str | None, Any]]) -> None:
        assert offset in printed, f"offset {offset} not printed:\n{result.describe()}"
        name, body = printed[offset]
        if isinstance(item, ApiMessageAndVersion):
            assert name is None
            assert body == {"type": _type_name(item.message), "version": item.version,
                            "data": _record_json(item.message, item.version)}
        else:
            assert name == CONTROL_NAMES[type(item).__name__]
            assert body == _json_value(item, 0)

    in_segment = _printed(segment_part)
    assert sorted(in_segment) == list(range(len(records) + 1))
    expect(0, leader_change, in_segment)
    for offset, record in enumerate(records, start=1):
        expect(offset, record, in_segment)
    in_snapshot = _printed(snapshot_part)
    items = [header, kraft_version, voters, *snapshot_records, footer]
    assert sorted(in_snapshot) == list(range(len(items)))
    for offset, item in enumerate(items):
        expect(offset, item, in_snapshot)


def test_kafka_dump_log_reads_a_live_brokers_metadata_log(tmp_path: Path) -> None:
    """What a running single node wrote (LeaderChange, bootstrap, registration, a topic
    with a config) is Kafka's log: kafka-dump-log prints each record, without error."""
    with BrokerProcess(tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("dumped", 2, 1, config={"retention.ms": "4321"})])[
            "dumped"].result(20)
        segment = tmp_path / "data" / "__cluster_metadata-0" / "00000000000000000000.log"
        result = tools.run(DUMP_LOG, "--cluster-metadata-decoder", "--files",
                           str(segment)).check()
    for text in (result.stdout, result.stderr):
        assert not re.search(r"error|exception|invalid", text, re.IGNORECASE), result.describe()
    printed = _printed(result.stdout)
    assert printed[0] == ("LeaderChange", {"version": 0, "leaderId": 1,
                                           "voters": [{"voterId": 1}],
                                           "grantingVoters": [{"voterId": 1}]})
    records = [body for name, body in printed.values() if name is None]
    assert records[0] == {"type": "FEATURE_LEVEL_RECORD", "version": 0,
                          "data": {"name": "metadata.version", "featureLevel": 30}}
    by_type: dict[str, list[Any]] = {}
    for body in records:
        by_type.setdefault(body["type"], []).append(body)
    register = by_type["REGISTER_BROKER_RECORD"][0]
    assert register["version"] == 4 and register["data"]["fenced"] is False
    directory_id = register["data"]["logDirs"][0]
    topic_id = next(t["data"]["topicId"] for t in by_type["TOPIC_RECORD"]
                    if t["data"]["name"] == "dumped")
    partitions = [p for p in by_type["PARTITION_RECORD"] if p["data"]["topicId"] == topic_id]
    assert [(p["version"], p["data"]["partitionId"], p["data"]["directories"])
            for p in partitions] == [(2, 0, [directory_id]), (2, 1, [directory_id])]
    assert {"type": "CONFIG_RECORD", "version": 0, "data": {
        "resourceType": 2, "resourceName": "dumped", "name": "retention.ms",
        "value": "4321"}} in records
