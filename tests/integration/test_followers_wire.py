"""The leader's side of replication, spoken over sockets: a second broker is registered
in the metadata, and a test plays its follower with raw Fetch requests (replica id 2).

acks=all waits in the Produce purgatory for the in-sync follower; consumers read only
below the high watermark the follower's fetches move; a follower's long poll is woken by
appends; DeleteRecords waits for the follower's log start offset; and a follower fetch
needs CLUSTER_ACTION and a place in the replica set.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.errors import ErrorCode

from kernel.cluster import BrokerRegistration
from kernel.handlers import delete_records, fetch, list_offsets, produce
from kernel.hookspecs import hookimpl
from kernel.protocol.build import field_names, request_module
from kernel.protocol.records import SimpleRecord, build_batch
from kernel.requests import Session
from kernel.testing.embedded import EmbeddedBroker
from tests.integration.test_log_apis_wire import build, topic_id, topic_ref, values_in
from tests.integration.wire import connect, decode_response, encode_request, recv_frame, request

FOLLOWER = 2
LONG = datetime.timedelta(seconds=10)


def create_replicated(broker: EmbeddedBroker, name: str, *configs: tuple[str, str]) -> None:
    """A one-partition topic on brokers 1 (leader) and 2, both in the ISR."""
    created = request(broker.bootstrap, create_v7.CreateTopicsRequest(
        timeout=LONG, validate_only=False, topics=(create_v7.CreatableTopic(
            name=name, num_partitions=-1, replication_factor=-1,
            configs=tuple(create_v7.CreatableTopicConfig(name=k, value=v) for k, v in configs),
            assignments=(create_v7.CreatableReplicaAssignment(
                partition_index=0, broker_ids=(1, FOLLOWER)),)),)))
    assert created.topics[0].error_code == ErrorCode.none
    state = broker.broker.metadata.image.partition(name, 0)
    assert state is not None and (state.leader, state.isr) == (1, (1, FOLLOWER))


@pytest.fixture
def leader(broker: EmbeddedBroker) -> EmbeddedBroker:
    broker.call(broker.broker.metadata.register_broker(
        BrokerRegistration(node_id=FOLLOWER, host="127.0.0.1", port=1)))
    return broker


@contextmanager
def sent(broker: EmbeddedBroker, body: Any) -> Iterator[Callable[[float], Any]]:
    """Send ``body`` on its own connection; yields ``answer(timeout)``: the decoded
    response, or None when none came within ``timeout`` seconds."""
    with connect(broker.bootstrap) as sock:
        sock.sendall(encode_request(body, correlation_id=5))

        def answer(timeout: float) -> Any:
            sock.settimeout(timeout)
            try:
                frame = recv_frame(sock)
            except TimeoutError:
                return None
            assert frame is not None, "the broker closed the connection"
            return decode_response(frame, body.__api_key__, body.__version__)[1]

        yield answer


def produce_body(broker: EmbeddedBroker, name: str, value: bytes, *, acks: int,
                 timeout: datetime.timedelta = LONG) -> Any:
    m = request_module(produce.API_KEY, produce.MAX_VERSION)
    return build(m.ProduceRequest, acks=acks, timeout=timeout, topic_data=(topic_ref(
        m.TopicProduceData, name, topic_id(broker, name), partition_data=(build(
            m.PartitionProduceData, index=0,
            records=build_batch([SimpleRecord(value=value)])),)),))


def produced(response: Any) -> tuple[ErrorCode, int]:
    (answer,) = response.responses[0].partition_responses
    return answer.error_code, answer.base_offset


def fetch_body(broker: EmbeddedBroker, name: str, offset: int, *, replica_id: int = -1,
               version: int = fetch.MAX_VERSION, max_wait: datetime.timedelta = LONG,
               log_start_offset: int = -1, current_leader_epoch: int = -1) -> Any:
    """Fetch one partition; as ``replica_id`` (v15+ carry it in ``replica_state``)."""
    m = request_module(fetch.API_KEY, version)
    extra: dict[str, Any] = {"replica_id": replica_id}
    if "replica_state" in field_names(m.FetchRequest):
        extra = {"replica_state": build(m.ReplicaState, replica_id=replica_id,
                                        replica_epoch=-1)}
    return build(m.FetchRequest, max_wait=max_wait, min_bytes=1, max_bytes=1 << 20,
                 session_epoch=-1, **extra, topics=(topic_ref(
                     m.FetchTopic, name, topic_id(broker, name), partitions=(build(
                         m.FetchPartition, partition=0, fetch_offset=offset,
                         current_leader_epoch=current_leader_epoch, last_fetched_epoch=-1,
                         log_start_offset=log_start_offset,
                         partition_max_bytes=1 << 20),)),))


def partition_of(fetch_response: Any) -> Any:
    assert getattr(fetch_response, "error_code", ErrorCode.none) == ErrorCode.none
    (answer,) = fetch_response.responses[0].partitions
    return answer


def follower_fetch(broker: EmbeddedBroker, name: str, offset: int, **kwargs: Any) -> Any:
    """The follower asks for ``offset``: it has everything below it."""
    return partition_of(request(broker.bootstrap, fetch_body(
        broker, name, offset, replica_id=FOLLOWER, max_wait=datetime.timedelta(0), **kwargs)))


def consumer_fetch(broker: EmbeddedBroker, name: str, offset: int) -> Any:
    return partition_of(request(broker.bootstrap, fetch_body(
        broker, name, offset, max_wait=datetime.timedelta(0))))


def test_acks_all_waits_for_the_in_sync_follower(leader: EmbeddedBroker) -> None:
    name = "acks-all-isr2"
    create_replicated(leader, name)

    # Nobody fetches: the write stays in the leader's log, the answer is a timeout.
    start = time.monotonic()
    timed_out = request(leader.bootstrap, produce_body(
        leader, name, b"first", acks=-1, timeout=datetime.timedelta(milliseconds=300)))
    assert produced(timed_out) == (ErrorCode.request_timed_out, 0)
    assert 0.25 <= time.monotonic() - start < 5
    # Consumers see nothing above the high watermark; the follower reads to the end.
    below_hw = consumer_fetch(leader, name, 0)
    assert (below_hw.high_watermark, values_in(below_hw.records)) == (0, [])
    assert values_in(follower_fetch(leader, name, 0).records) == [b"first"]

    with sent(leader, produce_body(leader, name, b"second", acks=-1)) as answer:
        assert answer(0.3) is None  # waiting for the follower
        # acks=1 does not wait, even while the follower lags.
        assert produced(request(leader.bootstrap, produce_body(
            leader, name, b"third", acks=1))) == (ErrorCode.none, 2)
        follower_fetch(leader, name, 2)  # the follower now has offsets 0 and 1
        assert produced(answer(5)) == (ErrorCode.none, 1)

    caught_up = consumer_fetch(leader, name, 0)
    assert caught_up.high_watermark == 2
    assert values_in(caught_up.records) == [b"first", b"second"]
    follower_fetch(leader, name, 3)
    assert values_in(consumer_fetch(leader, name, 0).records) == [b"first", b"second", b"third"]


def test_long_polls_wake_on_appends_for_followers_and_on_the_high_watermark_for_consumers(
        leader: EmbeddedBroker) -> None:
    name = "long-polls-isr2"
    create_replicated(leader, name)
    with sent(leader, fetch_body(leader, name, 0, replica_id=FOLLOWER)) as follower, \
            sent(leader, fetch_body(leader, name, 0)) as consumer:
        assert follower(0.2) is None and consumer(0.1) is None
        request(leader.bootstrap, produce_body(leader, name, b"v", acks=1))
        # The follower's wait ends with the append; the consumer's does not, because
        # the high watermark has not moved.
        woken = partition_of(follower(5))
        assert values_in(woken.records) == [b"v"]
        assert consumer(0.3) is None
        follower_fetch(leader, name, 1)
        answered = partition_of(consumer(5))
        assert (answered.high_watermark, values_in(answered.records)) == (1, [b"v"])


def delete_body(name: str, offset: int, timeout: datetime.timedelta = LONG) -> Any:
    m = request_module(delete_records.API_KEY, delete_records.MAX_VERSION)
    return build(m.DeleteRecordsRequest, timeout=timeout, topics=(build(
        m.DeleteRecordsTopic, name=name, partitions=(build(
            m.DeleteRecordsPartition, partition_index=0, offset=offset),)),))


def deleted(response: Any) -> tuple[ErrorCode, int]:
    (answer,) = response.topics[0].partitions
    return answer.error_code, answer.low_watermark


def earliest(broker: EmbeddedBroker, name: str) -> int:
    m = request_module(list_offsets.API_KEY, list_offsets.MAX_VERSION)
    body = build(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(build(
        m.ListOffsetsTopic, name=name, partitions=(build(
            m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
            timestamp=list_offsets.EARLIEST),)),))
    return int(request(broker.bootstrap, body).topics[0].partitions[0].offset)


def test_delete_records_waits_for_the_followers_log_start(leader: EmbeddedBroker) -> None:
    name = "delete-records-isr2"
    create_replicated(leader, name)
    for value in (b"a", b"b", b"c"):
        request(leader.bootstrap, produce_body(leader, name, value, acks=1))
    follower_fetch(leader, name, 3, log_start_offset=0)  # high watermark 3

    # The leader's log start moves at once; the low watermark (the follower's) does not.
    short = delete_body(name, 2, timeout=datetime.timedelta(milliseconds=300))
    assert deleted(request(leader.bootstrap, short)) == (ErrorCode.request_timed_out, 0)
    assert earliest(leader, name) == 2

    with sent(leader, delete_body(name, 2)) as answer:
        assert answer(0.3) is None
        follower_fetch(leader, name, 3, log_start_offset=1)  # not far enough yet
        assert answer(0.3) is None
        follower_fetch(leader, name, 3, log_start_offset=2)
        assert deleted(answer(5)) == (ErrorCode.none, 2)

    # A waiting DeleteRecords whose topic is deleted answers at once.
    with sent(leader, delete_body(name, 3)) as answer:
        assert answer(0.3) is None
        leader.call(leader.broker.metadata.delete_topics([name]))
        assert deleted(answer(5)) == (ErrorCode.unknown_topic_or_partition, -1)


def test_delete_records_on_a_compacted_topic_is_a_policy_violation(
        leader: EmbeddedBroker) -> None:
    name = "compacted-isr2"
    create_replicated(leader, name, ("cleanup.policy", "compact"))
    request(leader.bootstrap, produce_body(leader, name, b"a", acks=1))
    follower_fetch(leader, name, 1)
    assert deleted(request(leader.bootstrap, delete_body(name, 1))) == (
        ErrorCode.policy_violation, -1)
    assert earliest(leader, name) == 0


@pytest.mark.parametrize("version", [fetch.MIN_VERSION, 14, fetch.MAX_VERSION])
def test_a_fetch_from_a_broker_outside_the_replica_set_is_refused(
        leader: EmbeddedBroker, version: int) -> None:
    """As Kafka: UNKNOWN_LEADER_EPOCH when the request names the epoch (the replica may
    be new to an assignment this leader has not seen), else NOT_LEADER_OR_FOLLOWER."""
    name = f"outsider-v{version}"
    create_replicated(leader, name)
    request(leader.bootstrap, produce_body(leader, name, b"a", acks=1))
    names_epoch = version >= 9  # current_leader_epoch arrived in Fetch v9
    for epoch, error in ((-1, ErrorCode.not_leader_or_follower), (0, (
            ErrorCode.unknown_leader_epoch if names_epoch
            else ErrorCode.not_leader_or_follower))):
        answer = partition_of(request(leader.bootstrap, fetch_body(
            leader, name, 0, replica_id=3, version=version, current_leader_epoch=epoch,
            max_wait=datetime.timedelta(0))))
        assert (answer.error_code, values_in(answer.records)) == (error, [])
    # Broker 2 is a replica, at every kind of request.
    answer = partition_of(request(leader.bootstrap, fetch_body(
        leader, name, 0, replica_id=FOLLOWER, version=version,
        max_wait=datetime.timedelta(0))))
    assert values_in(answer.records) == [b"a"]


class NoClusterAction:
    """Test authorizer: everything but CLUSTER_ACTION on the cluster."""

    @hookimpl
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> bool | None:
        return False if (resource_type, operation) == ("CLUSTER", "CLUSTER_ACTION") else None


def test_a_follower_fetch_needs_cluster_action(
        broker_factory: Callable[..., EmbeddedBroker]) -> None:
    broker = broker_factory(plugins=[
        "metadata_kraft", "tests.integration.test_followers_wire:NoClusterAction"])
    broker.call(broker.broker.metadata.register_broker(
        BrokerRegistration(node_id=FOLLOWER, host="127.0.0.1", port=1)))
    name = "no-cluster-action"
    create_replicated(broker, name)
    request(broker.bootstrap, produce_body(broker, name, b"a", acks=1))
    refused = follower_fetch(broker, name, 0)
    assert (refused.error_code, values_in(refused.records)) == (
        ErrorCode.topic_authorization_failed, [])
    # Consumers need READ on the topic only, which this authorizer leaves alone.
    consumed = consumer_fetch(broker, name, 0)
    assert consumed.error_code == ErrorCode.none
    assert consumed.high_watermark == 0  # the follower was refused, so it never moved
