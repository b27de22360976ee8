"""The single node's metadata log is Kafka's (``__cluster_metadata-0`` segments of Kafka
metadata records): a data dir written by the old JSON-framed log is converted once at
startup with nothing lost, and a torn tail after kill -9 is truncated and startup goes
on. Real broker processes."""

from __future__ import annotations

import datetime
import signal
import uuid
from pathlib import Path

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

from kernel.protocol.records import SimpleRecord, build_batch
from plugins.metadata_kraft import jsonlog
from plugins.metadata_kraft.image import MetadataDelta, empty_image
from plugins.metadata_kraft.properties import new_cluster_id, read_meta_properties, uuid_text
from plugins.metadata_kraft.records.schema import (
    AccessControlEntryRecord,
    FeatureLevelRecord,
    RegisterBrokerRecord,
)
from plugins.metadata_kraft.records.serde import decode_batches, iter_metadata_records
from tests.broker_process import BrokerProcess
from tests.integration.wire import request

TIMEOUT = 20.0
PARTITION_DIR = "__cluster_metadata-0"


def _segment(data: Path) -> Path:
    return data / PARTITION_DIR / "00000000000000000000.log"


def _old_log(data: Path) -> dict[str, object]:
    """A data dir as the previous release wrote it: meta.properties without
    directory.id and ``metadata.records`` holding every record type it had."""
    (data / PARTITION_DIR).mkdir(parents=True)
    (data / "meta.properties").write_text(
        f"cluster.id={new_cluster_id()}\nnode.id=1\nversion=1\n")
    kept, gone = uuid.uuid4(), uuid.uuid4()
    acl_kept, acl_gone = uuid.uuid4(), uuid.uuid4()
    j = jsonlog
    batches: list[list[jsonlog.MetadataRecord]] = [
        [j.RegisterBrokerRecord(1, uuid.uuid4(), 0, (j.BrokerEndpointRecord(
            "PLAINTEXT", "127.0.0.1", 1, j.SecurityProtocol.PLAINTEXT),), None)],
        [j.TopicRecord("kept", kept),
         j.ConfigRecord(j.ConfigResourceType.TOPIC, "kept", "retention.ms", "12345"),
         j.PartitionRecord(kept, 0, (1,), (1,), 1),
         j.PartitionRecord(kept, 1, (1,), (1,), 1)],
        [j.PartitionChangeRecord(kept, 1, isr=(1,), leader=1)],
        [j.TopicRecord("gone", gone), j.PartitionRecord(gone, 0, (1,), (1,), 1)],
        [j.RemoveTopicRecord(gone)],
        [j.ConfigRecord(j.ConfigResourceType.BROKER, "", "log.retention.ms", "999")],
        [j.ProducerIdsRecord(1, 0, 7000)],
        [j.UserScramCredentialRecord("alice", 1, b"salt", b"stored", b"server", 4096),
         j.UserScramCredentialRecord("bob", 2, b"s2", b"k2", b"v2", 8192)],
        [j.RemoveUserScramCredentialRecord("bob", 2)],
        [j.AccessControlEntryRecord(acl_kept, 2, "kept", 3, "User:alice", "*", 3, 3),
         j.AccessControlEntryRecord(acl_gone, 2, "kept", 3, "User:bob", "*", 3, 3)],
        [j.RemoveAccessControlEntryRecord(acl_gone)],
        [j.ClientQuotaRecord((j.QuotaEntityData("user", "alice"),), "producer_byte_rate",
                             1024.0, False)],
    ]
    data_bytes = b""
    offset = 0
    for batch in batches:
        data_bytes += j.encode_batch(offset, batch)
        offset += len(batch)
    (data / PARTITION_DIR / "metadata.records").write_bytes(data_bytes)
    return {"kept": kept, "acl": acl_kept}


def _replayed(data: Path) -> MetadataDelta:
    batches = decode_batches(_segment(data).read_bytes(), allow_partial_tail=False)
    delta = MetadataDelta(empty_image("c", 1))
    for record in iter_metadata_records(batches):
        delta.replay(record.message)
    return delta


def test_an_old_metadata_log_is_converted_once_and_nothing_is_lost(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ids = _old_log(data)
    broker = BrokerProcess(tmp_path, data=data)
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = admin.list_topics(timeout=TIMEOUT).topics
        assert "kept" in topics and "gone" not in topics
        assert len(topics["kept"].partitions) == 2
        described = admin.describe_topics(
            TopicCollection(["kept"]))["kept"].result(TIMEOUT)
        # librdkafka prints a Uuid in standard base64 (+ and /), Kafka's tools URL-safe.
        printed = str(described.topic_id).replace("+", "-").replace("/", "_")
        assert printed == uuid_text(ids["kept"])
        resource = ConfigResource(ConfigResource.Type.TOPIC, "kept")
        configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
        assert configs["retention.ms"].value == "12345"
        answer = request(broker.bootstrap, InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(minutes=1),
            producer_id=-1, producer_epoch=-1))
        assert answer.error_code == ErrorCode.none, answer
        assert int(answer.producer_id) >= 7000  # the old block stays taken
    converted = [e for e in broker.events() if "converted the metadata log" in e["event"]]
    assert len(converted) == 1 and not broker.problems(), broker.log()
    old = data / PARTITION_DIR / "metadata.records"
    assert not old.exists() and old.with_name("metadata.records.migrated").exists()
    props = read_meta_properties(data)
    assert props is not None and len(props["directory.id"]) == 22

    # The new log holds Kafka's records: replayed, every kind of state is there.
    delta = _replayed(data)
    image = delta.apply()
    assert delta.features == {"metadata.version": 30}
    assert image.topics["kept"].topic_id == ids["kept"]
    assert image.broker_configs[-1] == {"log.retention.ms": "999"}
    assert set(delta.scram_credentials) == {("alice", 1)}
    assert list(delta.acls) == [ids["acl"]]
    assert {k: dict(v) for k, v in delta.client_quotas.items()} == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0}}
    first = decode_batches(_segment(data).read_bytes(), allow_partial_tail=False)[0]
    assert first.is_control  # LeaderChange opens the epoch

    # Converted once: the next start reads the Kafka log and converts nothing.
    with BrokerProcess(tmp_path, data=data) as again:
        admin = AdminClient({"bootstrap.servers": again.bootstrap})
        assert "kept" in admin.list_topics(timeout=TIMEOUT).topics
    assert sum("converted the metadata log" in e["event"] for e in again.events()) == 1
    assert any(isinstance(r.message, AccessControlEntryRecord)
               for r in iter_metadata_records(decode_batches(_segment(data).read_bytes())))


def test_a_torn_tail_after_kill_9_is_truncated_and_startup_goes_on(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(tmp_path, data=data).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("before", 1, 1)])[
            "before"].result(TIMEOUT)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGKILL)
        broker.proc.wait(TIMEOUT)
    finally:
        broker.stop()
    segment = _segment(data)
    batches = decode_batches(segment.read_bytes(), allow_partial_tail=False)
    epoch = batches[-1].epoch
    # What a crash halfway through an append leaves: the first part of a batch.
    torn = build_batch([SimpleRecord(value=b"\x01\x02\x00" + b"x" * 40)],
                       base_offset=batches[-1].header.last_offset + 1, base_timestamp=0,
                       partition_leader_epoch=epoch)
    with segment.open("ab") as f:
        f.write(torn[:len(torn) // 2])

    with BrokerProcess(tmp_path, data=data) as again:
        admin = AdminClient({"bootstrap.servers": again.bootstrap})
        assert "before" in admin.list_topics(timeout=TIMEOUT).topics
        admin.create_topics([NewTopic("after", 1, 1)])[
            "after"].result(TIMEOUT)
    assert any("torn or corrupt tail" in e["event"] for e in again.events()), again.log()
    assert not again.problems(), again.problems()
    after = decode_batches(segment.read_bytes(), allow_partial_tail=False)
    # Each start is a new epoch; the broker registered again, unfenced.
    assert after[-1].epoch >= epoch + 1
    registrations = [r.message for r in iter_metadata_records(after)
                     if isinstance(r.message, RegisterBrokerRecord)]
    assert len(registrations) == 2 and not registrations[-1].fenced
    features = [r.message for r in iter_metadata_records(after)
                if isinstance(r.message, FeatureLevelRecord)]
    assert len(features) == 1  # bootstrapped once, on the first start
