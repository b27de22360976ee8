"""Kafka's metadata records (plugins/metadata_kraft/records): every record type at every
version round trips with tagged fields present and absent, bytes Kafka 4.3.1 wrote decode
to what it meant, and bad bytes get a RecordDecodeError, never another exception."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderChangeVoter
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.voters_record.v0.data import Endpoint, KRaftVersionFeature, Voter, VotersRecord

from kernel.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records
from plugins.metadata_kraft.records import codec, schema, serde
from plugins.metadata_kraft.records.codec import RecordDecodeError, UnsupportedVersionError
from plugins.metadata_kraft.records.schema import (
    METADATA_RECORDS,
    BrokerRegistrationChangeRecord,
    FieldSpec,
    Message,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)
from plugins.metadata_kraft.records.serde import ApiMessageAndVersion

CASES = [(cls, v) for cls in METADATA_RECORDS.values()
         for v in range(cls.VERSIONS[0], cls.VERSIONS[1] + 1)]


def _ids(case: tuple[type[Message], int]) -> str:
    return f"{case[0].__name__}-v{case[1]}"


def _value(spec: FieldSpec, version: int, salt: int, text: str) -> Any:
    """A value of the field's type that differs from every default Kafka gives."""
    element = spec.element
    if element is not None:
        if spec.struct is not None:
            return tuple(full_record(spec.struct, version, salt + i, text) for i in range(2))
        item = FieldSpec(spec.name, element, spec.versions)
        return tuple(_value(item, version, salt + i, text) for i in range(3))
    return {
        "bool": salt % 2 == 0, "int8": 3 + salt % 100, "int16": 300 + salt,
        "int32": 70_000 + salt, "int64": 5_000_000_000 + salt, "uint16": 65_000 + salt,
        "float64": 1.5 + salt, "string": f"{text}-{spec.name}-{salt}",
        "bytes": bytes([salt % 256, 0, 255]), "uuid": uuid.UUID(int=(salt + 1) << 64 | 7),
    }[spec.type]


def full_record(cls: type[Message], version: int, salt: int = 0, text: str = "é") -> Any:
    """Every field the version has set to a non-default value (bools flipped); strings
    start with ``text``."""
    values: dict[str, Any] = {}
    for i, (attr, spec) in enumerate(schema.kafka_fields(cls)):
        if spec.present(version):
            value = _value(spec, version, salt + 7 * i, text)
            default = cls.__dataclass_fields__[attr].default
            values[attr] = (not default) if spec.type == "bool" else value
    return cls(**values)


def _tag_count(cls: type[Message], version: int, data: bytes) -> int:
    """The tagged-field count of a top-level message: decode the untagged fields by the
    plan, then read the count."""
    plan = codec.plan_for(cls, version)
    view, pos = memoryview(data), 0
    for entry in plan.fields:
        _, pos = entry.read(view, pos)
    return codec.read_uvarint(view, pos)[0]


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_round_trip_with_every_field_set(case: tuple[type[Message], int]) -> None:
    cls, version = case
    message = full_record(cls, version)
    data = codec.encode(message, version)
    decoded, end = codec.decode(cls, version, data)
    assert decoded == message and end == len(data)
    tagged = [s for _, s in schema.kafka_fields(cls) if s.present(version) and s.is_tagged(version)]
    assert _tag_count(cls, version, data) == len(tagged)
    framed = serde.encode_value(ApiMessageAndVersion(message, version))
    assert serde.decode_value(framed) == ApiMessageAndVersion(message, version)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_round_trip_with_defaults_writes_no_tagged_field(case: tuple[type[Message], int]) -> None:
    cls, version = case
    message = cls()
    data = codec.encode(message, version)
    assert codec.decode(cls, version, data) == (message, len(data))
    assert _tag_count(cls, version, data) == 0


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_truncated_or_padded_bytes_are_a_decode_error(case: tuple[type[Message], int]) -> None:
    cls, version = case
    framed = serde.encode_value(ApiMessageAndVersion(full_record(cls, version), version))
    for cut in range(len(framed)):
        with pytest.raises(RecordDecodeError):
            serde.decode_value(framed[:cut])
    with pytest.raises(RecordDecodeError, match="bytes after"):
        serde.decode_value(framed + b"\x00")


def test_a_field_the_version_lacks_cannot_carry_a_value() -> None:
    """As Kafka's UnsupportedVersionException: v0 has no Directories, v1 no ELR."""
    with pytest.raises(UnsupportedVersionError, match="Directories"):
        codec.encode(PartitionRecord(directories=(uuid.uuid4(),)), 0)
    with pytest.raises(UnsupportedVersionError, match="EligibleLeaderReplicas"):
        codec.encode(PartitionChangeRecord(eligible_leader_replicas=(1,)), 1)
    with pytest.raises(UnsupportedVersionError, match="versions 0-2, not 3"):
        codec.encode(PartitionRecord(), 3)
    with pytest.raises(UnsupportedVersionError, match="null"):
        codec.encode(TopicRecord(name=None), 0)  # type: ignore[arg-type]


def test_unknown_tagged_fields_are_kept_and_written_back_in_tag_order() -> None:
    """A newer version's tagged field survives a decode and re-encode, placed among the
    known ones by tag as Kafka's RawTaggedFieldWriter places it: PartitionChangeRecord
    v2's ELR (tag 6) read at v1, where tag 6 is unknown and Directories is tag 8."""
    v2 = PartitionChangeRecord(partition_id=1, leader=2, isr=(2,), directories=(uuid.uuid4(),),
                               eligible_leader_replicas=(2,))
    data = codec.encode(v2, 2)
    as_v1, _ = codec.decode(PartitionChangeRecord, 1, data)
    assert as_v1.unknown_tags == ((6, b"\x02\x00\x00\x00\x02"),)
    assert as_v1.directories == v2.directories and as_v1.eligible_leader_replicas is None
    assert codec.encode(as_v1, 1) == data
    late = dataclasses.replace(as_v1, unknown_tags=((0x7F, b"\x01"), (6, b"\x01")))
    assert codec.decode(PartitionChangeRecord, 1, codec.encode(late, 1))[0].unknown_tags == (
        (6, b"\x01"), (0x7F, b"\x01"))


# Record values Kafka 4.3.1 wrote into its __cluster_metadata log (frame included).
TOPIC_ID = uuid.UUID("b3b20099-09c7-4364-aab7-68e1f8351cbb")
KAFKA_WROTE = [
    ("010200037431b3b2009909c74364aab768e1f8351cbb00",
     ApiMessageAndVersion(TopicRecord(name="t1", topic_id=TOPIC_ID), 0)),
    ("01030200000000b3b2009909c74364aab768e1f8351cbb020000000102000000010101000000010000"
     "00000000000002d7ce8930fab669b052e32c859843735a00",
     ApiMessageAndVersion(PartitionRecord(
         partition_id=0, topic_id=TOPIC_ID, replicas=(1,), isr=(1,), leader=1,
         leader_epoch=0, partition_epoch=0,
         directories=(uuid.UUID("d7ce8930-fab6-69b0-52e3-2c859843735a"),)), 2)),
    ("01050200000000b3b2009909c74364aab768e1f8351cbb040001010104ffffffff0605020000000107"
     "050200000001",
     ApiMessageAndVersion(PartitionChangeRecord(
         partition_id=0, topic_id=TOPIC_ID, isr=(), leader=-1,
         eligible_leader_replicas=(1,), last_known_elr=(1,)), 2)),
    ("01110300000001000000000000000f01030101",
     ApiMessageAndVersion(BrokerRegistrationChangeRecord(
         broker_id=1, broker_epoch=15, cordoned_log_dirs=()), 3)),
    ("01140000", ApiMessageAndVersion(NoOpRecord(), 0)),
]


@pytest.mark.parametrize(("hex_value", "expected"), KAFKA_WROTE,
                         ids=[type(e.message).__name__ for _, e in KAFKA_WROTE])
def test_values_kafka_wrote_decode_and_encode_back(hex_value: str,
                                                   expected: ApiMessageAndVersion) -> None:
    value = bytes.fromhex(hex_value)
    assert serde.decode_value(value) == expected
    assert serde.encode_value(expected) == value


def test_frame_version_and_unknown_record_types_are_refused() -> None:
    value = serde.encode_value(ApiMessageAndVersion(NoOpRecord(), 0))
    with pytest.raises(RecordDecodeError, match="frame version 2"):
        serde.decode_value(b"\x02" + value[1:])
    with pytest.raises(RecordDecodeError, match="unknown metadata record type 6"):
        serde.decode_value(b"\x01\x06\x00\x00")
    with pytest.raises(UnsupportedVersionError, match="NoOpRecord has versions 0-0, not 1"):
        serde.decode_value(b"\x01\x14\x01\x00")


CONTROL_MESSAGES = [
    LeaderChangeMessage(version=0, leader_id=2, voters=(LeaderChangeVoter(voter_id=1),
                                                        LeaderChangeVoter(voter_id=2)),
                        granting_voters=(LeaderChangeVoter(voter_id=2),)),
    SnapshotHeaderRecord(version=0, last_contained_log_timestamp=1_700_000_000_000),
    KRaftVersionRecord(version=0, k_raft_version=1),
    VotersRecord(version=0, voters=(Voter(
        voter_id=1, voter_directory_id=uuid.uuid4(),
        endpoints=(Endpoint(name="CONTROLLER", host="localhost", port=9093),),
        k_raft_version_feature=KRaftVersionFeature(min_supported_version=0,
                                                   max_supported_version=1)),)),
    SnapshotFooterRecord(version=0),
]


def test_batches_round_trip_with_the_raft_epoch() -> None:
    records = [ApiMessageAndVersion(full_record(cls, v, salt=i), v)
               for i, (cls, v) in enumerate(CASES)]
    log = (serde.build_control_batch(CONTROL_MESSAGES, base_offset=0, epoch=7,
                                     append_time_ms=1_000)
           + serde.build_metadata_batch(records, base_offset=5, epoch=7, append_time_ms=2_000))
    control, metadata = serde.decode_batches(log)
    assert control.is_control and control.records == tuple(CONTROL_MESSAGES)
    assert (control.base_offset, control.epoch, control.append_time_ms) == (0, 7, 1_000)
    assert not metadata.is_control and metadata.records == tuple(records)
    assert (metadata.base_offset, metadata.epoch) == (5, 7)
    assert list(serde.iter_metadata_records([control, metadata])) == records
    headers = [h for h, _ in iter_batches(log)]
    assert [h.producer_id for h in headers] == [-1, -1]
    assert [h.partition_leader_epoch for h in headers] == [7, 7]
    assert all(r.key is None for r in iter_records(log[headers[0].size:]))


def test_a_control_batch_holds_only_kraft_control_records() -> None:
    with pytest.raises(TypeError, match="not a KRaft control record"):
        serde.encode_control(TopicRecord())  # type: ignore[arg-type]
    with pytest.raises(RecordDecodeError, match="type 1 is not KRaft's"):
        serde.decode_control(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    key, value = serde.encode_control(CONTROL_MESSAGES[0])
    with pytest.raises(RecordDecodeError):
        serde.decode_control(key, value[:-2])
    with pytest.raises(RecordDecodeError, match="bytes after"):
        serde.decode_control(key, value + b"\x00")


def test_a_torn_or_mangled_batch_is_a_decode_error() -> None:
    batch = serde.build_metadata_batch([ApiMessageAndVersion(TopicRecord(name="t"), 0)],
                                       base_offset=0, epoch=1, append_time_ms=0)
    assert serde.decode_batches(batch[:-1]) == []  # a torn tail, as after a crash
    with pytest.raises(RecordDecodeError, match="truncated"):
        serde.decode_batches(batch[:-1], allow_partial_tail=False)
    with pytest.raises(RecordDecodeError, match="not magic v2"):
        serde.decode_batches(batch[:16] + b"\x01" + batch[17:])
    # the first record's length (a zigzag varint after the 61-byte header) made 63
    with pytest.raises(RecordDecodeError, match="runs past the end"):
        serde.decode_batch(batch[:61] + b"\x7e" + batch[62:])
    keyless = build_batch([SimpleRecord(value=None)])
    with pytest.raises(RecordDecodeError, match="has no value"):
        serde.decode_batch(keyless)


def test_values_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="does not fit a >i field"):
        codec.encode(PartitionRecord(leader=2**31), 0)


def test_records_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TopicRecord().name = "x"  # type: ignore[misc]
