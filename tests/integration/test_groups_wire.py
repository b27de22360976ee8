"""Group coordinator cases clients do not send on purpose, spoken over a socket with kio
entities: what is advertised, FindCoordinator key types and batches, Kafka's error code
for each bad request (unknown member, stale generation, oversized metadata, unknown
group or topic, invalid session timeout, authorization), and that nothing is committed
by a refused commit."""

from __future__ import annotations

import datetime
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeV5
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeV6
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as FindV0
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindV4
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9 import request as join_v9
from kio.schema.leave_group.v0.request import LeaveGroupRequest as LeaveV0
from kio.schema.leave_group.v5 import request as leave_v5
from kio.schema.list_groups.v4.request import ListGroupsRequest as ListV4
from kio.schema.offset_commit.v2 import request as commit_v2
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_commit.v9 import request as commit_v9
from kio.schema.offset_delete.v0 import request as offset_delete_v0
from kio.schema.offset_fetch.v1 import request as fetch_v1
from kio.schema.offset_fetch.v9 import request as fetch_v9
from kio.schema.sync_group.v5 import request as sync_v5
from kio.static.primitive import i32Timedelta, i64Timedelta

from kernel.hookspecs import hookimpl
from kernel.requests import Session
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import connect, decode_response, encode_request, recv_frame

GROUP_SETTINGS = {
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "group.max.session.timeout.ms": 30000,
}
GROUP_APIS = {8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47}
CONSUMER_GROUP_HEARTBEAT = 68
TOPIC = "w-orders"


class DenyingAuthorizer:
    """Nothing on group w-locked; no reading of topic w-secret."""

    @hookimpl
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> bool | None:
        if resource_type == "GROUP" and resource_name == "w-locked":
            return False
        if resource_type == "TOPIC" and resource_name == "w-secret":
            return operation not in ("READ", "DESCRIBE")
        return None


@pytest.fixture
def broker(broker_factory: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    b = broker_factory(
        plugins=["metadata_kraft", "coordinator",
                 "tests.integration.test_groups_wire:DenyingAuthorizer"],
        plugin_settings={"coordinator": GROUP_SETTINGS},
    )
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for name, future in admin.create_topics([NewTopic(TOPIC, 2, 1),
                                             NewTopic("w-secret", 1, 1)]).items():
        future.result(10)
        assert name
    return b


def call(broker: EmbeddedBroker, body: Any) -> Any:
    with connect(broker.bootstrap, timeout=15) as sock:
        sock.sendall(encode_request(body, correlation_id=7))
        frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    correlation_id, response = decode_response(frame, body.__api_key__, body.__version__)
    assert correlation_id == 7
    return response


def ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def join(broker: EmbeddedBroker, group: str, member_id: str = "", session_ms: int = 10000,
         instance: str | None = None) -> Any:
    return call(broker, join_v9.JoinGroupRequest(
        group_id=group, session_timeout=ms(session_ms), rebalance_timeout=ms(10000),
        member_id=member_id, group_instance_id=instance, protocol_type="consumer",
        protocols=(join_v9.JoinGroupRequestProtocol(name="range",
                                                    metadata=subscription(TOPIC)),),
        reason=None,
    ))


def stable_member(broker: EmbeddedBroker, group: str) -> tuple[str, int]:
    """Join as the only member and sync: (member id, generation)."""
    first = join(broker, group)
    assert first.error_code == ErrorCode.member_id_required
    joined = join(broker, group, first.member_id)
    assert joined.error_code == ErrorCode.none and joined.leader == first.member_id
    synced = call(broker, sync_v5.SyncGroupRequest(
        group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=(sync_v5.SyncGroupRequestAssignment(member_id=joined.member_id,
                                                        assignment=b"\x00\x00"),),
    ))
    assert synced.error_code == ErrorCode.none
    return joined.member_id, joined.generation_id


def commit(broker: EmbeddedBroker, group: str, member_id: str, generation: int,
           offsets: dict[tuple[str, int], int], metadata: str = "", version: int = 9) -> Any:
    m = commit_v9 if version == 9 else commit_v8
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(m.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
            committed_metadata=metadata,
        ))
    return call(broker, m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=None,
        topics=tuple(m.OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                     for t, ps in by_topic.items()),
    ))


def commit_errors(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def committed(broker: EmbeddedBroker, group: str) -> dict[tuple[str, int], int]:
    response = call(broker, fetch_v9.OffsetFetchRequest(groups=(
        fetch_v9.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=-1,
                                         topics=None),
    ), require_stable=False))
    (g,) = response.groups
    assert g.error_code == ErrorCode.none
    return {(t.name, p.partition_index): p.committed_offset
            for t in g.topics for p in t.partitions}


def test_group_apis_are_advertised_only_with_the_plugin(
    broker: EmbeddedBroker, broker_factory: Callable[..., EmbeddedBroker]
) -> None:
    request = ApiVersionsRequest(client_software_name="wire", client_software_version="1")
    advertised = {k.api_key for k in call(broker, request).api_keys}
    assert advertised >= GROUP_APIS
    assert CONSUMER_GROUP_HEARTBEAT not in advertised
    bare = broker_factory(plugins=["metadata_kraft"])
    assert not GROUP_APIS & {k.api_key for k in call(bare, request).api_keys}


def test_find_coordinator_keys_and_key_types(broker: EmbeddedBroker) -> None:
    host, port = broker.bootstrap.rsplit(":", 1)
    batched = call(broker, FindV4(key_type=0, coordinator_keys=("g-1", "g-2", "w-locked")))
    found = {c.key: (c.error_code, c.node_id, c.host, c.port) for c in batched.coordinators}
    assert found["g-1"] == (ErrorCode.none, 1, host, int(port))
    assert found["g-2"] == (ErrorCode.none, 1, host, int(port))
    assert found["w-locked"][0] == ErrorCode.group_authorization_failed
    # No transaction plugin: no __transaction_state, no transaction coordinator.
    txn = call(broker, FindV4(key_type=1, coordinator_keys=("tx-1",)))
    assert txn.coordinators[0].error_code == ErrorCode.coordinator_not_available
    assert txn.coordinators[0].node_id == -1
    unknown = call(broker, FindV4(key_type=7, coordinator_keys=("x",)))
    assert unknown.coordinators[0].error_code == ErrorCode.invalid_request
    single = call(broker, FindV0(key="g-1"))
    assert (single.error_code, single.node_id, single.port) == (ErrorCode.none, 1, int(port))


def test_join_refuses_invalid_session_timeouts_and_group_ids(broker: EmbeddedBroker) -> None:
    assert join(broker, "w-g", session_ms=5999).error_code == ErrorCode.invalid_session_timeout
    assert join(broker, "w-g", session_ms=30001).error_code == ErrorCode.invalid_session_timeout
    assert join(broker, "").error_code == ErrorCode.invalid_group_id
    assert join(broker, "w-locked").error_code == ErrorCode.group_authorization_failed
    # A member id the group never handed out.
    assert join(broker, "w-g", member_id="ghost").error_code == ErrorCode.unknown_member_id


def test_refused_commits_commit_nothing(broker: EmbeddedBroker) -> None:
    group = "w-commits"
    member_id, generation = stable_member(broker, group)
    p0, p1 = (TOPIC, 0), (TOPIC, 1)

    ghost = commit(broker, group, "ghost", generation, {p0: 5})
    assert commit_errors(ghost) == {p0: ErrorCode.unknown_member_id}
    stale = commit(broker, group, member_id, generation - 1, {p0: 5})
    assert commit_errors(stale) == {p0: ErrorCode.illegal_generation}
    big = commit(broker, group, member_id, generation, {p0: 5}, metadata="x" * 4097)
    assert commit_errors(big) == {p0: ErrorCode.offset_metadata_too_large}
    nowhere = commit(broker, group, member_id, generation, {("w-missing", 0): 5, (TOPIC, 9): 5})
    assert set(commit_errors(nowhere).values()) == {ErrorCode.unknown_topic_or_partition}
    secret = commit(broker, group, member_id, generation, {("w-secret", 0): 5})
    assert commit_errors(secret) == {("w-secret", 0): ErrorCode.topic_authorization_failed}
    # A group this coordinator does not know: v9 says so, older versions had no such code.
    unknown = commit(broker, "w-unknown", "m", 1, {p0: 5})
    assert commit_errors(unknown) == {p0: ErrorCode.group_id_not_found}
    unknown_v8 = commit(broker, "w-unknown", "m", 1, {p0: 5}, version=8)
    assert commit_errors(unknown_v8) == {p0: ErrorCode.illegal_generation}
    locked = commit(broker, "w-locked", "", -1, {p0: 5})
    assert commit_errors(locked) == {p0: ErrorCode.group_authorization_failed}
    assert committed(broker, group) == {}
    assert committed(broker, "w-unknown") == {}

    # The same member, generation and sizes are fine; only metadata at the limit.
    ok = commit(broker, group, member_id, generation, {p0: 5, p1: 7}, metadata="x" * 4096)
    assert set(commit_errors(ok).values()) == {ErrorCode.none}
    assert committed(broker, group) == {p0: 5, p1: 7}


def test_heartbeat_sync_and_leave_errors(broker: EmbeddedBroker) -> None:
    group = "w-beats"
    member_id, generation = stable_member(broker, group)

    def beat(member: str, gen: int, group_id: str = group) -> ErrorCode:
        return call(broker, HeartbeatRequest(group_id=group_id, generation_id=gen,
                                             member_id=member, group_instance_id=None)).error_code

    assert beat(member_id, generation) == ErrorCode.none
    assert beat("ghost", generation) == ErrorCode.unknown_member_id
    assert beat(member_id, generation + 1) == ErrorCode.illegal_generation
    assert beat(member_id, generation, "w-nobody") == ErrorCode.unknown_member_id
    stale_sync = call(broker, sync_v5.SyncGroupRequest(
        group_id=group, generation_id=generation + 1, member_id=member_id,
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=(),
    ))
    assert stale_sync.error_code == ErrorCode.illegal_generation

    assert call(broker, LeaveV0(group_id=group, member_id="ghost")).error_code == \
        ErrorCode.unknown_member_id
    batch = call(broker, leave_v5.LeaveGroupRequest(group_id=group, members=(
        leave_v5.MemberIdentity(member_id=member_id, group_instance_id=None, reason="done"),
        leave_v5.MemberIdentity(member_id="ghost", group_instance_id=None, reason=None),
    )))
    assert batch.error_code == ErrorCode.none
    assert [m.error_code for m in batch.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert beat(member_id, generation) == ErrorCode.unknown_member_id

    # A group the session may not READ: every member request is refused before the shard.
    denied = ErrorCode.group_authorization_failed
    assert beat(member_id, generation, "w-locked") == denied
    assert call(broker, sync_v5.SyncGroupRequest(
        group_id="w-locked", generation_id=generation, member_id=member_id,
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=(),
    )).error_code == denied
    assert call(broker, LeaveV0(group_id="w-locked", member_id=member_id)).error_code == denied
    assert call(broker, leave_v5.LeaveGroupRequest(group_id="w-locked", members=(
        leave_v5.MemberIdentity(member_id=member_id, group_instance_id=None, reason=None),
    ))).error_code == denied


def test_admin_group_errors(broker: EmbeddedBroker) -> None:
    member_id, generation = stable_member(broker, "w-busy")
    assert set(commit_errors(commit(broker, "w-busy", member_id, generation,
                                    {(TOPIC, 0): 1})).values()) == {ErrorCode.none}
    assert set(commit_errors(commit(broker, "w-idle", "", -1,
                                    {(TOPIC, 0): 3})).values()) == {ErrorCode.none}

    listed = call(broker, ListV4(states_filter=("stable",)))
    assert [g.group_id for g in listed.groups] == ["w-busy"]
    assert {g.group_id for g in call(broker, ListV4(states_filter=())).groups} == {
        "w-busy", "w-idle"}

    missing = call(broker, DescribeV6(groups=("w-nobody",), include_authorized_operations=True))
    assert missing.groups[0].error_code == ErrorCode.group_id_not_found
    old = call(broker, DescribeV5(groups=("w-nobody", "w-busy"),
                                  include_authorized_operations=True))
    assert [(g.error_code, g.group_state) for g in old.groups] == [
        (ErrorCode.none, "Dead"), (ErrorCode.none, "Stable")]
    # READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: Kafka 4's bits (3400).
    assert old.groups[1].authorized_operations == (
        (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11))
    locked = call(broker, DescribeV6(groups=("w-locked",), include_authorized_operations=False))
    assert locked.groups[0].error_code == ErrorCode.group_authorization_failed

    subscribed = call(broker, offset_delete_v0.OffsetDeleteRequest(group_id="w-busy", topics=(
        offset_delete_v0.OffsetDeleteRequestTopic(name=TOPIC, partitions=(
            offset_delete_v0.OffsetDeleteRequestPartition(partition_index=0),)),
    )))
    assert subscribed.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
    assert committed(broker, "w-busy") == {(TOPIC, 0): 1}

    deleted = call(broker, DeleteGroupsRequest(groups_names=("w-busy", "w-idle", "w-nobody",
                                                             "w-locked")))
    assert {r.group_id: r.error_code for r in deleted.results} == {
        "w-busy": ErrorCode.non_empty_group, "w-idle": ErrorCode.none,
        "w-nobody": ErrorCode.group_id_not_found,
        "w-locked": ErrorCode.group_authorization_failed,
    }
    assert committed(broker, "w-idle") == {}


def test_offset_fetch_v1_reports_each_partition(broker: EmbeddedBroker) -> None:
    assert set(commit_errors(commit(broker, "w-v1", "", -1, {(TOPIC, 1): 11})).values()) == {
        ErrorCode.none}
    response = call(broker, fetch_v1.OffsetFetchRequest(group_id="w-v1", topics=(
        fetch_v1.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0, 1)),
        fetch_v1.OffsetFetchRequestTopic(name="w-secret", partition_indexes=(0,)),
    )))
    rows = {(t.name, p.partition_index): (p.committed_offset, p.error_code)
            for t in response.topics for p in t.partitions}
    assert rows == {
        (TOPIC, 0): (-1, ErrorCode.none), (TOPIC, 1): (11, ErrorCode.none),
        ("w-secret", 0): (-1, ErrorCode.topic_authorization_failed),
    }


def test_expired_offsets_and_their_empty_group_go_for_good(
    broker_factory: Callable[..., EmbeddedBroker],
) -> None:
    b = broker_factory(plugin_settings={"coordinator": {
        **GROUP_SETTINGS, "offsets.retention.check.interval.ms": 50}})
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(10)
    # OffsetCommit v2-v4 carry a per-commit retention: 100 ms here, the default elsewhere.
    response = call(b, commit_v2.OffsetCommitRequest(
        group_id="w-brief", generation_id_or_member_epoch=-1, member_id="",
        retention_time=i64Timedelta.parse(datetime.timedelta(milliseconds=100)),
        topics=(commit_v2.OffsetCommitRequestTopic(name=TOPIC, partitions=(
            commit_v2.OffsetCommitRequestPartition(partition_index=0, committed_offset=4,
                                                   committed_metadata=""),)),),
    ))
    assert response.topics[0].partitions[0].error_code == ErrorCode.none
    assert set(commit_errors(commit(b, "w-lasting", "", -1, {(TOPIC, 0): 9}))) == {(TOPIC, 0)}
    assert committed(b, "w-brief") == {(TOPIC, 0): 4}

    deadline = time.monotonic() + 5
    while committed(b, "w-brief") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert committed(b, "w-brief") == {}
    assert [g.group_id for g in call(b, ListV4(states_filter=())).groups] == ["w-lasting"]
    # Tombstones, not just memory: the group stays gone after a restart.
    b.restart()
    assert committed(b, "w-lasting") == {(TOPIC, 0): 9}
    assert committed(b, "w-brief") == {}
    assert [g.group_id for g in call(b, ListV4(states_filter=())).groups] == ["w-lasting"]
