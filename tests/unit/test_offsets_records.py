"""__consumer_offsets record formats (Kafka's own) and group -> partition mapping."""

from __future__ import annotations

import struct

import pytest

from plugins.coordinator.records import (
    GroupMemberMetadata,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordDecodeError,
    UnknownRecordType,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
)


def kafka_string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def kafka_bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


# ------------------------------------------------------------------------------- keys


def test_offset_commit_key_layout_and_round_trip() -> None:
    key = OffsetCommitKey(group="g1", topic="orders", partition=7)
    data = encode_key(key)
    # version 1, then group, topic, partition: what Kafka writes for offset commits.
    assert data == struct.pack(">h", 1) + kafka_string("g1") + kafka_string("orders") + struct.pack(
        ">i", 7
    )
    assert decode_key(data) == key


def test_offset_commit_key_version_0_is_the_same_schema() -> None:
    data = struct.pack(">h", 0) + kafka_string("g") + kafka_string("t") + struct.pack(">i", 3)
    assert decode_key(data) == OffsetCommitKey(group="g", topic="t", partition=3)


def test_group_metadata_key_layout_and_round_trip() -> None:
    key = GroupMetadataKey(group="payments")
    data = encode_key(key)
    assert data == struct.pack(">h", 2) + kafka_string("payments")
    assert decode_key(data) == key


def test_newer_group_type_keys_are_unknown_record_types() -> None:
    # Key version 3 is ConsumerGroupMetadataKey (KIP-848), not a classic group.
    data = struct.pack(">h", 3) + kafka_string("g")
    with pytest.raises(UnknownRecordType):
        decode_key(data)


def test_truncated_key_is_a_decode_error() -> None:
    data = encode_key(OffsetCommitKey(group="g", topic="t", partition=1))
    with pytest.raises(RecordDecodeError):
        decode_key(data[:-2])


# ---------------------------------------------------------------- offset commit values


def test_offset_commit_value_v3_layout_and_round_trip() -> None:
    value = OffsetCommitValue(
        offset=42, metadata="meta", commit_timestamp=1_700_000_000_000, leader_epoch=5
    )
    data = encode_offset_commit_value(value)
    assert data == (
        struct.pack(">hqi", 3, 42, 5) + kafka_string("meta") + struct.pack(">q", 1_700_000_000_000)
    )
    assert decode_offset_commit_value(data) == value


def test_offset_commit_value_with_expire_timestamp_is_written_as_v1() -> None:
    value = OffsetCommitValue(offset=1, metadata="", commit_timestamp=10, expire_timestamp=99)
    data = encode_offset_commit_value(value)
    assert data == struct.pack(">hq", 1, 1) + kafka_string("") + struct.pack(">qq", 10, 99)
    # v1 has no leader epoch: it decodes as unknown (-1).
    assert decode_offset_commit_value(data) == value


def test_offset_commit_value_v0_and_v2_decode() -> None:
    body = struct.pack(">q", 17) + kafka_string("m") + struct.pack(">q", 123)
    for version in (0, 2):
        decoded = decode_offset_commit_value(struct.pack(">h", version) + body)
        assert decoded == OffsetCommitValue(offset=17, metadata="m", commit_timestamp=123)


def test_offset_commit_value_v4_flexible_decodes_and_skips_tagged_fields() -> None:
    # v4: compact string (length + 1 as unsigned varint) and a tagged-field section; a
    # newer writer may add tagged fields (here tag 0 with 16 bytes, like a topic id).
    data = (
        struct.pack(">hqi", 4, 9, 2)
        + bytes([len("x") + 1])
        + b"x"
        + struct.pack(">q", 77)
        + bytes([1, 0, 16])
        + bytes(16)
    )
    assert decode_offset_commit_value(data) == OffsetCommitValue(
        offset=9, metadata="x", commit_timestamp=77, leader_epoch=2
    )
    value = OffsetCommitValue(offset=9, metadata="x", commit_timestamp=77, leader_epoch=2)
    assert decode_offset_commit_value(encode_offset_commit_value(value, version=4)) == value


def test_unknown_offset_commit_value_version_is_rejected() -> None:
    with pytest.raises(RecordDecodeError):
        decode_offset_commit_value(struct.pack(">hq", 9, 0))


# --------------------------------------------------------------- group metadata values

MEMBERS = (
    GroupMemberMetadata(
        member_id="c1-0a",
        group_instance_id="instance-1",
        client_id="c1",
        client_host="/10.0.0.1",
        rebalance_timeout=300_000,
        session_timeout=45_000,
        subscription=b"\x00\x00sub",
        assignment=b"\x00\x00asg",
    ),
    GroupMemberMetadata(
        member_id="c2-0b",
        group_instance_id=None,
        client_id="c2",
        client_host="/10.0.0.2",
        rebalance_timeout=60_000,
        session_timeout=10_000,
        subscription=b"",
        assignment=b"",
    ),
)
GROUP_VALUE = GroupMetadataValue(
    protocol_type="consumer",
    generation=4,
    protocol="range",
    leader="c1-0a",
    members=MEMBERS,
    current_state_timestamp=1_700_000_000_123,
)


def test_group_metadata_value_v3_layout() -> None:
    data = encode_group_metadata_value(GROUP_VALUE)
    expected = (
        struct.pack(">h", 3)
        + kafka_string("consumer")
        + struct.pack(">i", 4)
        + kafka_string("range")
        + kafka_string("c1-0a")
        + struct.pack(">q", 1_700_000_000_123)
        + struct.pack(">i", 2)
    )
    for m in MEMBERS:
        expected += (
            kafka_string(m.member_id)
            + kafka_string(m.group_instance_id)
            + kafka_string(m.client_id)
            + kafka_string(m.client_host)
            + struct.pack(">ii", m.rebalance_timeout, m.session_timeout)
            + kafka_bytes(m.subscription)
            + kafka_bytes(m.assignment)
        )
    assert data == expected
    assert decode_group_metadata_value(data) == GROUP_VALUE


def test_group_metadata_value_round_trips_in_every_version() -> None:
    for version in range(5):
        decoded = decode_group_metadata_value(encode_group_metadata_value(GROUP_VALUE, version))
        assert decoded.protocol_type == "consumer"
        assert decoded.generation == 4
        assert decoded.protocol == "range"
        assert decoded.leader == "c1-0a"
        assert decoded.current_state_timestamp == (1_700_000_000_123 if version >= 2 else -1)
        assert [m.member_id for m in decoded.members] == ["c1-0a", "c2-0b"]
        assert decoded.members[0].group_instance_id == ("instance-1" if version >= 3 else None)
        # v0 had no rebalance timeout: the session timeout stands in for it.
        assert decoded.members[0].rebalance_timeout == (300_000 if version >= 1 else 45_000)
        assert decoded.members[0].assignment == b"\x00\x00asg"


def test_empty_group_metadata_value_with_null_protocol_and_leader() -> None:
    value = GroupMetadataValue(protocol_type="consumer", generation=7, protocol=None, leader=None)
    data = encode_group_metadata_value(value)
    assert data == (
        struct.pack(">h", 3)
        + kafka_string("consumer")
        + struct.pack(">i", 7)
        + struct.pack(">hh", -1, -1)
        + struct.pack(">q", -1)
        + struct.pack(">i", 0)
    )
    assert decode_group_metadata_value(data) == value


def test_group_metadata_value_v4_skips_unknown_tagged_fields() -> None:
    # Hand-built v4 value: one member, with a tagged field on the member and one at top.
    def compact(s: str) -> bytes:
        return bytes([len(s) + 1]) + s.encode()

    data = (
        struct.pack(">h", 4)
        + compact("consumer")
        + struct.pack(">i", 1)
        + compact("range")
        + compact("m1")
        + struct.pack(">q", 5)
        + bytes([2])  # one member
        + compact("m1")
        + bytes([0])  # group_instance_id null
        + compact("cid")
        + compact("/h")
        + struct.pack(">ii", 1000, 2000)
        + bytes([1])  # empty subscription
        + bytes([2])
        + b"A"
        + bytes([1, 7, 2])  # member tagged fields: tag 7, 2 bytes
        + b"zz"
        + bytes([1, 3, 1])  # top-level tagged fields: tag 3, 1 byte
        + b"q"
    )
    decoded = decode_group_metadata_value(data)
    assert decoded == GroupMetadataValue(
        protocol_type="consumer",
        generation=1,
        protocol="range",
        leader="m1",
        current_state_timestamp=5,
        members=(
            GroupMemberMetadata(
                member_id="m1",
                group_instance_id=None,
                client_id="cid",
                client_host="/h",
                rebalance_timeout=1000,
                session_timeout=2000,
                subscription=b"",
                assignment=b"A",
            ),
        ),
    )


# ------------------------------------------------------------------------ partitioning


def test_java_string_hash_matches_java() -> None:
    # h = 31*h + c over UTF-16 code units, 32-bit wrap-around (Java's String.hashCode):
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97  # 'a' = 97
    assert java_string_hash("ab") == 97 * 31 + 98  # = 3105
    assert java_string_hash("hello") == 99162322  # documented Java value
    assert java_string_hash("foobar") == -1268878963  # overflows to negative in Java
    # The famous string whose hashCode is Integer.MIN_VALUE.
    assert java_string_hash("polygenelubricants") == -(2**31)
    # U+1F600 is two UTF-16 code units, 0xD83D 0xDE00: 55357 * 31 + 56832.
    assert java_string_hash("\U0001f600") == 55357 * 31 + 56832


def test_partition_for_matches_kafka_with_50_partitions() -> None:
    # Kafka: Utils.abs(groupId.hashCode) % offsets.topic.num.partitions (default 50),
    # where Utils.abs(n) = n == Integer.MIN_VALUE ? 0 : Math.abs(n).
    assert partition_for("", 50) == 0  # hash 0
    assert partition_for("a", 50) == 47  # 97 % 50
    assert partition_for("ab", 50) == 5  # 3105 % 50
    assert partition_for("hello", 50) == 22  # 99162322 % 50
    # Negative hash: |-1268878963| = 1268878963, % 50 = 13. (Masking with 0x7fffffff,
    # the producer's toPositive, would give 878604685 % 50 = 35: a different coordinator.)
    assert partition_for("foobar", 50) == 13
    # Integer.MIN_VALUE has no positive counterpart; Utils.abs maps it to 0.
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("\U0001f600", 50) == 1772899 % 50  # = 49


def test_partition_for_needs_partitions() -> None:
    with pytest.raises(ValueError):
        partition_for("g", 0)
