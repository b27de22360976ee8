"""The embedded KRaft-style metadata backend: log replay, meta.properties, controller
validation and the images it publishes."""

from __future__ import annotations

import asyncio
import base64
import random
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import crc32c
import pytest
import structlog
import structlog.testing

from kernel.cluster import (
    AclBinding,
    BrokerEndpoint,
    BrokerRegistration,
    ClusterImage,
    MetadataBackend,
    NewTopic,
    ScramCredential,
)
from kernel.config import ConfigError, ConfigSchema
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.protocol.records import SimpleRecord, build_batch
from kernel.replication_control import assign_replicas
from plugins import metadata_kraft
from plugins.metadata_kraft import KRaftMetadataBackend, KRaftSettings, jsonlog
from plugins.metadata_kraft.backend import PRODUCER_ID_BLOCK_SIZE
from plugins.metadata_kraft.image import (
    MetadataDelta,
    SecurityProtocol,
    empty_image,
)
from plugins.metadata_kraft.log import MetadataLogError
from plugins.metadata_kraft.properties import new_cluster_id, read_meta_properties
from plugins.metadata_kraft.records.schema import (
    BrokerEndpoint as BrokerEndpointRecord,
)
from plugins.metadata_kraft.records.schema import (
    Message,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
)
from plugins.metadata_kraft.records.serde import (
    ApiMessageAndVersion,
    decode_batches,
    encode_value,
    iter_metadata_records,
)

ZERO_UUID = uuid.UUID(int=0)


def registration(node_id: int = 1, port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(node_id, "127.0.0.1", port)


def make_backend(
    data: Path, node_id: int = 1, port: int = 9092, seed: int = 7
) -> KRaftMetadataBackend:
    return KRaftMetadataBackend(
        data, [data], node_id, registration(node_id, port), rng=random.Random(seed)
    )


def run(data: Path, scenario: Callable[[KRaftMetadataBackend], Awaitable[None]],
        **kwargs: int) -> None:
    """Start a backend on ``data``, run ``scenario`` against it, stop it."""

    async def main() -> None:
        backend = make_backend(data, **kwargs)
        await backend.start()
        try:
            await scenario(backend)
        finally:
            await backend.stop()

    asyncio.run(main())


def reopen(data: Path, **kwargs: int) -> ClusterImage:
    """The image a fresh backend replays from ``data``."""
    images: list[ClusterImage] = []

    async def grab(backend: KRaftMetadataBackend) -> None:
        images.append(backend.image)

    run(data, grab, **kwargs)
    return images[0]


def log_file(data: Path) -> Path:
    return data / "__cluster_metadata-0" / "00000000000000000000.log"


def logged_records(data: Path) -> list[Message]:
    batches = decode_batches(log_file(data).read_bytes(), allow_partial_tail=False)
    return [r.message for r in iter_metadata_records(batches)]


async def raises(code: ErrorCode, awaitable: Awaitable[object]) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        await awaitable
    assert info.value.error_code == code, info.value
    return info.value


# ---------------------------------------------------------------------------
# topics in the image
# ---------------------------------------------------------------------------


def test_backend_satisfies_the_protocol(tmp_path: Path) -> None:
    assert isinstance(make_backend(tmp_path), MetadataBackend)


def test_create_topics_publishes_them_with_ids(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        created = await b.create_topics([
            NewTopic("orders", 3, 1, {"cleanup.policy": "compact"}),
            NewTopic("events", 1, 1),
        ])
        image = b.image
        assert created == [image.topics["orders"], image.topics["events"]]
        ids = {t.topic_id for t in created}
        assert len(ids) == 2 and ZERO_UUID not in ids
        for topic in created:
            assert image.topics_by_id[topic.topic_id] is topic
        orders = image.topics["orders"]
        assert sorted(orders.partitions) == [0, 1, 2]
        for p, state in orders.partitions.items():
            assert state.partition == p
            assert (state.replicas, state.isr, state.leader) == ((1,), (1,), 1)
            assert (state.leader_epoch, state.partition_epoch) == (0, 0)
        assert dict(orders.configs) == {"cleanup.policy": "compact"}
        assert dict(image.topics["events"].configs) == {}
        assert image.controller_id == 1
        assert image.brokers[1] == registration()
        assert b.broker_epoch is not None

    run(tmp_path, scenario)


def test_cluster_id_is_kafka_style_and_written_to_meta_properties(tmp_path: Path) -> None:
    for _ in range(50):
        cid = new_cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16

    other = tmp_path / "other"
    data = tmp_path / "data"

    async def main() -> None:
        b = KRaftMetadataBackend(data, [data, other], 1, registration())
        await b.start()
        cluster_id = b.cluster_id
        await b.stop()
        assert len(cluster_id) == 22
        for d in (data, other):
            props = read_meta_properties(d)
            assert props is not None
            directory_id = props.pop("directory.id")
            assert len(base64.urlsafe_b64decode(directory_id + "==")) == 16
            assert props == {"cluster.id": cluster_id, "node.id": "1", "version": "1"}

    asyncio.run(main())


def test_node_id_mismatch_stops_startup(tmp_path: Path) -> None:
    reopen(tmp_path, node_id=1)

    async def main() -> None:
        with pytest.raises(ConfigError, match=r"node\.id=1 does not match broker\.id=2"):
            await make_backend(tmp_path, node_id=2).start()

    asyncio.run(main())


def test_log_dirs_of_different_clusters_stop_startup(tmp_path: Path) -> None:
    reopen(tmp_path / "a")
    reopen(tmp_path / "b")

    async def main() -> None:
        b = KRaftMetadataBackend(tmp_path / "a", [tmp_path / "a", tmp_path / "b"], 1,
                                 registration())
        with pytest.raises(ConfigError, match="different clusters"):
            await b.start()

    asyncio.run(main())


def test_second_backend_on_same_directory_is_refused(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        with pytest.raises(ConfigError, match="in use"):
            await make_backend(tmp_path).start()

    run(tmp_path, scenario)


def test_two_backends_in_one_process_share_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        a, b = make_backend(tmp_path / "a"), make_backend(tmp_path / "b")
        await a.start()
        await b.start()
        await a.create_topics([NewTopic("only-a", 1, 1)])
        assert "only-a" in a.image.topics and "only-a" not in b.image.topics
        assert a.cluster_id != b.cluster_id
        await a.stop()
        await b.stop()

    asyncio.run(main())


# ---------------------------------------------------------------------------
# durability: restart and recovery
# ---------------------------------------------------------------------------


def test_restart_keeps_topics_ids_configs_partitions_and_cluster_id(tmp_path: Path) -> None:
    before: list[ClusterImage] = []

    async def scenario(b: KRaftMetadataBackend) -> None:
        await b.create_topics([NewTopic("orders", 2, 1, {"retention.ms": "1000"}),
                               NewTopic("gone", 1, 1)])
        await b.create_partitions("orders", 4)
        await b.set_topic_configs("orders", {"retention.ms": "2000", "segment.ms": "5"})
        await b.set_broker_configs(1, {"log.retention.ms": "60000"})
        await b.set_broker_configs(-1, {"num.partitions": "3"})
        await b.delete_topics(["gone"])
        before.append(b.image)

    run(tmp_path, scenario)
    after = reopen(tmp_path, port=9999)
    old = before[0]
    assert after.cluster_id == old.cluster_id
    assert dict(after.topics) == dict(old.topics)
    assert dict(after.topics_by_id) == dict(old.topics_by_id)
    assert {b: dict(c) for b, c in after.broker_configs.items()} == {
        1: {"log.retention.ms": "60000"}, -1: {"num.partitions": "3"}
    }
    assert sorted(after.topics["orders"].partitions) == [0, 1, 2, 3]
    assert dict(after.topics["orders"].configs) == {"retention.ms": "2000", "segment.ms": "5"}
    # The new start registered the broker again, with its new address.
    assert after.brokers[1].port == 9999


def test_scram_credentials_are_stored_removed_and_replayed(tmp_path: Path) -> None:
    alice = ScramCredential("alice", 1, b"salt", b"stored", b"server", 4096)
    bob = ScramCredential("bob", 2, b"pepper", b"stored2", b"server2", 8192)

    async def scenario(b: KRaftMetadataBackend) -> None:
        await b.alter_scram_credentials([alice, bob], [])
        await b.alter_scram_credentials([], [("alice", 1)])
        assert dict(b.scram_credentials()) == {("bob", 2): bob}

    run(tmp_path, scenario)

    async def check(b: KRaftMetadataBackend) -> None:
        assert dict(b.scram_credentials()) == {("bob", 2): bob}

    run(tmp_path, check)


def test_client_quotas_are_stored_removed_and_replayed(tmp_path: Path) -> None:
    alice = (("user", "alice"),)
    defaults = (("client-id", None), ("user", None))
    seen: list[object] = []

    async def scenario(b: KRaftMetadataBackend) -> None:
        await b.alter_client_quotas({alice: {"producer_byte_rate": 1024.0,
                                             "consumer_byte_rate": 2048.0},
                                     defaults: {"request_percentage": 12.5}})
        before = b.client_quotas()
        await b.alter_client_quotas({alice: {"producer_byte_rate": None},
                                     defaults: {"request_percentage": None}})
        assert b.client_quotas() is not before  # replaced, never changed in place
        seen.append({e: dict(v) for e, v in b.client_quotas().items()})

    run(tmp_path, scenario)
    assert seen == [{alice: {"consumer_byte_rate": 2048.0}}]

    async def check(b: KRaftMetadataBackend) -> None:
        assert {e: dict(v) for e, v in b.client_quotas().items()} == seen[0]

    run(tmp_path, check)


def test_acls_are_stored_once_removed_and_replayed(tmp_path: Path) -> None:
    read = AclBinding(2, "orders", 3, "User:alice", "*", 3, 3)
    deny = AclBinding(3, "app-", 4, "User:bob", "10.0.0.1", 2, 2)
    ids: list[uuid.UUID] = []

    async def scenario(b: KRaftMetadataBackend) -> None:
        before = b.acls()
        ids.extend(await b.create_acls([read, deny]))
        assert b.acls() is not before
        assert dict(b.acls()) == dict(zip(ids, [read, deny], strict=True))
        # a binding already stored keeps its id and writes nothing
        offset = b.metadata_log.next_offset
        assert await b.create_acls([read]) == ids[:1]
        assert b.metadata_log.next_offset == offset
        unchanged = b.acls()
        await b.alter_scram_credentials(
            [ScramCredential("carol", 1, b"s", b"k", b"v", 4096)], [])
        assert b.acls() is unchanged  # other changes keep the mapping
        await b.remove_acls([ids[0], uuid.uuid4()])
        assert dict(b.acls()) == {ids[1]: deny}

    run(tmp_path, scenario)

    async def check(b: KRaftMetadataBackend) -> None:
        assert dict(b.acls()) == {ids[1]: deny}

    run(tmp_path, check)


def test_removing_a_scram_credential_that_does_not_exist_is_refused() -> None:
    delta = MetadataDelta(empty_image("c", 1))
    with pytest.raises(MetadataLogError, match="no credential"):
        delta.replay(RemoveUserScramCredentialRecord(name="nobody", mechanism=1))


def test_torn_tail_is_truncated_and_earlier_records_survive(tmp_path: Path) -> None:
    async def create_kept(b: KRaftMetadataBackend) -> None:
        await b.create_topics([NewTopic("kept", 2, 1)])

    async def create_torn(b: KRaftMetadataBackend) -> None:
        await b.create_topics([NewTopic("torn", 2, 1)])

    run(tmp_path, create_kept)
    kept_id = reopen(tmp_path).topics["kept"].topic_id
    run(tmp_path, create_torn)
    path = log_file(tmp_path)
    # A crash halfway through writing the last batch.
    path.write_bytes(path.read_bytes()[:-7])

    with structlog.testing.capture_logs() as logs:
        async def main() -> None:
            b = make_backend(tmp_path)
            await b.start()
            assert "torn" not in b.image.topics
            assert b.image.topics["kept"].topic_id == kept_id
            await b.create_topics([NewTopic("after", 1, 1)])
            await b.stop()

        asyncio.run(main())
    assert any("torn or corrupt tail" in entry["event"] and entry["log_level"] == "warning"
               for entry in logs)
    image = reopen(tmp_path)
    assert set(image.topics) == {"kept", "after"}


def test_corrupt_and_garbage_tails_are_truncated(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        await b.create_topics([NewTopic("kept", 1, 1)])

    run(tmp_path, scenario)
    reopen(tmp_path)  # the last batch is now that start's broker registration
    path = log_file(tmp_path)

    # A flipped bit in the last batch: its CRC no longer matches.
    flipped = bytearray(path.read_bytes())
    flipped[-3] ^= 0x01
    path.write_bytes(bytes(flipped))
    assert "kept" in reopen(tmp_path).topics

    # Garbage after the last intact batch.
    path.write_bytes(path.read_bytes() + b"\x00\x00\x00\x00\x00\x00\x00\x07garbage")
    assert "kept" in reopen(tmp_path).topics
    # every batch left on disk is intact
    decode_batches(path.read_bytes(), allow_partial_tail=False)


def test_intact_batch_of_unknown_record_type_stops_startup(tmp_path: Path) -> None:
    reopen(tmp_path)
    path = log_file(tmp_path)
    data = path.read_bytes()
    last = decode_batches(data, allow_partial_tail=False)[-1]
    # A batch from a newer version: RemoveTopicRecord version 99 (frame, api key, version).
    value = bytearray(encode_value(ApiMessageAndVersion(RemoveTopicRecord(), 0)))
    assert value[:3] == bytes([1, RemoveTopicRecord.API_KEY, 0])
    value[2] = 99
    newer = build_batch([SimpleRecord(value=bytes(value))],
                        base_offset=last.header.last_offset + 1, base_timestamp=0,
                        partition_leader_epoch=last.epoch)
    path.write_bytes(data + newer)

    async def main() -> None:
        with pytest.raises(MetadataLogError, match="99"):
            await make_backend(tmp_path).start()

    asyncio.run(main())
    assert path.read_bytes() == data + newer  # not truncated


def test_records_round_trip_through_a_legacy_batch() -> None:
    # jsonlog is now only the converter's reader of logs written before Kafka's format.
    topic_id = uuid.uuid4()
    records: list[jsonlog.MetadataRecord] = [
        jsonlog.RegisterBrokerRecord(1, uuid.uuid4(), 0, (
            jsonlog.BrokerEndpointRecord("PLAINTEXT", "localhost", 9092,
                                         jsonlog.SecurityProtocol.PLAINTEXT),
            jsonlog.BrokerEndpointRecord("EXTERNAL", "kafka.example", 9093,
                                         jsonlog.SecurityProtocol.SSL),
        ), "r1"),
        jsonlog.TopicRecord("t", topic_id),
        jsonlog.PartitionRecord(topic_id, 0, (1, 2), (1,), 1, 3, 4),
        jsonlog.ConfigRecord(jsonlog.ConfigResourceType.TOPIC, "t", "retention.ms", "5"),
        jsonlog.ConfigRecord(jsonlog.ConfigResourceType.BROKER, "", "num.partitions", None),
        jsonlog.PartitionChangeRecord(topic_id, 0, isr=(1, 2)),
        jsonlog.RemoveTopicRecord(topic_id),
        jsonlog.UserScramCredentialRecord("alice", 1, b"salt", b"\0stored", b"server\xff",
                                          4096),
        jsonlog.RemoveUserScramCredentialRecord("alice", 1),
    ]
    data = jsonlog.encode_batch(42, records)
    assert jsonlog.decode_batch(data, 0) == (42, records, len(data))


def test_register_broker_record_v0_with_one_endpoint_still_loads() -> None:
    # A log written before RegisterBrokerRecord held every endpoint: version 0 with one
    # listener_name/host/port.
    incarnation = uuid.uuid4()
    body = (b'{"broker_id":1,"incarnation_id":"%s","broker_epoch":0,'
            b'"listener_name":"SSL","host":"localhost","port":9093,"rack":null}'
            % str(incarnation).encode())
    payload = (b"\x00\x00\x00\x01" + jsonlog.RECORD_HEADER.pack(
        jsonlog.RegisterBrokerRecord.API_KEY, 0, len(body)) + body)
    data = (jsonlog.BATCH_HEADER.pack(7, 4 + len(payload), crc32c.crc32c(payload))
            + payload)
    _, records, _ = jsonlog.decode_batch(data, 0)
    assert records == [jsonlog.RegisterBrokerRecord(1, incarnation, 0, (
        jsonlog.BrokerEndpointRecord("SSL", "localhost", 9093, jsonlog.SecurityProtocol.SSL),
    ), None)]


def test_every_advertised_endpoint_is_registered_and_replayed(tmp_path: Path) -> None:
    endpoints = (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092),
                 BrokerEndpoint("SSL", "broker.example", 9093, "SSL"))

    async def main() -> None:
        b = KRaftMetadataBackend(tmp_path, [tmp_path], 1,
                                 BrokerRegistration.of(1, endpoints, "r1"),
                                 rng=random.Random(7))
        await b.start()
        try:
            assert b.image.brokers[1].endpoints == endpoints
        finally:
            await b.stop()

    asyncio.run(main())
    # The log holds them all, in the record's endpoints array.
    register = next(r for r in logged_records(tmp_path)
                    if isinstance(r, RegisterBrokerRecord))
    assert register.end_points == (
        BrokerEndpointRecord(name="PLAINTEXT", host="127.0.0.1", port=9092,
                             security_protocol=SecurityProtocol.PLAINTEXT),
        BrokerEndpointRecord(name="SSL", host="broker.example", port=9093,
                             security_protocol=SecurityProtocol.SSL))
    assert not register.fenced and len(register.log_dirs) == 1
    broker = BrokerRegistration.of(1, endpoints, "r1")
    assert broker.endpoint("SSL") == endpoints[1]
    assert broker.endpoint("SASL_SSL") is None
    assert (broker.host, broker.port, broker.listener_name) == ("127.0.0.1", 9092, "PLAINTEXT")


# ---------------------------------------------------------------------------
# controller validation
# ---------------------------------------------------------------------------


def test_duplicate_topic_fails_all_or_nothing(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        await b.create_topics([NewTopic("a", 1, 1)])
        offset = b.metadata_log.next_offset
        await raises(ErrorCode.topic_already_exists,
                     b.create_topics([NewTopic("b", 1, 1), NewTopic("a", 1, 1)]))
        await raises(ErrorCode.invalid_request,
                     b.create_topics([NewTopic("c", 1, 1), NewTopic("c", 1, 1)]))
        await raises(ErrorCode.invalid_topic_exception,
                     b.create_topics([NewTopic("x.y", 1, 1), NewTopic("x_y", 1, 1)]))
        assert set(b.image.topics) == {"a"}
        assert b.metadata_log.next_offset == offset  # nothing was written

    run(tmp_path, scenario)
    assert set(reopen(tmp_path).topics) == {"a"}


def test_invalid_partitions_and_replication_factor(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        await raises(ErrorCode.invalid_partitions, b.create_topics([NewTopic("t", 0, 1)]))
        await raises(ErrorCode.invalid_replication_factor,
                     b.create_topics([NewTopic("t", 1, 0)]))
        await raises(ErrorCode.invalid_replication_factor,
                     b.create_topics([NewTopic("ok", 1, 1), NewTopic("t", 1, 2)]))
        await raises(ErrorCode.invalid_replica_assignment,
                     b.create_topics([NewTopic("t", 0, 0, assignments={0: (1, 5)})]))
        await raises(ErrorCode.invalid_replica_assignment,
                     b.create_topics([NewTopic("t", 0, 0, assignments={1: (1,)})]))
        assert dict(b.image.topics) == {}

    run(tmp_path, scenario)


def test_replica_assignment_is_kafkas_round_robin(tmp_path: Path) -> None:
    # The example of Kafka's AdminUtils: 5 brokers, 10 partitions, 3 replicas.
    layout = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0)
    assert layout[0] == (0, 1, 2)
    assert layout[4] == (4, 0, 1)
    assert layout[5] == (0, 2, 3)
    assert layout[9] == (4, 1, 2)

    async def scenario(b: KRaftMetadataBackend) -> None:
        for node in (2, 3):
            await b.register_broker(registration(node, 9092 + node))
        (topic,) = await b.create_topics([NewTopic("spread", 6, 2)])
        leaders = [p.leader for p in topic.partitions.values()]
        assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
        for p in topic.partitions.values():
            assert len(set(p.replicas)) == 2 and p.leader == p.replicas[0]
            assert p.isr == p.replicas
        await raises(ErrorCode.invalid_replication_factor,
                     b.create_topics([NewTopic("too-many", 1, 4)]))
        (manual,) = await b.create_topics(
            [NewTopic("manual", 0, 0, assignments={0: (3, 1), 1: (2, 3)})]
        )
        assert [p.replicas for p in manual.partitions.values()] == [(3, 1), (2, 3)]
        assert [p.leader for p in manual.partitions.values()] == [3, 2]

    run(tmp_path, scenario)


def test_delete_topics_by_name(tmp_path: Path) -> None:
    old_ids: dict[str, uuid.UUID] = {}

    async def scenario(b: KRaftMetadataBackend) -> None:
        a, _ = await b.create_topics([NewTopic("a", 1, 1, {"retention.ms": "1"}),
                                      NewTopic("b", 1, 1)])
        old_ids["a"] = a.topic_id
        await b.delete_topics(["a"])
        assert set(b.image.topics) == {"b"}
        assert a.topic_id not in b.image.topics_by_id
        await raises(ErrorCode.unknown_topic_or_partition, b.delete_topics(["b", "missing"]))
        assert "b" in b.image.topics
        (again,) = await b.create_topics([NewTopic("a", 1, 1)])
        assert again.topic_id != a.topic_id
        assert dict(again.configs) == {}  # the old topic's configs went with it

    run(tmp_path, scenario)
    image = reopen(tmp_path)
    assert set(image.topics) == {"a", "b"}
    assert image.topics["a"].topic_id != old_ids["a"]
    assert old_ids["a"] not in image.topics_by_id
    assert dict(image.topics["a"].configs) == {}


def test_create_partitions(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        (t,) = await b.create_topics([NewTopic("t", 1, 1)])
        grown = await b.create_partitions("t", 3)
        assert grown.topic_id == t.topic_id
        assert sorted(grown.partitions) == [0, 1, 2]
        assert grown.partitions[2].leader == 1 and grown.partitions[2].isr == (1,)
        assert grown.partitions[0] == t.partitions[0]
        await raises(ErrorCode.invalid_partitions, b.create_partitions("t", 3))
        await raises(ErrorCode.invalid_partitions, b.create_partitions("t", 2))
        await raises(ErrorCode.unknown_topic_or_partition, b.create_partitions("nope", 2))
        await raises(ErrorCode.invalid_replica_assignment,
                     b.create_partitions("t", 5, [(1,)]))
        await raises(ErrorCode.invalid_replica_assignment,
                     b.create_partitions("t", 4, [(7,)]))
        manual = await b.create_partitions("t", 4, [(1,)])
        assert manual.partitions[3].replicas == (1,)

    run(tmp_path, scenario)
    assert sorted(reopen(tmp_path).topics["t"].partitions) == [0, 1, 2, 3]


def test_topic_and_broker_configs_set_and_delete(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        await b.create_topics([NewTopic("t", 1, 1)])
        await b.set_topic_configs("t", {"retention.ms": "1000", "cleanup.policy": "compact"})
        assert dict(b.image.topics["t"].configs) == {
            "retention.ms": "1000", "cleanup.policy": "compact"
        }
        # Replacing drops what is not named any more.
        await b.set_topic_configs("t", {"retention.ms": "2000"})
        assert dict(b.image.topics["t"].configs) == {"retention.ms": "2000"}
        await raises(ErrorCode.unknown_topic_or_partition, b.set_topic_configs("x", {}))

        await b.set_broker_configs(1, {"log.retention.ms": "5", "num.partitions": "2"})
        await b.set_broker_configs(-1, {"num.partitions": "4"})
        await b.set_broker_configs(1, {"num.partitions": "2"})
        assert {k: dict(v) for k, v in b.image.broker_configs.items()} == {
            1: {"num.partitions": "2"}, -1: {"num.partitions": "4"}
        }
        await b.set_broker_configs(-1, {})
        assert -1 not in b.image.broker_configs
        # Setting what is already set writes nothing.
        offset = b.metadata_log.next_offset
        await b.set_topic_configs("t", {"retention.ms": "2000"})
        assert b.metadata_log.next_offset == offset

    run(tmp_path, scenario)
    image = reopen(tmp_path)
    assert dict(image.topics["t"].configs) == {"retention.ms": "2000"}
    assert {k: dict(v) for k, v in image.broker_configs.items()} == {1: {"num.partitions": "2"}}


def test_alter_partition_is_fenced_by_epochs(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        for node in (2, 3):
            await b.register_broker(registration(node, 9092 + node))
        await b.create_topics([NewTopic("t", 0, 0, assignments={0: (1, 2, 3)})])
        p = b.image.partition("t", 0)
        assert p is not None and (p.leader, p.leader_epoch, p.partition_epoch) == (1, 0, 0)

        shrunk = await b.alter_partition("t", 0, (1, 2), leader_epoch=0, partition_epoch=0)
        assert shrunk.isr == (1, 2)
        assert (shrunk.leader, shrunk.leader_epoch, shrunk.partition_epoch) == (1, 0, 1)
        assert b.image.partition("t", 0) == shrunk

        # A request built on the ISR before the shrink.
        await raises(ErrorCode.invalid_update_version,
                     b.alter_partition("t", 0, (1, 2, 3), leader_epoch=0, partition_epoch=0))
        # A request from an older leader.
        await raises(ErrorCode.fenced_leader_epoch,
                     b.alter_partition("t", 0, (1, 2, 3), leader_epoch=-1, partition_epoch=1))
        await raises(ErrorCode.invalid_request,
                     b.alter_partition("t", 0, (2, 3), leader_epoch=0, partition_epoch=1))
        await raises(ErrorCode.invalid_request,
                     b.alter_partition("t", 0, (1, 4), leader_epoch=0, partition_epoch=1))
        await raises(ErrorCode.unknown_topic_or_partition,
                     b.alter_partition("t", 9, (1,), leader_epoch=0, partition_epoch=0))

        grown = await b.alter_partition("t", 0, (1, 2, 3), leader_epoch=0, partition_epoch=1)
        assert (grown.isr, grown.partition_epoch) == ((1, 2, 3), 2)
        # An unchanged ISR is not a change.
        same = await b.alter_partition("t", 0, (1, 2, 3), leader_epoch=0, partition_epoch=2)
        assert same == grown

    run(tmp_path, scenario)
    p = reopen(tmp_path).partition("t", 0)
    assert p is not None and (p.isr, p.leader_epoch, p.partition_epoch) == ((1, 2, 3), 0, 2)


# ---------------------------------------------------------------------------
# publication
# ---------------------------------------------------------------------------


def failing_listener(old: ClusterImage, new: ClusterImage) -> None:
    raise RuntimeError("listener bug")


def test_listeners_see_old_and_new_images(tmp_path: Path) -> None:
    seen: list[tuple[ClusterImage, ClusterImage]] = []

    async def main() -> None:
        b = make_backend(tmp_path)
        b.add_listener(lambda old, new: seen.append((old, new)))
        b.add_listener(failing_listener)  # hides nothing from the others
        await b.start()
        # Replay, then this broker's registration.
        assert [len(new.brokers) for _, new in seen] == [0, 1]
        assert seen[0][1].cluster_id == b.cluster_id
        seen.clear()

        await b.create_topics([NewTopic("t", 1, 1)])
        ((old, new),) = seen
        assert "t" not in old.topics and "t" in new.topics
        assert new is b.image
        await b.set_topic_configs("t", {"retention.ms": "5"})
        old2, new2 = seen[-1]
        assert old2 is new
        assert dict(new.topics["t"].configs) == {}  # published images never change
        assert dict(new2.topics["t"].configs) == {"retention.ms": "5"}
        with pytest.raises(TypeError):
            new2.topics["x"] = new2.topics["t"]  # type: ignore[index]
        with pytest.raises(TypeError):
            new2.topics["t"].partitions[5] = new2.topics["t"].partitions[0]  # type: ignore[index]
        await b.stop()

    with structlog.testing.capture_logs():
        asyncio.run(main())


def test_cancelled_caller_does_not_undo_a_committed_change(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        first = asyncio.ensure_future(b.create_topics([NewTopic("first", 1, 1)]))
        await asyncio.sleep(0)
        first.cancel()
        await b.create_topics([NewTopic("second", 1, 1)])
        assert first.cancelled()
        assert {"first", "second"} <= set(b.image.topics)

    run(tmp_path, scenario)
    assert {"first", "second"} <= set(reopen(tmp_path).topics)


# ---------------------------------------------------------------------------
# plugin
# ---------------------------------------------------------------------------


def test_config_schema_hook() -> None:
    schema = metadata_kraft.MetadataKraftPlugin().kafkernel_config_schema()
    assert isinstance(schema, ConfigSchema)
    assert schema.table == "plugins.metadata_kraft"
    assert schema.build({}, "test.toml") == KRaftSettings()
    assert schema.build({"metadata.log.dir": "meta"}, "test.toml").metadata_log_dir == "meta"
    with pytest.raises(ConfigError, match="unknown key"):
        schema.build({"metadata.log.dirs": "x"}, "test.toml")


# ---------------------------------------------------------------------------
# producer id blocks
# ---------------------------------------------------------------------------


def test_producer_id_blocks_are_consecutive_and_disjoint(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        first = await b.allocate_producer_ids()
        second = await b.allocate_producer_ids()
        assert first == range(0, PRODUCER_ID_BLOCK_SIZE)
        assert second == range(PRODUCER_ID_BLOCK_SIZE, 2 * PRODUCER_ID_BLOCK_SIZE)

    run(tmp_path, scenario)


def test_producer_id_blocks_survive_a_reload_of_the_metadata_log(tmp_path: Path) -> None:
    """A restarted controller replays the ProducerIdsRecords: it never hands out a block
    it handed out before the restart."""
    blocks: list[range] = []

    async def allocate(b: KRaftMetadataBackend) -> None:
        blocks.append(await b.allocate_producer_ids())
        blocks.append(await b.allocate_producer_ids())

    run(tmp_path, allocate)
    run(tmp_path, allocate)
    assert blocks == [range(i * PRODUCER_ID_BLOCK_SIZE, (i + 1) * PRODUCER_ID_BLOCK_SIZE)
                      for i in range(4)]


def test_concurrent_producer_id_allocations_get_distinct_blocks(tmp_path: Path) -> None:
    async def scenario(b: KRaftMetadataBackend) -> None:
        blocks = await asyncio.gather(*(b.allocate_producer_ids() for _ in range(5)))
        ids = [i for block in blocks for i in block]
        assert len(ids) == len(set(ids)) == 5 * PRODUCER_ID_BLOCK_SIZE

    run(tmp_path, scenario)


def test_a_producer_ids_record_that_moves_back_stops_replay(tmp_path: Path) -> None:
    delta = MetadataDelta(empty_image("c", 1), next_producer_id=2000)
    with pytest.raises(MetadataLogError, match="moves the next producer id back"):
        delta.replay(ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=1000))
    delta.replay(ProducerIdsRecord(broker_id=1, broker_epoch=0, next_producer_id=3000))
    assert delta.next_producer_id == 3000
