"""Committed offsets (offsets.py) through the shard, without sockets: OffsetCommit
validation against the group, simple consumers, metadata limits, expiry after
retention and OffsetDelete."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)

from plugins.coordinator.config import GroupCoordinatorConfig
from plugins.coordinator.group import GroupState
from plugins.coordinator.records import (
    GroupMetadataKey,
    encode_key,
)
from tests.unit.group_driver import (
    CONFIG,
    GROUP,
    Runtime,
    ctx,
    encodes,
)


def test_commit_from_unknown_member_or_stale_generation_writes_nothing() -> None:
    rt = Runtime()
    (a, _b), generation = rt.stable_group("a", "b")
    before = len(rt.log)

    errors, written = rt.commit("ghost", generation, {("orders", 0): 10})
    assert errors == {("orders", 0): ErrorCode.unknown_member_id} and written == 0
    errors, written = rt.commit(a, generation - 1, {("orders", 0): 10, ("orders", 1): 11})
    assert set(errors.values()) == {ErrorCode.illegal_generation} and written == 0
    # Without generation and member id, a group with members refuses.
    errors, written = rt.commit("", -1, {("orders", 0): 10})
    assert errors == {("orders", 0): ErrorCode.unknown_member_id} and written == 0
    assert len(rt.log) == before
    assert rt.fetch(topics={"orders": [0]}) == {("orders", 0): (-1, "")}

    errors, written = rt.commit(a, generation, {("orders", 0): 10}, metadata="m")
    assert errors == {("orders", 0): ErrorCode.none} and written == 1
    assert rt.fetch() == {("orders", 0): (10, "m")}


def test_commit_to_a_group_that_does_not_exist() -> None:
    rt = Runtime()
    errors, _ = rt.commit("m", 3, {("t", 0): 1}, group="gone")
    assert errors == {("t", 0): ErrorCode.group_id_not_found}
    errors, _ = rt.commit("m", 3, {("t", 0): 1}, group="gone", version=8)
    assert errors == {("t", 0): ErrorCode.illegal_generation}
    assert rt.shard.group("gone") is None


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    rt = Runtime()
    (a, ha), _ = rt.join_new("a"), rt.join_new("b")
    rt.advance(0)
    errors, written = rt.commit(a, rt.responses[ha].generation_id, {("orders", 0): 1})
    assert errors == {("orders", 0): ErrorCode.rebalance_in_progress} and written == 0


def test_simple_commit_with_generation_minus_one_on_an_empty_group() -> None:
    rt = Runtime()
    errors, written = rt.commit("", -1, {("orders", 0): 100, ("orders", 1): 200}, group="simple")
    assert set(errors.values()) == {ErrorCode.none} and written == 2
    group = rt.shard.group("simple")
    assert group is not None and group.state is GroupState.EMPTY and not group.members
    assert rt.fetch("simple") == {("orders", 0): (100, ""), ("orders", 1): (200, "")}
    # Again, now that the group exists (still Empty).
    errors, written = rt.commit("", -1, {("orders", 0): 150}, group="simple")
    assert errors == {("orders", 0): ErrorCode.none} and written == 1
    assert rt.fetch("simple", {"orders": [0, 7]}) == {
        ("orders", 0): (150, ""),
        ("orders", 7): (-1, ""),
    }
    stored = rt.shard.offsets("simple")[("orders", 0)]
    assert stored.commit_timestamp_ms == rt.now and stored.leader_epoch == 3


def test_oversized_offset_metadata_is_rejected_per_partition() -> None:
    rt = Runtime()
    request_errors, written = rt.commit(
        "", -1, {("orders", 0): 1}, metadata="x" * (CONFIG.offset_metadata_max_bytes + 1)
    )
    assert request_errors == {("orders", 0): ErrorCode.offset_metadata_too_large}
    assert written == 0
    ok, written = rt.commit(
        "", -1, {("orders", 0): 1}, metadata="x" * CONFIG.offset_metadata_max_bytes
    )
    assert ok == {("orders", 0): ErrorCode.none} and written == 1


def test_offsets_expire_after_retention_once_the_group_is_empty() -> None:
    config = GroupCoordinatorConfig(
        group_initial_rebalance_delay_ms=0,
        offsets_retention_minutes=1,
        offsets_retention_check_interval_ms=10_000,
    )
    rt = Runtime(config)
    rt.commit("", -1, {("orders", 0): 5}, group="simple")
    rt.advance(30_000)
    assert rt.fetch("simple") == {("orders", 0): (5, "")}
    rt.advance(40_000)
    assert rt.shard.group("simple") is None
    # Offset tombstone, then the group's tombstone.
    assert [value for _, value in rt.log[-2:]] == [None, None]
    assert rt.log[-1][0] == encode_key(GroupMetadataKey(group="simple"))


def test_offset_delete_refuses_topics_the_consumer_group_subscribes_to() -> None:
    rt = Runtime()
    (a, _b), generation = rt.stable_group("a", "b")  # both subscribe to "orders"
    rt.commit(a, generation, {("orders", 0): 1, ("legacy", 0): 2})
    request = OffsetDeleteRequest(
        group_id=GROUP,
        topics=(
            OffsetDeleteRequestTopic(
                name="orders", partitions=(OffsetDeleteRequestPartition(partition_index=0),)
            ),
            OffsetDeleteRequestTopic(
                name="legacy", partitions=(OffsetDeleteRequestPartition(partition_index=0),)
            ),
        ),
    )
    response = rt.apply(rt.shard.delete_offsets(ctx(0), request))
    encodes(response)
    assert response.error_code == ErrorCode.none
    assert {(t.name, p.error_code) for t in response.topics for p in t.partitions} == {
        ("orders", ErrorCode.group_subscribed_to_topic),
        ("legacy", ErrorCode.none),
    }
    assert rt.fetch() == {("orders", 0): (1, "")}
    missing = OffsetDeleteRequest(group_id="nope", topics=())
    assert (
        rt.apply(rt.shard.delete_offsets(ctx(0), missing)).error_code
        == ErrorCode.group_id_not_found
    )


def test_an_empty_group_whose_offsets_are_all_deleted_stays_until_expiration() -> None:
    """Kafka 4.3 keeps the group (kafka-consumer-groups --delete-offsets then --delete
    both succeed); the offset expiration check removes it later."""
    config = GroupCoordinatorConfig(
        group_initial_rebalance_delay_ms=0, offsets_retention_check_interval_ms=10_000
    )
    rt = Runtime(config)
    rt.commit("", -1, {("orders", 0): 5}, group="simple")
    request = OffsetDeleteRequest(
        group_id="simple",
        topics=(
            OffsetDeleteRequestTopic(
                name="orders", partitions=(OffsetDeleteRequestPartition(partition_index=0),)
            ),
        ),
    )
    assert rt.apply(rt.shard.delete_offsets(ctx(0), request)).error_code == ErrorCode.none
    assert rt.fetch("simple") == {}
    group = rt.shard.group("simple")
    assert group is not None and group.is_in(GroupState.EMPTY)
    assert rt.log[-1][1] is None and rt.log[-1][0] != encode_key(GroupMetadataKey(group="simple"))
    rt.advance(10_000)
    assert rt.shard.group("simple") is None
    assert rt.log[-1] == (encode_key(GroupMetadataKey(group="simple")), None)
