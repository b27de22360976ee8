"""metadata_zk's znode formats (Kafka 3.x's ZkData) and the controller's leader
election, without a ZooKeeper."""

from __future__ import annotations

import json
import uuid

import pytest

from kernel.cluster import BrokerEndpoint, BrokerRegistration, ScramCredential
from plugins.metadata_zk.cache import TopicZnodes
from plugins.metadata_zk.watcher import topic_image
from plugins.metadata_zk.zkclient import split_connect
from plugins.metadata_zk.znodes import (
    LeaderAndIsr,
    TopicAssignment,
    ZnodeFormatError,
    decode_broker,
    decode_partition_state,
    decode_topic,
    desanitize,
    encode_broker,
    encode_partition_state,
    encode_producer_id_block,
    encode_topic,
    sanitize,
    scram_from_config,
    scram_to_config,
    uuid_from_kafka,
    uuid_to_kafka,
)


def test_broker_registration_round_trips_as_version_5() -> None:
    registration = BrokerRegistration.of(3, (
        BrokerEndpoint("INTERNAL", "10.0.0.1", 9093, "SSL"),
        BrokerEndpoint("CLIENT", "broker3", 9092, "PLAINTEXT")), rack="r1")
    data = json.loads(encode_broker(registration))
    assert data["version"] == 5
    assert data["endpoints"] == ["INTERNAL://10.0.0.1:9093", "CLIENT://broker3:9092"]
    assert data["listener_security_protocol_map"] == {"INTERNAL": "SSL", "CLIENT": "PLAINTEXT"}
    assert (data["host"], data["port"], data["rack"]) == ("broker3", 9092, "r1")
    assert decode_broker(3, encode_broker(registration)) == registration


def test_a_kafka_written_broker_znode_is_read() -> None:
    kafka = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
             b'"endpoints":["PLAINTEXT://kafka-1:9092"],"jmx_port":-1,"port":9092,'
             b'"host":"kafka-1","version":5,"timestamp":"1700000000000"}')
    assert decode_broker(0, kafka) == BrokerRegistration(0, "kafka-1", 9092)


def test_topic_assignment_and_id() -> None:
    topic_id = uuid.uuid4()
    data = encode_topic(topic_id, {1: (2, 3), 0: (3, 2)})
    assert json.loads(data) == {"version": 3, "partitions": {"0": [3, 2], "1": [2, 3]},
                                "adding_replicas": {}, "removing_replicas": {},
                                "topic_id": uuid_to_kafka(topic_id)}
    decoded = decode_topic(data)
    assert decoded.topic_id == topic_id and decoded.partitions == {0: (3, 2), 1: (2, 3)}
    assert decode_topic(b'{"version":1,"partitions":{"0":[1]}}').topic_id is None
    assert uuid_from_kafka(uuid_to_kafka(topic_id)) == topic_id
    with pytest.raises(ZnodeFormatError):
        decode_topic(b"not json")


def test_partition_state() -> None:
    state = LeaderAndIsr(2, 7, (2, 1), 4, zk_version=9)
    data = encode_partition_state(state)
    assert json.loads(data) == {"controller_epoch": 4, "leader": 2, "version": 1,
                                "leader_epoch": 7, "isr": [2, 1]}
    assert decode_partition_state(data, 9) == state
    with pytest.raises(ZnodeFormatError):
        decode_partition_state(b'{"leader": 1}', 0)


def test_user_names_are_sanitized_as_kafkas_sanitizer() -> None:
    assert sanitize("alice smith") == "alice%20smith"
    assert sanitize("a*b+c~d/é") == "a%2Ab%2Bc%7Ed%2F%C3%A9"
    assert sanitize("User_1.x-y") == "User_1.x-y"
    assert desanitize(sanitize("a*b+c~d/é ")) == "a*b+c~d/é "


def test_scram_credential_text_is_kafkas() -> None:
    credential = ScramCredential("u", 1, b"salt", b"stored", b"server", 4096)
    text = scram_to_config(credential)
    assert text == "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"
    assert scram_from_config("u", 1, text) == credential


def test_producer_id_block_end_is_inclusive() -> None:
    assert json.loads(encode_producer_id_block(2, range(1000, 2000))) == {
        "version": 1, "broker": 2, "block_start": "1000", "block_end": "1999"}


def test_connect_string_with_chroot() -> None:
    assert split_connect("a:1,b:2/kafka/prod") == ("a:1,b:2", "/kafka/prod")
    assert split_connect("a:1") == ("a:1", "")


def test_a_topic_shows_once_every_partition_has_a_state() -> None:
    """Partition states arrive one watch at a time: clients (and the coordinators, which
    hash their keys over the partition count) must never see a count in between."""
    topic_id = uuid.uuid4()
    topic = TopicZnodes(assignment=TopicAssignment(topic_id, {0: (1,), 1: (1,), 2: (1,)}))
    topic.states[0] = LeaderAndIsr(1, 0, (1,), 1)
    topic.states[1] = LeaderAndIsr(1, 0, (1,), 1)
    assert topic_image("t", topic, {1}, None) is None
    topic.states[2] = LeaderAndIsr(1, 0, (1,), 1)
    shown = topic_image("t", topic, {1}, None)
    assert shown is not None and len(shown.partitions) == 3
    # Two partitions added: the three shown stay until both new ones have a state.
    topic.assignment = TopicAssignment(topic_id, {p: (1,) for p in range(5)})
    topic.states[3] = LeaderAndIsr(1, 0, (1,), 1)
    partial = topic_image("t", topic, {1}, shown)
    assert partial is not None and sorted(partial.partitions) == [0, 1, 2]
    topic.states[4] = LeaderAndIsr(1, 0, (1,), 1)
    grown = topic_image("t", topic, {2}, partial)
    assert grown is not None and len(grown.partitions) == 5
    assert grown.partitions[4].offline_replicas == (1,)
